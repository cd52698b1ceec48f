"""What every tenant schema's `migrate` computes alike, done once per `migrate_schemas` run.

django-tenants runs Django's whole `migrate` command in each schema. Two of its steps give
the same answer in every schema and cost about a third of a schema's upgrade here (ADR 0028):
- **The system checks**, run again by each schema's `migrate` after `migrate_schemas`
  itself ran them: they look at the code, the settings and the connection's features,
  not at a schema. They run once, with the database checks `migrate` adds, before the
  first schema; the schemas' runs are then told to skip them.
- **The project state of the applied migrations**, which `migrate` renders into model
  classes for the pre_migrate signal and then migrates a copy of. It follows from the
  migration graph and the set of migrations the schema recorded (and the apps without
  migrations), so schemas at the same point share one rendered state: each run gets a
  copy (`ProjectState.clone()`, what `migrate` itself hands the executor), never the
  shared one. Replacing `MigrationExecutor._create_project_state` for the length of the
  run is the one hook there is: the executor is built inside Django's `migrate`.

Applying a migration, the post_migrate handlers (content types, permissions) and the
writes are still done in, and for, each schema.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.core.management.commands.migrate import Command as MigrateCommand
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.state import ProjectState

StateKey = tuple[frozenset, frozenset, frozenset]


def run_checks_once(options: dict) -> dict:
    """Run the system checks each schema's `migrate` would (unless `--skip-checks`), and
    return the options for the schemas' runs, which then skip them. Raises Django's
    SystemCheckError on an error, before any schema is touched, as `migrate` would."""
    if options.get("skip_checks"):
        return options
    command = MigrateCommand()
    command.check(**command.get_check_kwargs({"database": options["database"]}))
    return {**options, "skip_checks": True}


def _key(executor: MigrationExecutor) -> StateKey:
    loader = executor.loader
    nodes = loader.graph.nodes
    applied = frozenset(key for key in loader.applied_migrations if key in nodes)
    return (frozenset(nodes), applied, frozenset(loader.unmigrated_apps))


@contextmanager
def shared_project_states() -> Iterator[dict[StateKey, ProjectState]]:
    """While open (in this process, and in processes forked from it), schemas with the
    same migrations recorded share one rendered pre-migrate state; yields the states
    held, by key."""
    original = MigrationExecutor._create_project_state
    states: dict[StateKey, ProjectState] = {}

    def create(self: MigrationExecutor, with_applied_migrations: bool = False) -> ProjectState:
        if not with_applied_migrations:
            return original(self, with_applied_migrations)
        key = _key(self)
        state = states.get(key)
        if state is None:
            state = original(self, True)
            state.apps  # noqa: B018 - rendered once here; every copy then carries it
            states[key] = state
        return state.clone()

    MigrationExecutor._create_project_state = create  # type: ignore[method-assign]
    try:
        yield states
    finally:
        MigrationExecutor._create_project_state = original  # type: ignore[method-assign]
