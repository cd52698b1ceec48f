"""Concurrency policy arithmetic: pure, no database."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from beat.admission import DueRun, JobLimits, admit, within_freed_slots

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def due(job_id: int, n: int) -> list[DueRun]:
    return [DueRun(f"{job_id}-{i}", job_id, T0 + timedelta(minutes=i)) for i in range(n)]


def test_allow_queues_everything():
    a = admit(due(1, 3), {1: JobLimits("allow", 1, 5)})
    assert a.queue == ["1-0", "1-1", "1-2"]


def test_forbid_skips_what_does_not_fit():
    a = admit(due(1, 3), {1: JobLimits("forbid", 2, 1)})
    assert (a.queue, a.skip_overlap) == (["1-0"], ["1-1", "1-2"])


def test_queue_holds_what_does_not_fit():
    a = admit(due(1, 2), {1: JobLimits("queue", 1, 1)})
    assert (a.queue, a.hold, a.skip_overlap) == ([], ["1-0", "1-1"], [])


def test_replace_cancels_active_runs_and_keeps_the_newest():
    a = admit(due(1, 3), {1: JobLimits("replace", 1, 1)})
    assert (a.replace_jobs, a.queue, a.supersede) == ([1], ["1-2"], ["1-0", "1-1"])


def test_replace_without_active_runs_cancels_nothing():
    a = admit(due(1, 1), {1: JobLimits("replace", 1, 0)})
    assert (a.replace_jobs, a.queue) == ([], ["1-0"])


def test_jobs_are_decided_independently():
    a = admit(due(1, 2) + due(2, 2), {1: JobLimits("forbid", 1, 0), 2: JobLimits("allow", 1, 9)})
    assert sorted(a.queue) == ["1-0", "2-0", "2-1"]
    assert a.skip_overlap == ["1-1"]


def test_runs_with_no_slot_take_only_the_places_their_replace_job_freed():
    queue = ["1-0", "1-1", "1-2", "2-0", "3-0"]  # each job's oldest first
    job_of = {r: int(r[0]) for r in queue}
    no_slot = frozenset(["1-0", "1-1", "1-2", "2-0"])
    go, wait, supersede = within_freed_slots(queue, job_of, no_slot, Counter({1: 1}))
    assert go == ["3-0", "1-2"]  # 3-0 was given a slot; 1-2 replaces the one cancelled run
    assert supersede == ["1-0", "1-1"]  # older than the run that took the place
    assert wait == ["2-0"]  # nothing of job 2 was cancelled: it waits for a slot


def test_runs_with_no_slot_wait_when_their_cancels_freed_nothing():
    go, wait, supersede = within_freed_slots(
        ["1-0", "1-1"], {"1-0": 1, "1-1": 1}, frozenset(["1-0", "1-1"]), Counter()
    )
    assert (go, wait, supersede) == ([], ["1-0", "1-1"], [])


def test_runs_with_no_slot_never_exceed_the_freed_places():
    go, _, supersede = within_freed_slots(
        ["1-0", "1-1"], {"1-0": 1, "1-1": 1}, frozenset(["1-0", "1-1"]), Counter({1: 5})
    )
    assert (go, supersede) == (["1-0", "1-1"], [])
