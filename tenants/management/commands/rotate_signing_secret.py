"""`manage.py rotate_signing_secret SLUG`: an operator rotates a tenant's webhook signing
secret (the same service as POST /api/v1/signing-secret/rotate) and hands the new one over."""

from __future__ import annotations

import json
from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from tenants.models import Tenant
from tenants.signing import signing_secret_rotate


class Command(BaseCommand):
    help = (
        "Make a new webhook signing secret current for a tenant and print it once; the old "
        "one keeps signing for --overlap-seconds (0: stops at once, for a leaked secret)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument(
            "--overlap-seconds",
            type=int,
            default=None,
            help="default: SCHEDULER_SIGNING_SECRET_OVERLAP_SECONDS",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args, **opts) -> None:
        tenant = Tenant.objects.filter(slug=opts["slug"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {opts['slug']!r}")
        seconds = opts["overlap_seconds"]
        if seconds is None:
            seconds = settings.SCHEDULER_SIGNING_SECRET_OVERLAP_SECONDS
        if seconds < 0:
            raise CommandError("--overlap-seconds must not be negative")
        issued = signing_secret_rotate(
            tenant=tenant, now=timezone.now(), overlap=timedelta(seconds=seconds)
        )
        expires = issued.info.previous_expires_at
        info = {
            "tenant": tenant.slug,
            "signing_secret": issued.secret,
            "version": issued.info.version,
            "previous_expires_at": expires.isoformat() if expires else None,
        }
        if opts["json"]:
            self.stdout.write(json.dumps(info))
            return
        for key, value in info.items():
            self.stdout.write(f"{key:20} {value}")
        self.stdout.write("The secret is shown only this once; hand it to the tenant now.")
