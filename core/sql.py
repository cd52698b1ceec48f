"""Schema-qualified SQL helpers shared by the engine and the workers.

The leader and the workers work across every tenant schema, so they name tables as
`"<schema>"."<table>"` instead of switching the connection's search_path, and they pass
batches as single preformatted array literals.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime

from django.db import connection, transaction
from psycopg import sql


def pg_array(values: list) -> str:
    """A PostgreSQL array literal, e.g. `{1,2,3}`, to pass with a `::type[]` cast.

    psycopg adapts a Python list element by element in Python; for the thousands of ids
    and instants of one tick a single preformatted literal is several times cheaper.
    Elements are ids, instants and our own status words: none needs escaping beyond the
    quotes that keep empty strings and ISO instants whole."""
    parts = []
    for value in values:
        if value is None:
            parts.append("NULL")
        elif isinstance(value, datetime):
            parts.append(f'"{value.isoformat()}"')
        elif isinstance(value, str):
            parts.append(f'"{value}"')
        else:
            parts.append(str(value))
    return "{" + ",".join(parts) + "}"


def uuid_array(ids: list) -> str:
    """`pg_array` for a column of UUIDs: `UUID.hex` is the cheapest text of a UUID that
    PostgreSQL reads (the fire's reads pass thousands)."""
    return "{" + ",".join(getattr(i, "hex", None) or str(i) for i in ids) + "}"


def table(schema: str, name: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(name))


# The stand-in schema a `per_schema` statement is rendered with, once; no real schema is
# named so (tenant schemas are `t_<slug>`) and no statement holds the word otherwise.
_SLOT = "tickwork_any_schema"
_QUOTED_SLOT = '"' + _SLOT + '"'


@functools.lru_cache(maxsize=65536)
def quoted_schema(schema: str) -> str:
    return sql.Identifier(schema).as_string()


def per_schema(build: Callable[[str], sql.Composable]) -> Callable[[str], sql.SQL]:
    """`build(schema)`, composed and rendered once for every schema.

    The leader's statements over a chunk of 25 tenant schemas were as costly to compose
    in Python (a `sql.Identifier` per column, a `format` per fragment, for each schema) as
    PostgreSQL took to run them; a tenant schema changes only the schema's quoted name,
    so the text is rendered once with a stand-in and the stand-in replaced.
    tests/unit/test_per_schema_sql.py checks the result against `build` composed as
    before."""
    rendered: list[str] = []

    @functools.wraps(build)
    def query(schema: str) -> sql.SQL:
        if not rendered:
            text = build(_SLOT).as_string()
            if _QUOTED_SLOT not in text:
                raise ValueError(f"{build.__qualname__} does not name its schema")
            rendered.append(text)
        return sql.SQL(rendered[0].replace(_QUOTED_SLOT, quoted_schema(schema)))

    query.composed = build  # type: ignore[attr-defined]  # for the equivalence test
    return query


def tagged_ctes(queries: list[sql.Composable]) -> sql.Composed:
    """One statement of several schemas' queries as CTEs, each one's rows tagged with its
    position: `WITH q0 AS (...), q1 AS (...) SELECT 0, q0.* FROM q0 UNION ALL ...`. Unlike
    `tagged_union`, a query may lock rows or modify data (a data-modifying CTE runs to
    completion whether its rows are read or not)."""
    ctes = sql.SQL(", ").join(
        sql.SQL("q{n} AS ({query})").format(n=sql.SQL(str(n)), query=query)
        for n, query in enumerate(queries)
    )
    reads = sql.SQL(" UNION ALL ").join(
        sql.SQL("SELECT {n}, q{n}.* FROM q{n}").format(n=sql.SQL(str(n)))
        for n in range(len(queries))
    )
    return sql.SQL("WITH {} {}").format(ctes, reads)


def tagged_union(parts: Iterable[tuple[int, sql.Composable]]) -> sql.Composed:
    """One statement of several schemas' queries: `UNION ALL` of each, every row starting
    with its query's tag (a tenant id, or a position), so that a chunk of tenants costs one
    round trip instead of one each."""
    return sql.SQL(" UNION ALL ").join(
        sql.SQL("(SELECT {tag}::bigint, q.* FROM ({query}) q)").format(
            tag=sql.Literal(tag), query=query
        )
        for tag, query in parts
    )


def one_of(values: tuple[str, ...] | list[str]) -> sql.Composable:
    """`('a', 'b')` for `status IN {}`: literals rather than a parameter, so that the
    planner can prove a partial index's predicate (`WHERE status = 'scheduled'`) even for a
    prepared statement's generic plan. Used with the named sets of `runs.states`."""
    return sql.SQL("({})").format(sql.SQL(", ").join(sql.Literal(v) for v in values))


@contextmanager
def without_waiting_for_disk() -> Iterator[None]:
    """Writes whose loss in a crash costs nothing (a hint that the next sweep recomputes, a
    last-used time) commit without waiting for the WAL flush: on a disk where a durable
    commit takes milliseconds, that is most of a request. Inside a transaction the caller
    owns the commit, so nothing changes there: its durability is never weakened."""
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit = off")
        yield
