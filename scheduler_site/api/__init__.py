"""The REST API's shared machinery: authentication, problem+json errors, parsing limits,
pagination, throttling and the v1 URL module. The endpoints live in `jobs.api` and
`runs.api`; docs/api.md describes the contract."""
