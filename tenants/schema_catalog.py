"""What a schema holds, read from the catalog in a form two schemas can be compared in.

`schema_snapshot` lists tables, columns, constraints, indexes (their full definitions,
partial conditions included), triggers, sequences with their owners, options and
positions, comments, and the rows migrations write (their records, content types,
permissions), each with the schema's own name taken out. Two schemas built the same way
give equal snapshots. Used by the tests and by `manage.py tenant_template --verify`,
which compares a clone with a freshly migrated schema on the database at hand.
"""

from __future__ import annotations

import re

from psycopg import sql

# Columns in their order (attnum gaps left by dropped columns are not compared: a migrated
# schema that dropped a column keeps the gap, a copy has none; nothing reads attnum).
_COLUMNS = """
SELECT c.relname, rank() OVER (PARTITION BY c.oid ORDER BY a.attnum), a.attname,
       format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attidentity, a.attgenerated,
       pg_get_expr(ad.adbin, ad.adrelid), a.attcollation::regcollation::text,
       col_description(c.oid, a.attnum)
  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  LEFT JOIN pg_attrdef ad ON ad.adrelid = c.oid AND ad.adnum = a.attnum
 WHERE c.relnamespace = %(nsp)s AND c.relkind = 'r'
"""
_TABLES = """
SELECT c.relname, c.relkind, c.relpersistence, c.reltoastrelid <> 0, c.relhasindex,
       obj_description(c.oid, 'pg_class'), c.reloptions::text
  FROM pg_class c WHERE c.relnamespace = %(nsp)s
"""
_CONSTRAINTS = """
SELECT c.relname, con.conname, con.contype, pg_get_constraintdef(con.oid), con.condeferrable,
       con.condeferred, con.convalidated, ic.relname
  FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid
  LEFT JOIN pg_class ic ON ic.oid = con.conindid
 WHERE con.connamespace = %(nsp)s
"""
_INDEXES = """
SELECT c.relname, ic.relname, pg_get_indexdef(i.indexrelid), i.indisunique, i.indisprimary,
       i.indimmediate, i.indisvalid, i.indnullsnotdistinct
  FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_class c ON c.oid = i.indrelid
 WHERE ic.relnamespace = %(nsp)s
"""
_TRIGGERS = """
SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid), t.tgenabled
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relnamespace = %(nsp)s AND NOT t.tgisinternal
"""
_SEQUENCES = """
SELECT s.sequencename, s.data_type::text, s.start_value, s.min_value, s.max_value,
       s.increment_by, s.cycle, s.cache_size, s.last_value, t.relname, a.attname, d.deptype
  FROM pg_sequences s
  JOIN pg_class sc ON sc.relname = s.sequencename AND sc.relnamespace = %(nsp)s
  LEFT JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = sc.oid
       AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
  LEFT JOIN pg_class t ON t.oid = d.refobjid
  LEFT JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
 WHERE s.schemaname = %(name)s
"""
_INFORMATION_SCHEMA = """
SELECT table_name, column_name, data_type, is_nullable, column_default, is_identity,
       identity_generation, is_generated, character_maximum_length, numeric_precision
  FROM information_schema.columns WHERE table_schema = %(name)s
UNION ALL
SELECT table_name, constraint_name, constraint_type, is_deferrable, initially_deferred,
       NULL, NULL, NULL, NULL, NULL
  FROM information_schema.table_constraints WHERE table_schema = %(name)s
   -- its NOT NULL entries are named after oids; columns.is_nullable says the same
   AND constraint_name !~ '^[0-9]+_[0-9]+_[0-9]+_not_null$'
"""
# Rows migrations write, with the ids other rows refer to.
_ROWS = {
    "django_migrations": "SELECT id, app, name FROM {}.django_migrations",
    "django_content_type": "SELECT id, app_label, model FROM {}.django_content_type",
    "auth_permission": "SELECT id, content_type_id, codename, name FROM {}.auth_permission",
}


def schema_snapshot(cursor, schema: str) -> dict[str, list]:
    """The schema's catalog entries and migration rows, sorted, its name replaced by `<s>`
    (the connection's search_path must not include it, so that definitions name it)."""
    cursor.execute("SELECT oid FROM pg_namespace WHERE nspname = %s", [schema])
    row = cursor.fetchone()
    if row is None:
        raise ValueError(f"no schema {schema!r}")
    params = {"nsp": row[0], "name": schema}
    pattern = re.compile(rf'(?<![\w$])("{re.escape(schema)}"|{re.escape(schema)})\.')
    snapshot: dict[str, list] = {}
    for key, query in (
        ("tables", _TABLES),
        ("columns", _COLUMNS),
        ("constraints", _CONSTRAINTS),
        ("indexes", _INDEXES),
        ("triggers", _TRIGGERS),
        ("sequences", _SEQUENCES),
        ("information_schema", _INFORMATION_SCHEMA),
    ):
        cursor.execute(query, params)
        snapshot[key] = sorted((_normalise(r, pattern) for r in cursor.fetchall()), key=repr)
    for table, query in _ROWS.items():
        cursor.execute(sql.SQL(query).format(sql.Identifier(schema)))
        snapshot[f"rows:{table}"] = sorted(cursor.fetchall())
    return snapshot


def snapshot_differences(left: dict[str, list], right: dict[str, list]) -> list[str]:
    """One line per entry found on one side only (empty: the schemas are alike)."""
    lines = []
    for key in sorted(set(left) | set(right)):
        a, b = set(left.get(key, [])), set(right.get(key, []))
        lines += [f"{key}: only in the first: {entry}" for entry in sorted(a - b, key=str)]
        lines += [f"{key}: only in the second: {entry}" for entry in sorted(b - a, key=str)]
    return lines


def _normalise(row: tuple, pattern: re.Pattern) -> tuple:
    return tuple(pattern.sub("<s>.", v) if isinstance(v, str) else v for v in row)
