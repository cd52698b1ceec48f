"""Copy a migrated schema into a new one, object by object, in one round trip.

What a tenant schema holds after its migrations ran is tables (with their columns, defaults,
identity sequences, constraints and indexes, partial ones included, and triggers calling
functions outside the schema) and the rows the
migrations and their post_migrate handlers wrote (django_migrations, content types,
permissions). `clone_recipe` reads all of that from the catalog of a template schema and
returns the statements that rebuild it under another name; `clone_run` executes them.

Exactness matters more than generality: names are kept (later migrations drop indexes and
constraints by name, so `CREATE TABLE ... LIKE`, which renames them, will not do), every
identity column gets its own sequence, set past the rows copied (an empty table starts
afresh, never from the template's value), and anything in the template the recipe does
not reproduce (views, functions, disabled triggers, types, grants, standalone sequences...) makes
`clone_recipe` raise `CloneUnsupported`, so that the caller runs the migrations instead of
producing a schema that differs from a migrated one. tests/foundation/test_tenant_template.py
compares a clone with a freshly migrated schema, catalog entry by catalog entry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Where the new schema's (quoted) name goes in a recipe's statements. PostgreSQL text can
# hold no NUL character, so nothing read from the catalog can be mistaken for it.
_SLOT = "\x00"


class CloneUnsupported(Exception):
    """The template holds something a clone would not reproduce; migrate instead."""


@dataclass(frozen=True)
class CloneRecipe:
    template: str
    statements: tuple[str, ...]

    def script(self, schema: str) -> str:
        """The statements for `schema`, as one script (one round trip)."""
        quoted = '"' + schema.replace('"', '""') + '"'
        return ";\n".join(s.replace(_SLOT, quoted) for s in self.statements)


_UNSUPPORTED = """
SELECT 'relation ' || c.relname || ' of kind ' || c.relkind::text FROM pg_class c
 WHERE c.relnamespace = %(nsp)s AND c.relkind NOT IN ('r', 'i', 'S')
UNION ALL
SELECT 'table ' || c.relname || ': ' || concat_ws(', ',
        CASE WHEN c.relpersistence <> 'p' THEN 'not logged' END,
        CASE WHEN c.relispartition OR EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid = c.oid
             OR i.inhparent = c.oid) THEN 'inheritance' END,
        CASE WHEN c.reloptions IS NOT NULL THEN 'storage options' END,
        CASE WHEN c.reltablespace <> 0 THEN 'tablespace' END,
        CASE WHEN c.relrowsecurity THEN 'row security' END,
        CASE WHEN c.relacl IS NOT NULL THEN 'grants' END,
        CASE WHEN c.relhasrules THEN 'rules' END,
        CASE WHEN c.relreplident <> 'd' THEN 'replica identity' END,
        CASE WHEN EXISTS (SELECT FROM pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal
                          AND t.tgenabled <> 'O') THEN 'triggers not enabled' END,
        CASE WHEN EXISTS (SELECT FROM pg_policy p WHERE p.polrelid = c.oid) THEN 'policies' END,
        CASE WHEN EXISTS (SELECT FROM pg_statistic_ext s WHERE s.stxrelid = c.oid)
             THEN 'extended statistics' END)
  FROM pg_class c
 WHERE c.relnamespace = %(nsp)s AND c.relkind = 'r'
   AND (c.relpersistence <> 'p' OR c.relispartition OR c.reloptions IS NOT NULL
        OR c.reltablespace <> 0 OR c.relrowsecurity OR c.relacl IS NOT NULL OR c.relhasrules
        OR c.relreplident <> 'd'
        OR EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid = c.oid OR i.inhparent = c.oid)
        OR EXISTS (SELECT FROM pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal
                   AND t.tgenabled <> 'O')
        OR EXISTS (SELECT FROM pg_policy p WHERE p.polrelid = c.oid)
        OR EXISTS (SELECT FROM pg_statistic_ext s WHERE s.stxrelid = c.oid))
UNION ALL
SELECT 'sequence ' || c.relname || ' (not an identity column''s)' FROM pg_class c
 WHERE c.relnamespace = %(nsp)s AND c.relkind = 'S'
   AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                   AND d.objid = c.oid AND d.deptype = 'i')
UNION ALL
SELECT 'sequence ' || c.relname || ': grants or options' FROM pg_class c
 WHERE c.relnamespace = %(nsp)s AND c.relkind = 'S'
   AND (c.relacl IS NOT NULL OR c.relpersistence <> 'p')
UNION ALL
SELECT 'index ' || c.relname || ': tablespace' FROM pg_class c
 WHERE c.relnamespace = %(nsp)s AND c.relkind = 'i' AND c.reltablespace <> 0
UNION ALL
SELECT 'constraint ' || con.conname || ': index options' FROM pg_constraint con
  JOIN pg_class i ON i.oid = con.conindid
 WHERE con.connamespace = %(nsp)s AND con.contype IN ('p', 'u', 'x') AND i.reloptions IS NOT NULL
UNION ALL
SELECT 'constraint ' || con.conname || ' of type ' || con.contype::text FROM pg_constraint con
 WHERE con.connamespace = %(nsp)s AND con.contype NOT IN ('p', 'u', 'x', 'c', 'f')
UNION ALL
SELECT 'comment on ' || d.classoid::regclass::text || ' ' || d.objoid FROM pg_description d
 WHERE (d.classoid = 'pg_constraint'::regclass
        AND d.objoid IN (SELECT oid FROM pg_constraint WHERE connamespace = %(nsp)s))
    OR (d.classoid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objoid IN
        (SELECT oid FROM pg_class WHERE relnamespace = %(nsp)s AND relkind IN ('i', 'S')))
UNION ALL
SELECT 'function ' || proname FROM pg_proc WHERE pronamespace = %(nsp)s
UNION ALL
SELECT 'type ' || t.typname FROM pg_type t
 WHERE t.typnamespace = %(nsp)s AND t.typrelid = 0
   AND NOT EXISTS (SELECT FROM pg_type e WHERE e.oid = t.typelem AND e.typrelid <> 0)
UNION ALL
SELECT 'collation ' || collname FROM pg_collation WHERE collnamespace = %(nsp)s
UNION ALL
SELECT 'operator ' || oprname FROM pg_operator WHERE oprnamespace = %(nsp)s
UNION ALL
SELECT 'extension ' || extname FROM pg_extension WHERE extnamespace = %(nsp)s
"""

# One row per column, tables in name order and columns in their order, with what an exact
# column definition needs: type, collation when not the type's, default or generation
# expression, identity and its sequence's name and options, and comments.
_COLUMNS = """
SELECT quote_ident(c.relname), quote_ident(a.attname), format_type(a.atttypid, a.atttypmod),
       a.attnotnull, a.attidentity, a.attgenerated, pg_get_expr(ad.adbin, ad.adrelid),
       CASE WHEN a.attcollation <> 0 AND a.attcollation <> t.typcollation
            THEN quote_ident(cn.nspname) || '.' || quote_ident(co.collname) END,
       quote_ident(s.relname), sq.seqtypid = a.atttypid, sq.seqstart, sq.seqincrement,
       sq.seqmin, sq.seqmax, sq.seqcache, sq.seqcycle,
       quote_literal(col_description(c.oid, a.attnum)),
       quote_literal(obj_description(c.oid, 'pg_class'))
  FROM pg_class c
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  JOIN pg_type t ON t.oid = a.atttypid
  LEFT JOIN pg_attrdef ad ON ad.adrelid = c.oid AND ad.adnum = a.attnum
  LEFT JOIN pg_collation co ON co.oid = a.attcollation
  LEFT JOIN pg_namespace cn ON cn.oid = co.collnamespace
  LEFT JOIN pg_depend d ON d.refclassid = 'pg_class'::regclass AND d.refobjid = c.oid
       AND d.refobjsubid = a.attnum AND d.classid = 'pg_class'::regclass AND d.deptype = 'i'
  LEFT JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
  LEFT JOIN pg_sequence sq ON sq.seqrelid = s.oid
 WHERE c.relnamespace = %(nsp)s AND c.relkind = 'r'
 ORDER BY c.relname, a.attnum
"""

# Constraints, foreign keys last. The others go inside their CREATE TABLE (cheaper than an
# ALTER TABLE each), and their indexes come with them.
_CONSTRAINTS = """
SELECT quote_ident(c.relname), quote_ident(con.conname), con.contype = 'f' OR NOT con.convalidated,
       pg_get_constraintdef(con.oid)
  FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid
 WHERE con.connamespace = %(nsp)s AND con.contype IN ('p', 'u', 'x', 'c', 'f')
 ORDER BY c.relname, con.conname
"""

# Indexes that no constraint owns (those come with their constraint), partial ones included.
_INDEXES = """
SELECT pg_get_indexdef(i.indexrelid)
  FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
 WHERE ic.relnamespace = %(nsp)s
   AND NOT EXISTS (SELECT FROM pg_constraint con WHERE con.conindid = i.indexrelid
                   AND con.contype IN ('p', 'u', 'x'))
 ORDER BY ic.relname
"""

# Triggers (their functions live outside the schema: one that does not is refused, as a
# function of the schema is), after the rows are copied, so that the copy fires none.
_TRIGGERS = """
SELECT pg_get_triggerdef(t.oid)
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relnamespace = %(nsp)s AND NOT t.tgisinternal
 ORDER BY c.relname, t.tgname
"""


@dataclass
class _Table:
    name: str
    elements: list[str]  # column definitions, then inline constraints
    copied: list[str]  # the columns whose values are copied (not generated ones)
    identities: list[tuple[str, str]]  # (column, sequence)
    comments: list[str]
    has_rows: bool = False


def clone_recipe(cursor, template: str) -> CloneRecipe:
    """Read the template schema's catalog; CloneUnsupported if it holds anything a clone
    would not reproduce. The connection's search_path must not include the template (so
    that the catalog's definitions name its objects qualified)."""
    nsp, quoted = _namespace(cursor, template)
    cursor.execute(_UNSUPPORTED, {"nsp": nsp})
    unsupported = sorted(r[0] for r in cursor.fetchall())
    if unsupported:
        raise CloneUnsupported(f"{template} holds {'; '.join(unsupported[:5])}")
    tables = _tables(cursor, nsp)
    _mark_rows(cursor, tables, quoted)
    cursor.execute(_CONSTRAINTS, {"nsp": nsp})
    altered = []
    for tab, name, later, definition in cursor.fetchall():
        definition = definition.replace(f"REFERENCES {quoted}.", f"REFERENCES {_SLOT}.")
        if later:  # a foreign key (its table may come first), or one added NOT VALID
            altered.append(f"ALTER TABLE {_SLOT}.{tab} ADD CONSTRAINT {name} {definition}")
        else:
            tables[tab].elements.append(f"CONSTRAINT {name} {definition}")
    cursor.execute(_INDEXES, {"nsp": nsp})
    indexes = [r[0].replace(f" ON {quoted}.", f" ON {_SLOT}.", 1) for r in cursor.fetchall()]
    cursor.execute(_TRIGGERS, {"nsp": nsp})
    triggers = [r[0].replace(f" ON {quoted}.", f" ON {_SLOT}.", 1) for r in cursor.fetchall()]
    creates = [f"CREATE SCHEMA {_SLOT}"]
    creates += [f"CREATE TABLE {_SLOT}.{t.name} ({', '.join(t.elements)})" for t in tables.values()]
    later = indexes + altered + triggers + [c for t in tables.values() for c in t.comments]
    for statement in creates + later:
        _refuse_template_reference(statement, template, quoted)
    # Rows before the indexes and foreign keys (no check per row); sequences past them.
    filled = [t for t in tables.values() if t.has_rows]
    copies = [_copy_rows(t, quoted) for t in filled]
    copies += [_set_sequence(t, col, seq) for t in filled for col, seq in t.identities]
    statements = creates + copies + later
    return CloneRecipe(template=template, statements=tuple(statements))


def clone_run(cursor, recipe: CloneRecipe, schema: str) -> None:
    """Create `schema` as a copy of the recipe's template, in the caller's transaction."""
    cursor.execute(recipe.script(schema))


def _namespace(cursor, template: str) -> tuple[int, str]:
    cursor.execute(
        "SELECT n.oid, quote_ident(n.nspname), n.nspname = ANY (current_schemas(true)) "
        "FROM pg_namespace n WHERE n.nspname = %s",
        [template],
    )
    row = cursor.fetchone()
    if row is None:
        raise CloneUnsupported(f"schema {template!r} does not exist")
    if row[2]:
        raise CloneUnsupported(f"schema {template!r} is on the search_path")
    return row[0], row[1]


def _tables(cursor, nsp: int) -> dict[str, _Table]:
    cursor.execute(_COLUMNS, {"nsp": nsp})
    tables: dict[str, _Table] = {}
    for row in cursor.fetchall():
        name, column, kind, not_null, identity, generated, expression, collation = row[:8]
        seq, same_type, start, inc, low, high, cache, cycle, col_comment, tab_comment = row[8:]
        table = tables.get(name)
        if table is None:
            table = tables[name] = _Table(name, [], [], [], [])
            if tab_comment:
                table.comments.append(f"COMMENT ON TABLE {_SLOT}.{name} IS {tab_comment}")
        parts = [column, kind]
        if collation:
            parts.append(f"COLLATE {collation}")
        if generated == "s":
            parts.append(f"GENERATED ALWAYS AS ({expression}) STORED")
        elif identity:
            if seq is None or not same_type:
                raise CloneUnsupported(f"{name}.{column}: identity sequence not of its type")
            mode = "ALWAYS" if identity == "a" else "BY DEFAULT"
            parts.append(
                f"GENERATED {mode} AS IDENTITY (SEQUENCE NAME {_SLOT}.{seq} "
                f"START WITH {start} INCREMENT BY {inc} MINVALUE {low} MAXVALUE {high} "
                f"CACHE {cache} {'CYCLE' if cycle else 'NO CYCLE'})"
            )
            table.identities.append((column, seq))
        elif expression is not None:
            parts.append(f"DEFAULT {expression}")
        if not_null:
            parts.append("NOT NULL")
        table.elements.append(" ".join(parts))
        if generated != "s":
            table.copied.append(column)
        if col_comment:
            table.comments.append(f"COMMENT ON COLUMN {_SLOT}.{name}.{column} IS {col_comment}")
    return tables


def _mark_rows(cursor, tables: dict[str, _Table], quoted: str) -> None:
    """Which tables hold rows (those migrations wrote: their records, content types,
    permissions): only those are copied."""
    if not tables:
        return
    probes = " UNION ALL ".join(
        f"SELECT {_literal(name)} WHERE EXISTS (SELECT FROM {quoted}.{name})" for name in tables
    )
    cursor.execute(probes)
    for (name,) in cursor.fetchall():
        tables[name].has_rows = True


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _copy_rows(table: _Table, quoted: str) -> str:
    columns = ", ".join(table.copied)
    return (
        f"INSERT INTO {_SLOT}.{table.name} ({columns}) OVERRIDING SYSTEM VALUE "
        f"SELECT {columns} FROM {quoted}.{table.name}"
    )


def _set_sequence(table: _Table, column: str, sequence: str) -> str:
    # Past the largest id copied, so that the next insert cannot collide. The sequences of
    # empty tables stay as created, at their start (never at the template's value).
    regclass = _literal(f"{_SLOT}.{sequence}")
    return (
        f"SELECT setval({regclass}, max({column})) FROM {_SLOT}.{table.name} "
        f"HAVING max({column}) IS NOT NULL"
    )


def _refuse_template_reference(statement: str, template: str, quoted: str) -> None:
    """A definition that still names the template after the rewrite (a default calling a
    function of the template, a reference the rewrite missed) would tie the clone to the
    template: refuse rather than produce it."""
    if re.search(rf"(?<![\w$]){re.escape(quoted)}\.", statement):
        raise CloneUnsupported(f"a definition refers to {template}: {statement[:200]}")
