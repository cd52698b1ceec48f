"""A diamond DAG on real processes: a runscheduler and two Celery workers. B and C meet at
a barrier and finish within milliseconds of each other on the two workers, so that their
settles race for real; D must run exactly once per DAG run, after both."""

from __future__ import annotations

import pytest
from django_tenants.utils import schema_context

from core.clock import SystemClock
from runs import states
from runs.models import DagRun, Run
from runs.services import job_trigger

from ..integration.helpers import ACTOR, make_job
from .procs import scheduler, wait_for, worker
from .tasks import BARRIER_KEY

pytestmark = pytest.mark.slow
ENV = {
    "SCHEDULER_LEASE_SECONDS": "2",
    "SCHEDULER_TASK_MODULES": "tests.scenarios.tasks",
}
ROUNDS = 8


def test_concurrent_upstreams_on_two_worker_processes_create_d_once(live, redis_client, tmp_path):
    import tests.scenarios.tasks  # noqa: F401  (registers test.barrier for job validation)

    alpha = live["alpha"].tenant
    clock = SystemClock()
    noop = {"type": "task", "task": "builtin.noop"}
    meet = {"type": "task", "task": "test.barrier"}
    a = make_job(alpha, clock, name="a", schedule=None, target=noop)
    b = make_job(alpha, clock, name="b", schedule=None, target=meet, depends_on=[a.id])
    c = make_job(alpha, clock, name="c", schedule=None, target=meet, depends_on=[a.id])
    d = make_job(alpha, clock, name="d", schedule=None, target=noop, depends_on=[b.id, c.id])
    procs = [
        scheduler(tmp_path, "sched", **ENV),
        worker(tmp_path, "w1", "-c", "1", **ENV),
        worker(tmp_path, "w2", "-c", "1", **ENV),
    ]

    def dag_runs_done() -> int:
        with schema_context(alpha.schema_name):
            return DagRun.objects.exclude(status=states.DAG_RUNNING).count()

    try:
        for round_number in range(1, ROUNDS + 1):
            with schema_context(alpha.schema_name):
                job_trigger(tenant=alpha, actor=ACTOR, job_id=a.id, clock=clock)
            wait_for(lambda n=round_number: dag_runs_done() >= n, timeout=60)
    finally:
        for proc in procs:
            proc.stop()
    with schema_context(alpha.schema_name):
        dag_runs = list(DagRun.objects.all())
        assert [g.status for g in dag_runs] == [states.DAG_SUCCEEDED] * ROUNDS
        for dag_run in dag_runs:
            runs = {r.job_id: r for r in Run.objects.filter(dag_run=dag_run.id)}
            assert set(runs) == {a.id, b.id, c.id, d.id}
            assert Run.objects.filter(dag_run=dag_run.id, job_id=d.id).count() == 1
            assert runs[d.id].created_at >= max(runs[b.id].finished_at, runs[c.id].finished_at)
            assert runs[b.id].worker != runs[c.id].worker  # two worker processes
    met = redis_client.llen(f"{BARRIER_KEY}:met")
    assert met == 2 * ROUNDS, "every B and C met its partner: they ran at the same time"
