"""`manage.py rotate_secrets`: re-encrypt every stored secret with the newest key."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django_tenants.utils import get_public_schema_name, schema_context

from alerts.channels import channel_secrets_reseal
from core.encryption import UnsealError, keyring
from jobs.secret_rotation import UnopenableSecret, job_secrets_reseal
from tenants.models import Tenant
from tenants.signing import UnopenableSigningSecret, signing_secrets_reseal


class Command(BaseCommand):
    help = (
        "Re-encrypt the tenants' signing secrets, every job's secret header values and the "
        "alert channels' header values with "
        "the first key of TICKWORK_SECRET_KEYS, tenant by tenant, in batches. Run it after "
        "putting a new key first; remove the old key only once it has succeeded. Running it "
        "again changes nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--batch-size", type=int, default=500, help="rows per transaction")

    def handle(self, *args, **opts) -> None:
        if opts["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        ring = keyring()
        try:
            self._rotate(ring, opts["batch_size"])
        except (UnopenableSecret, UnopenableSigningSecret, UnsealError) as exc:
            raise CommandError(str(exc)) from None

    def _rotate(self, ring, batch_size: int) -> None:
        resealed, current = signing_secrets_reseal(ring=ring, batch_size=batch_size)
        self.stdout.write(
            f"signing secrets: {resealed} re-encrypted, {current} tenants already current"
        )
        values = jobs = 0
        tenants = Tenant.objects.exclude(schema_name=get_public_schema_name()).order_by("id")
        for tenant in tenants.only("id", "schema_name"):
            with schema_context(tenant.schema_name):
                count = job_secrets_reseal(
                    ring=ring, schema=tenant.schema_name, batch_size=batch_size
                )
                channel_values = channel_secrets_reseal(ring=ring)
            if channel_values:
                self.stdout.write(
                    f"{tenant.schema_name}: {channel_values} alert channel header values "
                    "re-encrypted"
                )
            values += channel_values
            if count.values:
                self.stdout.write(
                    f"{tenant.schema_name}: {count.values} secret header values in "
                    f"{count.jobs} jobs re-encrypted ({count.current} jobs already current)"
                )
            values, jobs = values + count.values, jobs + count.jobs
        self.stdout.write(
            f"done: {resealed + values} values re-encrypted ({values} header values in {jobs} "
            f"jobs); every stored secret is now sealed with the newest key"
        )
