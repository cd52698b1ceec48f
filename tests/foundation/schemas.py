"""Helpers for the tests that build and migrate tenant schemas."""

from __future__ import annotations

from django.core.management import call_command


def migrate_schema(schema: str) -> None:
    """`migrate_schemas` for one schema, as a release runs it (the standard executor)."""
    call_command(
        "migrate_schemas",
        schema_name=schema,
        tenant=True,
        executor="standard",
        interactive=False,
        verbosity=0,
    )
