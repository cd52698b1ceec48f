"""Schema-qualified SQL helpers shared by the engine and the workers.

The leader and the workers work across every tenant schema, so they name tables as
`"<schema>"."<table>"` instead of switching the connection's search_path, and they pass
batches as single preformatted array literals.
"""

from __future__ import annotations

from datetime import datetime

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


def table(schema: str, name: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(name))
