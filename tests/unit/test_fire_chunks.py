"""Fire chunks: the unit of one transaction and of one lease renewal (pure)."""

from __future__ import annotations


def test_fire_chunks_are_bounded_by_runs_and_by_schemas():
    from types import SimpleNamespace

    from beat.fire import chunks

    due = [SimpleNamespace(schema=f"t{n % 7}") for n in range(30)]
    parts = chunks(due, runs=10, schemas=3)
    assert [e for part in parts for e in part] == due  # every run once, in order
    assert all(len(part) <= 10 and len({e.schema for e in part}) <= 3 for part in parts)
