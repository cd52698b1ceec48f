"""Which runs a job gets when the leader materialises it: pure, no Django, no Redis.

A job's `next_run_at` is its first slot not yet materialised. Planning walks the slots
from there up to the horizon (now + lookahead + its extra, ADR 0030) and decides each one's
fate:

- a slot not later than `grace` behind `now` is on time: a `scheduled` run, due at the
  slot plus the job's deterministic jitter;
- an older slot was missed (no leader, the job paused, the job re-enabled): the misfire
  policy decides (`skip`: all skipped; `run_once`: the latest runs unless an on-time slot
  within the lookahead (`window`; the extra's slots do not count) already does;
  `run_all`: the latest `max_catchup_runs` run, older ones are skipped);
- a slot the DST policy drops is a `skipped` run with reason `dst`, and one on a date of
  an exclusion calendar, `excluded`;
- once the schedule has no slot left (a one-off that fired, an end passed), the plan's
  `next_run_at` is None and the job is complete.

Every slot leaves a row, so a tenant can see why nothing ran at 02:30, except slots older
than `max_age_seconds`, which are counted in `dropped` rather than written one by one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache

from jobs.schedules import Schedule, Slot, jitter_seconds_for, next_slot_or_none
from runs import states

EPSILON = timedelta(microseconds=1)
MAX_MISSED_RECORDS = 1000  # skipped rows written per job per pass, the most recent kept


@dataclass(frozen=True)
class PlannedRun:
    scheduled_for: datetime
    due_at: datetime
    status: str  # scheduled | skipped
    skip_reason: str = ""


@dataclass(frozen=True)
class MisfireRules:
    policy: str  # run_once | run_all | skip
    grace_seconds: int
    max_catchup_runs: int
    max_age_seconds: int


@dataclass
class JobPlan:
    runs: list[PlannedRun] = field(default_factory=list)
    next_run_at: datetime | None = None
    dropped: int = 0  # missed slots beyond the per-pass record bound, not written
    truncated_before: datetime | None = None  # slots before this were not even enumerated


@lru_cache(maxsize=200_000)
def cached_next_slot(schedule: Schedule, after: datetime) -> Slot | None:
    """Many jobs share a schedule and a cursor (10,000 `* * * * *` jobs): compute once.
    None: the schedule has no slot after `after` (a one-off that passed, an end)."""
    return next_slot_or_none(schedule, after)


def _slots_between(schedule: Schedule, start: datetime, horizon: datetime):
    """Slots with start <= at <= horizon, then the first slot after the horizon (or None
    once the schedule has ended)."""
    slot = cached_next_slot(schedule, start - EPSILON)
    while slot is not None and slot.at <= horizon:
        yield slot
        slot = cached_next_slot(schedule, slot.at)
    yield slot  # beyond the horizon: the job's next cursor; None: no more


def _skip_reason_for_missed(at: datetime, paused_window: tuple[datetime, datetime] | None) -> str:
    if paused_window and paused_window[0] <= at < paused_window[1]:
        return states.SKIP_PAUSED
    return states.SKIP_MISFIRE


def plan_job(
    *,
    schedule: Schedule,
    next_run_at: datetime,
    now: datetime,
    horizon: datetime,
    rules: MisfireRules,
    seed: str,
    jitter_seconds: int = 0,
    paused_window: tuple[datetime, datetime] | None = None,
    window: datetime | None = None,
) -> JobPlan:
    """`window`: the end of the lookahead (the horizon if None). Only an on-time slot
    within it stands in for a `run_once` catch-up: how far past it the plan reaches (the
    extra) must not decide whether the missed slot runs."""
    plan = JobPlan()
    oldest_kept = now - timedelta(seconds=rules.max_age_seconds)
    start = next_run_at
    if start < oldest_kept:
        start = plan.truncated_before = oldest_kept
    late_limit = now - timedelta(seconds=rules.grace_seconds)
    missed: deque[Slot] = deque(maxlen=max(rules.max_catchup_runs, MAX_MISSED_RECORDS))
    on_time: list[PlannedRun] = []
    for slot in _slots_between(schedule, start, horizon):
        if slot is None:  # the schedule has ended: next_run_at stays None
            break
        if slot.at > horizon:
            plan.next_run_at = slot.at
            break
        if slot.skip_reason:
            on_time.append(PlannedRun(slot.at, slot.at, states.SKIPPED, slot.skip_reason))
        elif slot.at < late_limit:
            if len(missed) == missed.maxlen:
                plan.dropped += 1
            missed.append(slot)
        else:
            due = slot.at + timedelta(seconds=jitter_seconds_for(seed, slot.at, jitter_seconds))
            on_time.append(PlannedRun(slot.at, due, states.SCHEDULED))
    soon = on_time if window is None else [r for r in on_time if r.scheduled_for <= window]
    plan.runs = _decide_missed(list(missed), soon, rules, now, paused_window) + on_time
    return plan


def _decide_missed(
    missed: list[Slot],
    on_time: list[PlannedRun],
    rules: MisfireRules,
    now: datetime,
    paused_window: tuple[datetime, datetime] | None,
) -> list[PlannedRun]:
    if not missed:
        return []
    run_count = 0
    if rules.policy == "run_all":
        run_count = rules.max_catchup_runs
    elif rules.policy == "run_once" and not any(r.status == states.SCHEDULED for r in on_time):
        run_count = 1
    decided = []
    first_run = len(missed) - run_count
    for position, slot in enumerate(missed):
        if position >= first_run:
            decided.append(PlannedRun(slot.at, now, states.SCHEDULED))
        else:
            reason = _skip_reason_for_missed(slot.at, paused_window)
            decided.append(PlannedRun(slot.at, slot.at, states.SKIPPED, reason))
    return decided


@dataclass(frozen=True)
class DueSlotRun:
    """A schedule run of one job that has come due for admission."""

    run_id: object
    due_at: datetime


def misfire_at_admission(
    runs: list[DueSlotRun], *, rules: MisfireRules, now: datetime
) -> tuple[list[object], list[object]]:
    """(admit, skip as `misfire`) for one job's schedule runs due now. A run later than the
    job's grace was materialised before an outage (or a frozen leader) and is only now
    being admitted: the misfire policy decides it exactly as it decides slots missed while
    no leader ran, so a `skip` job never fires its pre-outage runs hours late."""
    late_limit = now - timedelta(seconds=rules.grace_seconds)
    ordered = sorted(runs, key=lambda r: r.due_at)
    late = [r.run_id for r in ordered if r.due_at < late_limit]
    on_time = [r.run_id for r in ordered if r.due_at >= late_limit]
    if not late or rules.policy not in ("skip", "run_once", "run_all"):
        return on_time + late, []
    if rules.policy == "skip":
        return on_time, late
    keep = 0
    if rules.policy == "run_once":
        keep = 0 if on_time else 1
    elif rules.policy == "run_all":
        keep = rules.max_catchup_runs
    kept = late[len(late) - keep :] if keep else []
    return kept + on_time, late[: len(late) - len(kept)]
