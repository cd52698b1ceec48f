import json
import os
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler_site.demo import DEMO, ensure_demo_tenant, ensure_operator


class Command(BaseCommand):
    help = "Development only: make sure the demo tenant, its user, jobs and an API token exist."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--state-file",
            default=".data/demo.json",
            help="where the demo token is kept between runs",
        )

    def handle(self, *args, **opts) -> None:
        if not settings.DEBUG:
            raise CommandError("ensure_demo creates well-known passwords: run it with DEBUG=1 only")
        state_file = Path(opts["state_file"])
        operator = ensure_operator(get_user_model())
        token = ensure_demo_tenant(state_file)
        state_file.parent.mkdir(parents=True, exist_ok=True)
        state_file.write_text(json.dumps({"token": token}))
        os.chmod(state_file, 0o600)
        self.stdout.write(
            json.dumps(
                {
                    "domain": DEMO["domain"],
                    "user": DEMO["user"],
                    "password": DEMO["password"],
                    "operator": operator[0],
                    "operator_password": operator[1],
                    "token": token,
                }
            )
        )
