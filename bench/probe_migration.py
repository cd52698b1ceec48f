"""A migration the code gains for a while (as after a release), for the tenant-upgrade
benchmark and the template tests: it adds a column and a partial index to `jobs_job` and
drops an index and a constraint by the names earlier migrations gave them (so that it
fails on a schema whose names differ from a migrated one's)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import migrations, models
from django.db.migrations.loader import MigrationLoader
from django.db.models import Q

from tenants.schema_template import code_migrations

PROBE = ("jobs", "9999_template_probe")


def jobs_leaf() -> tuple[str, str]:
    return MigrationLoader(None, ignore_no_migrations=True).graph.leaf_nodes("jobs")[0]


@contextmanager
def probe_migration() -> Iterator[tuple[str, str]]:
    """While open, every MigrationLoader (in this process and in processes forked from it)
    sees the probe after the jobs app's last migration; yields that migration's key."""
    leaf = jobs_leaf()

    class Probe(migrations.Migration):
        dependencies = [leaf]
        operations = [
            migrations.AddField("job", "probe_level", models.IntegerField(null=True)),
            migrations.AddIndex(
                "job",
                models.Index(
                    fields=["probe_level"],
                    condition=Q(probe_level__gt=0),
                    name="job_probe_partial_idx",
                ),
            ),
            migrations.RemoveIndex("job", "job_updated_idx"),
            migrations.RemoveConstraint("dependency", "dependency_unique"),
        ]

    probe = Probe(PROBE[1], PROBE[0])
    original = MigrationLoader.load_disk

    def load_disk(self: MigrationLoader) -> None:
        original(self)
        self.disk_migrations[PROBE] = probe

    MigrationLoader.load_disk = load_disk  # type: ignore[method-assign]
    code_migrations.cache_clear()
    try:
        yield leaf
    finally:
        MigrationLoader.load_disk = original  # type: ignore[method-assign]
        code_migrations.cache_clear()
