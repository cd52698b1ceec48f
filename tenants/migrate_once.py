"""The system checks of a `migrate_schemas` run, once rather than once per schema.

django-tenants runs Django's whole `migrate` command in each schema, and each runs the
system checks again (with the database-tagged ones `migrate` adds), after `migrate_schemas`
itself ran them. They look at the code, the settings and the connection's features, never
at a schema: about a tenth of a schema's upgrade here, for nothing (ADR 0028). They run
once, before the first schema, and the schemas' runs are told to skip them.
"""

from __future__ import annotations

from django.core.management.commands.migrate import Command as MigrateCommand


def run_checks_once(options: dict) -> dict:
    """Run the system checks each schema's `migrate` would (unless `--skip-checks`), and
    return the options for the schemas' runs, which then skip them. Raises Django's
    SystemCheckError on an error, before any schema is touched, as `migrate` would."""
    if options.get("skip_checks"):
        return options
    command = MigrateCommand()
    command.check(**command.get_check_kwargs({"database": options["database"]}))
    return {**options, "skip_checks": True}
