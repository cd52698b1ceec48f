from importlib import import_module

from django.apps import AppConfig
from django.conf import settings


class RunsConfig(AppConfig):
    name = "runs"

    def ready(self) -> None:
        # Secret header values held in clear by a worker never reach a log line.
        from core.redaction import install_log_redaction

        install_log_redaction()
        # Register the built-in tasks and the deployment's own task modules.
        import_module("runs.receivers")
        import_module("runs.builtin_tasks")
        for module in settings.SCHEDULER_TASK_MODULES:
            import_module(module)
