"""The REST API: shared machinery (authentication, problem+json errors, parsing limits,
pagination, throttling, the v1 URL module) and the endpoints of jobs (`api.jobs`) and runs
(`api.runs`). This is the top layer: it calls the services and selectors of every app.
docs/api.md describes the contract."""
