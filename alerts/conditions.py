"""Which incidents the facts of one evaluation open and resolve. Pure: no Django.

The facts are a tenant's attempts that ended in the evaluation's window, the failure
streaks of the jobs that failed in it, and the scheduled runs whose deadline passed in it
without a success. The rule that makes evaluation idempotent (a window read twice, two
evaluators racing, a new leader re-reading the old one's window) is one sentence:

    an incident triggered at T is opened only if its job has no success after T, and an
    open incident is resolved by a success of its job after its T.

With `incident_once_per_fact` (unique channel, job, kind, T) and `incident_one_open`, the
database turns every repeated "open" into nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from .states import DEAD_LETTER, FAILURES, MISSED


@dataclass(frozen=True)
class Channel:
    id: int
    job_id: int | None  # None: every job of the tenant
    on_dead_letter: bool
    failure_threshold: int | None
    missed_grace_seconds: int | None
    notify_resolved: bool
    created_at: datetime

    def covers(self, job_id: int) -> bool:
        return self.job_id is None or self.job_id == job_id


@dataclass(frozen=True)
class Ended:
    """An attempt that ended: succeeded, failed or lost (its run dead if it was the last)."""

    job_id: int
    run_id: UUID
    finished_at: datetime
    ok: bool
    dead_letter: bool  # the run is dead and this was its last attempt


@dataclass(frozen=True)
class Missed:
    """A scheduled run whose `deadline` (its slot + a channel's grace) passed unsucceeded."""

    channel_id: int
    job_id: int
    run_id: UUID
    scheduled_for: datetime
    deadline: datetime
    status: str


@dataclass(frozen=True)
class Open:
    channel_id: int
    job_id: int
    kind: str
    trigger_at: datetime
    run_id: UUID | None
    detail: str


def last_successes(ended: Iterable[Ended]) -> dict[int, tuple[datetime, UUID]]:
    """Each job's newest success in the window."""
    out: dict[int, tuple[datetime, UUID]] = {}
    for e in ended:
        if e.ok and (e.job_id not in out or e.finished_at > out[e.job_id][0]):
            out[e.job_id] = (e.finished_at, e.run_id)
    return out


def _unsucceeded_since(job_id: int, at: datetime, successes) -> bool:
    last = successes.get(job_id)
    return last is None or last[0] <= at


def to_open(
    channels: list[Channel],
    ended: list[Ended],
    streaks: dict[int, list[Ended]],
    missed: list[Missed],
) -> list[Open]:
    """`streaks`: per job that failed in the window, its newest ended attempts (newest
    first, as many as the largest threshold)."""
    successes = last_successes(ended)
    out: list[Open] = []
    for channel in channels:
        for e in ended:
            if not (channel.on_dead_letter and e.dead_letter and channel.covers(e.job_id)):
                continue
            if e.finished_at >= channel.created_at and _unsucceeded_since(
                e.job_id, e.finished_at, successes
            ):
                detail = f"run {e.run_id} is dead: its attempts are spent (the dead-letter queue)"
                out.append(Open(channel.id, e.job_id, DEAD_LETTER, e.finished_at, e.run_id, detail))
        if channel.failure_threshold:
            out += _failure_opens(channel, streaks, successes)
    for m in missed:
        if _unsucceeded_since(m.job_id, m.deadline, successes):
            detail = (
                f"the run scheduled for {m.scheduled_for.isoformat()} had not succeeded by "
                f"{m.deadline.isoformat()} (it was {m.status})"
            )
            out.append(Open(m.channel_id, m.job_id, MISSED, m.deadline, m.run_id, detail))
    return out


def _failure_opens(channel: Channel, streaks, successes) -> list[Open]:
    n = channel.failure_threshold or 0
    out = []
    for job_id, newest in streaks.items():
        if not channel.covers(job_id) or len(newest) < n:
            continue
        streak = newest[:n]
        if all(not e.ok for e in streak):
            head = streak[0]  # the newest failure
            if head.finished_at >= channel.created_at and _unsucceeded_since(
                job_id, head.finished_at, successes
            ):
                detail = f"the job's last {n} attempts failed"
                out.append(
                    Open(channel.id, job_id, FAILURES, head.finished_at, head.run_id, detail)
                )
    return out


@dataclass(frozen=True)
class OpenIncident:
    id: int
    channel_id: int
    job_id: int
    trigger_at: datetime


def to_resolve(
    incidents: list[OpenIncident], ended: list[Ended]
) -> list[tuple[OpenIncident, datetime, UUID]]:
    """Open incidents whose job succeeded after their trigger: (incident, when, by run)."""
    successes = last_successes(ended)
    out = []
    for incident in incidents:
        last = successes.get(incident.job_id)
        if last is not None and last[0] > incident.trigger_at:
            out.append((incident, last[0], last[1]))
    return out
