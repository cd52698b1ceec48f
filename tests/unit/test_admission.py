"""Concurrency policy arithmetic: pure, no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from beat.admission import DueRun, JobLimits, admit

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
