"""What happens to due runs of one job, given its concurrency policy: pure arithmetic.

- `allow`: every due run is queued.
- `forbid`: up to the free slots are queued, the rest are skipped (`overlap`).
- `queue`: up to the free slots are queued, the rest are held until a run ends.
- `replace`: the job's active runs are cancelled; the newest due runs (up to the limit)
  are queued and older due ones are superseded (cancelled).

While the tenant is at its quota, runs decided this way take no slot of it
(`within_freed_slots`): a `replace` job queues no more runs than it cancelled.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class DueRun:
    run_id: Any
    job_id: int
    scheduled_for: datetime


@dataclass(frozen=True)
class JobLimits:
    policy: str  # allow | forbid | queue | replace
    max_concurrent: int
    active: int  # the job's queued and running runs right now


@dataclass
class Admission:
    queue: list = field(default_factory=list)
    skip_overlap: list = field(default_factory=list)
    hold: list = field(default_factory=list)
    supersede: list = field(default_factory=list)
    replace_jobs: list[int] = field(default_factory=list)  # cancel these jobs' active runs


def admit(due: list[DueRun], limits: dict[int, JobLimits]) -> Admission:
    by_job: dict[int, list[DueRun]] = {}
    for run in sorted(due, key=lambda r: r.scheduled_for):
        by_job.setdefault(run.job_id, []).append(run)
    admission = Admission()
    for job_id, runs in by_job.items():
        _admit_job(job_id, [r.run_id for r in runs], limits.get(job_id), admission)
    return admission


def _admit_job(job_id: int, run_ids: list, limits: JobLimits | None, out: Admission) -> None:
    if limits is None or limits.policy == "allow":
        out.queue.extend(run_ids)
        return
    capacity = max(limits.max_concurrent, 1)
    if limits.policy == "replace":
        if limits.active:
            out.replace_jobs.append(job_id)
        keep = run_ids[-capacity:]
        out.supersede.extend(run_ids[: len(run_ids) - len(keep)])
        out.queue.extend(keep)
        return
    free = max(capacity - limits.active, 0)
    out.queue.extend(run_ids[:free])
    rest = run_ids[free:]
    (out.hold if limits.policy == "queue" else out.skip_overlap).extend(rest)


def within_freed_slots(
    queue: list, job_of: dict, no_slot: frozenset, freed: Counter
) -> tuple[list, list, list]:
    """(runs to queue, runs to wait again for admission, runs to supersede) of the
    decision's `queue` (each job's runs oldest first). A run in `no_slot` came while its
    tenant was at its quota (`AdmissionControl.decided_by_policy`), so it may take only a
    slot its own job's cancels freed in this very statement (`freed`: `replace`): of a
    job's such runs, the newest that many are queued and the older ones are superseded by
    them (admitted later, they would replace the newer runs); when the cancels freed none
    (the run it was to replace ended meanwhile; a paused job resumed; a `forbid` job's run
    ended after the leader's read), they wait for a slot like any other run."""
    go, wait, supersede = [], [], []
    by_job: dict[int, list] = defaultdict(list)
    for run_id in queue:
        if run_id in no_slot:
            by_job[job_of[run_id]].append(run_id)
        else:
            go.append(run_id)
    for job_id, run_ids in by_job.items():
        room = min(freed.get(job_id, 0), len(run_ids))
        if room:
            go += run_ids[len(run_ids) - room :]
            supersede += run_ids[: len(run_ids) - room]
        else:
            wait += run_ids
    return go, wait, supersede
