from django.core.management.base import BaseCommand, CommandError

from scheduler_site.health import readiness_problems


class Command(BaseCommand):
    help = "Exit 0 when the database and Redis answer (the same checks as /readyz)."

    def handle(self, *args, **opts) -> None:
        problems = readiness_problems()
        if problems:
            raise CommandError("; ".join(problems))
        self.stdout.write("ready")
