from django.apps import AppConfig


class BeatConfig(AppConfig):
    name = "beat"
    verbose_name = "Scheduler engine"
