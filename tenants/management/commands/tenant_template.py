from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants.schema_clone import CloneUnsupported
from tenants.schema_template import (
    TemplateError,
    template_build,
    template_drop,
    template_name,
    template_state,
    template_verify,
)


class Command(BaseCommand):
    help = (
        "The template schema new tenants are cloned from: build it if it is missing or behind"
        " the code's migrations (run after migrate_schemas in a release), and say where it"
        " stands. --rebuild builds it afresh; --verify also checks that a clone is identical"
        " to a freshly migrated schema on this database; --drop removes it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rebuild", action="store_true", help="build it even if current")
        parser.add_argument("--verify", action="store_true", help="compare a clone, a migration")
        parser.add_argument("--drop", action="store_true", help="drop it (rebuilt when needed)")

    def handle(self, *args, **opts) -> None:
        name = template_name()
        if not name:
            raise CommandError("TENANT_TEMPLATE_SCHEMA is empty: new tenants are migrated")
        if opts["drop"]:
            template_drop()
            self.stdout.write(f"{name}: dropped")
            return
        try:
            built = template_build(force=opts["rebuild"])
            differences = template_verify() if opts["verify"] else []
        except (TemplateError, CloneUnsupported) as exc:
            raise CommandError(f"{name}: {exc}") from None
        state = template_state()
        self.stdout.write(
            f"{name}: {'built now' if built else 'current'}, "
            f"{len(state.identity[1]) if state.identity else 0} migrations recorded"
        )
        if opts["verify"]:
            for line in differences:
                self.stdout.write(line)
            if differences:
                raise CommandError(
                    f"a clone differs from a migrated schema in {len(differences)} ways"
                )
            self.stdout.write("a clone is identical to a freshly migrated schema")
