"""The run statuses of `runs.states` as SQL fragments, for raw statements: pass `**STATUS`
to `sql.SQL(...).format` and write `status = {queued}` or `status IN {waiting}`.

Single statuses are `{<status>}`; the named sets are `{waiting}`, `{active}`, `{terminal}`,
`{prunable}` and the sources of each transition: `{claimable}`, `{admittable}`, `{skippable}`,
`{cancellable}`, `{replayable}`, `{finishable}`."""

from __future__ import annotations

from psycopg import sql

from core.sql import one_of

from . import states

STATUS: dict[str, sql.Composable] = {
    **{status: sql.Literal(status) for status in states.ALL},
    "waiting": one_of(states.WAITING),
    "active": one_of(states.ACTIVE),
    "terminal": one_of(sorted(states.TERMINAL)),
    "prunable": one_of(states.PRUNABLE),
    "claimable": one_of(states.CLAIMABLE),
    "admittable": one_of(states.ADMITTABLE),
    "skippable": one_of(states.SKIPPABLE),
    "cancellable": one_of(states.CANCELLABLE),
    "replayable": one_of(states.REPLAYABLE),
    "finishable": one_of(states.FINISHABLE),
}

# A dependency run of a paused job (`r` the run, `j` its job): the leader holds it (neither
# runs nor skips it) until the job is resumed, so that its DAG run waits
# (`runs.services.release_held_dependency_runs`).
HELD_BY_PAUSE = "(j.paused AND r.trigger = 'dependency')"
