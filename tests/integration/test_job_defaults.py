"""The database defaults of `jobs_job`, which rows written without the ORM (a COPY, a raw
INSERT, a column added to existing rows) get."""

from __future__ import annotations

from django.db import connection


def test_extra_specs_defaults_to_an_empty_json_array(live, alpha):
    """A bare `Value([])` reaches PostgreSQL as an SQL array literal, `{}`, which jsonb
    stores as an empty object (jobs 0004 did that; 0007 sets the array)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_default FROM information_schema.columns"
            " WHERE table_schema = %s AND table_name = 'jobs_job' AND column_name = 'extra_specs'",
            [alpha.tenant.schema_name],
        )
        [default] = cursor.fetchone()
        cursor.execute(f"SELECT jsonb_typeof({default})")
        assert cursor.fetchone() == ("array",)
