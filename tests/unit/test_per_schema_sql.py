"""`core.sql.per_schema`: a statement rendered once and re-aimed at each schema must be
the very text its builder composes for that schema."""

from __future__ import annotations

import importlib

import pytest
from psycopg import sql

from core.sql import per_schema

MODULES = ("beat.store", "beat.sweeps", "beat.admission_control", "runs.dags", "runs.execution")
MODULES += ("runs.heartbeat",)


def _cached_builders() -> list[tuple[str, object]]:
    found = []
    for name in MODULES:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if callable(value) and hasattr(value, "composed"):
                found.append((f"{name}.{attr}", value))
    return found


BUILDERS = _cached_builders()


def test_the_leaders_and_workers_statements_are_cached() -> None:
    names = {name.rsplit(".", 1)[1] for name, _ in BUILDERS}
    # The grouped statements of the leader and the worker's claim and finish.
    assert {"_lock_query", "_insert_runs_sql", "_publishable_sql", "any_waiting_query"} <= names
    assert {"_claim_sql", "_finish_sql", "_beat_sql", "_active_runs_sql"} <= names


@pytest.mark.parametrize("schema", ["t_acme", "t_bench_m_00042", 'odd"name'])
@pytest.mark.parametrize(("name", "query"), BUILDERS, ids=[n for n, _ in BUILDERS])
def test_a_cached_statement_is_the_composed_one(name: str, query, schema: str) -> None:
    assert query(schema).as_string() == query.composed(schema).as_string()
    # The one before does not leak into the next: each call is aimed at its own schema.
    assert query("t_other").as_string() == query.composed("t_other").as_string()


def test_a_builder_that_does_not_name_its_schema_is_refused() -> None:
    @per_schema
    def no_schema(schema: str) -> sql.Composable:
        return sql.SQL("SELECT 1")

    with pytest.raises(ValueError, match="does not name its schema"):
        no_schema("t_acme")
