import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants.services import (
    DEFAULT_RETENTION,
    ProvisioningError,
    retention_days_of,
    tenant_provision,
    tenant_set_limits,
)


def _retention(value: str) -> int | str:
    """`--retention-days`: a number of days, or `default` (the fleet's setting)."""
    if value.strip().lower() == DEFAULT_RETENTION:
        return DEFAULT_RETENTION
    try:
        return int(value)
    except ValueError:
        raise CommandError(
            f"--retention-days {value!r}: expected a number of days or 'default'"
        ) from None


class Command(BaseCommand):
    help = (
        "Create a tenant: its schema, domain, an admin user, one API token and the webhook "
        "signing secret (both printed once). With --update, change an existing tenant's "
        "--weight, --max-concurrency and --retention-days instead."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--domain", help="default: SLUG.localhost")
        parser.add_argument("--name", help="display name (default: the slug)")
        parser.add_argument("--admin-user", default="admin")
        parser.add_argument("--admin-password", help="default: a random password, printed")
        parser.add_argument(
            "--weight", type=int, help="fair-share weight (default SCHEDULER_TENANT_DEFAULT_WEIGHT)"
        )
        parser.add_argument(
            "--max-concurrency",
            type=int,
            help="runs in flight at once (default SCHEDULER_TENANT_DEFAULT_MAX_CONCURRENCY)",
        )
        parser.add_argument(
            "--retention-days",
            help="with --update: days its ended runs are kept (1-3650), or 'default' for "
            "RUN_RETENTION_DAYS",
        )
        parser.add_argument(
            "--update", action="store_true", help="change an existing tenant's limits only"
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args, **opts) -> None:
        retention = opts["retention_days"]
        if opts["update"]:
            try:
                tenant = tenant_set_limits(
                    slug=opts["slug"],
                    weight=opts["weight"],
                    max_concurrency=opts["max_concurrency"],
                    retention_days=None if retention is None else _retention(retention),
                )
            except ProvisioningError as exc:
                raise CommandError(str(exc)) from None
            days = retention_days_of(tenant)
            kept = f"{days} days" if days else "for ever"
            origin = "its own" if tenant.run_retention_days is not None else "the default"
            self.stdout.write(
                f"{tenant.slug}: weight {tenant.weight}, max concurrency {tenant.max_concurrency},"
                f" runs kept {kept} ({origin}) (the leader applies them within seconds)"
            )
            return
        if retention is not None:
            raise CommandError("--retention-days goes with --update (after provisioning)")
        try:
            result = tenant_provision(
                slug=opts["slug"],
                domain=opts["domain"],
                name=opts["name"],
                admin_user=opts["admin_user"],
                admin_password=opts["admin_password"],
                weight=opts["weight"],
                max_concurrency=opts["max_concurrency"],
            )
        except ProvisioningError as exc:
            raise CommandError(str(exc)) from None
        info = {
            "tenant": result.tenant.slug,
            "schema": result.tenant.schema_name,
            "domain": result.domain,
            "admin_user": result.admin_user,
            "admin_password": result.admin_password,
            "token": result.token.plain,
            "signing_secret": result.signing_secret,
        }
        if opts["json"]:
            self.stdout.write(json.dumps(info))
            return
        for key, value in info.items():
            self.stdout.write(f"{key:15} {value}")
        self.stdout.write(
            "The token and the signing secret are shown only this once; store them now."
        )
