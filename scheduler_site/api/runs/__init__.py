"""The runs part of the REST API v1: run history, cancel, replay, the dead-letter queue and
backfill (see docs/api.md)."""
