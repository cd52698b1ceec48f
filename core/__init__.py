"""Low-level pieces every app builds on: the clock, schema-qualified SQL, Redis key
names and the index primitives, the task registry and the SSRF guard. Imports no app."""
