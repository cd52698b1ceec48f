import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants.services import ProvisioningError, tenant_provision, tenant_set_limits


class Command(BaseCommand):
    help = (
        "Create a tenant: its schema, domain, an admin user, one API token and the webhook "
        "signing secret (both printed once). With --update, change an existing tenant's "
        "--weight and --max-concurrency instead."
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
            "--update", action="store_true", help="change an existing tenant's limits only"
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args, **opts) -> None:
        if opts["update"]:
            try:
                tenant = tenant_set_limits(
                    slug=opts["slug"],
                    weight=opts["weight"],
                    max_concurrency=opts["max_concurrency"],
                )
            except ProvisioningError as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(
                f"{tenant.slug}: weight {tenant.weight}, max concurrency {tenant.max_concurrency}"
                " (the leader applies them within seconds)"
            )
            return
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
