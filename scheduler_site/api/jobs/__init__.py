"""The jobs part of the REST API v1: job CRUD, pause/resume, manual trigger, schedule
preview (see docs/api.md)."""
