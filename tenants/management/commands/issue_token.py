import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants.models import Tenant
from tenants.tokens import token_issue


class Command(BaseCommand):
    help = "Issue another API token for a tenant (printed once; only its digest is stored)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--name", default="cli")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **opts) -> None:
        tenant = Tenant.objects.filter(slug=opts["slug"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {opts['slug']!r}: create it with provision_tenant")
        issued = token_issue(tenant=tenant, name=opts["name"])
        if opts["json"]:
            self.stdout.write(json.dumps({"tenant": tenant.slug, "token": issued.plain}))
        else:
            self.stdout.write(issued.plain)
