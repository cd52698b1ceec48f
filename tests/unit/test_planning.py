"""Slot planning and misfire policy: pure, no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from beat.planning import MisfireRules, plan_job
from jobs.schedules import CronSchedule, IntervalSchedule

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
MINUTELY = CronSchedule("* * * * *", "UTC")


def rules(policy: str = "run_once", grace: int = 60, max_runs: int = 100, max_age: int = 86400):
    return MisfireRules(policy, grace, max_runs, max_age)


def plan(next_run_at, now, policy="run_once", schedule=MINUTELY, **kw):
    return plan_job(
        schedule=schedule,
        next_run_at=next_run_at,
        now=now,
        horizon=now + timedelta(seconds=30),
        rules=rules(policy, **kw),
        seed="s",
    )


def statuses(p):
    return [(r.scheduled_for.strftime("%H:%M"), r.status, r.skip_reason) for r in p.runs]


def test_on_time_slot_is_scheduled_and_cursor_moves_past_the_horizon():
    p = plan(T0, T0 - timedelta(seconds=20))
    assert statuses(p) == [("12:00", "scheduled", "")]
    assert p.next_run_at == T0 + timedelta(minutes=1)


def test_slot_late_within_grace_still_runs():
    p = plan(T0, T0 + timedelta(seconds=59), "skip")
    assert statuses(p) == [("12:00", "scheduled", ""), ("12:01", "scheduled", "")]


def test_skip_policy_records_every_missed_slot_as_skipped():
    p = plan(T0, T0 + timedelta(minutes=5, seconds=10), "skip")
    assert statuses(p) == [
        ("12:00", "skipped", "misfire"),
        ("12:01", "skipped", "misfire"),
        ("12:02", "skipped", "misfire"),
        ("12:03", "skipped", "misfire"),
        ("12:04", "skipped", "misfire"),
        ("12:05", "scheduled", ""),
    ]


def test_run_once_runs_the_latest_missed_slot_when_nothing_is_on_time():
    hourly = CronSchedule("0 * * * *", "UTC")
    now = T0 + timedelta(hours=3, minutes=10)
    p = plan(T0, now, "run_once", schedule=hourly)
    assert statuses(p) == [
        ("12:00", "skipped", "misfire"),
        ("13:00", "skipped", "misfire"),
        ("14:00", "skipped", "misfire"),
        ("15:00", "scheduled", ""),
    ]
    assert p.runs[-1].due_at == now  # runs now, not at its past instant


def test_run_once_skips_missed_slots_when_an_on_time_slot_runs():
    p = plan(T0, T0 + timedelta(minutes=3, seconds=5), "run_once")
    assert statuses(p) == [
        ("12:00", "skipped", "misfire"),
        ("12:01", "skipped", "misfire"),
        ("12:02", "skipped", "misfire"),
        ("12:03", "scheduled", ""),
    ]


def test_run_all_is_bounded_by_the_catch_up_count():
    hourly = CronSchedule("0 * * * *", "UTC")
    p = plan(T0, T0 + timedelta(hours=5, minutes=10), "run_all", schedule=hourly, max_runs=2)
    assert statuses(p) == [
        ("12:00", "skipped", "misfire"),
        ("13:00", "skipped", "misfire"),
        ("14:00", "skipped", "misfire"),
        ("15:00", "skipped", "misfire"),
        ("16:00", "scheduled", ""),
        ("17:00", "scheduled", ""),
    ]


def test_slots_older_than_the_max_age_are_not_enumerated():
    now = T0 + timedelta(days=3)
    p = plan(T0, now, "skip", max_age=3600)
    assert p.truncated_before == now - timedelta(hours=1)
    assert p.runs[0].scheduled_for >= now - timedelta(hours=1)


def test_missed_records_are_bounded_and_the_rest_counted():
    p = plan(T0, T0 + timedelta(minutes=1500), "skip", max_age=10**6)
    skipped = [r for r in p.runs if r.status == "skipped"]
    assert len(skipped) == 1000
    assert p.dropped == 1500 - 1 - 1000  # 1500 slots late beyond grace, minus the on-time one


def test_paused_window_names_the_reason():
    hourly = CronSchedule("0 * * * *", "UTC")
    now = T0 + timedelta(hours=3, minutes=10)
    p = plan_job(
        schedule=hourly,
        next_run_at=T0,
        now=now,
        horizon=now + timedelta(seconds=30),
        rules=rules("skip"),
        seed="s",
        paused_window=(T0 - timedelta(minutes=1), T0 + timedelta(hours=2, minutes=30)),
    )
    assert [r.skip_reason for r in p.runs] == ["paused", "paused", "paused", "misfire"]


def test_jitter_delays_due_time_not_the_nominal_slot():
    p = plan_job(
        schedule=MINUTELY,
        next_run_at=T0,
        now=T0 - timedelta(seconds=20),
        horizon=T0 + timedelta(seconds=10),
        rules=rules(),
        seed="seed",
        jitter_seconds=30,
    )
    [run] = p.runs
    assert run.scheduled_for == T0
    assert T0 <= run.due_at <= T0 + timedelta(seconds=30)


def test_dst_gap_skip_slot_is_recorded():
    berlin = CronSchedule("30 2 * * *", "Europe/Berlin", dst_gap="skip")
    gap = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # 02:00 CET -> 03:00 CEST
    p = plan_job(
        schedule=berlin,
        next_run_at=gap,
        now=gap - timedelta(seconds=10),
        horizon=gap + timedelta(seconds=20),
        rules=rules(),
        seed="s",
    )
    assert [(r.status, r.skip_reason) for r in p.runs] == [("skipped", "dst")]


def test_interval_schedule_catches_many_slots_within_the_horizon():
    every5 = IntervalSchedule(5, T0)
    p = plan_job(
        schedule=every5,
        next_run_at=T0 + timedelta(seconds=5),
        now=T0,
        horizon=T0 + timedelta(seconds=30),
        rules=rules(),
        seed="s",
    )
    assert len(p.runs) == 6
    assert p.next_run_at == T0 + timedelta(seconds=35)


def test_run_once_catch_up_is_not_cancelled_by_a_slot_in_the_lookaheads_extra():
    """The plan reaches past the lookahead (its extra, ADR 0030); only an on-time slot
    within the lookahead stands in for the catch-up. Found by a review: an hourly job
    resumed at 13:59:15 lost its 13:00 catch-up to the 14:00 slot, 45 s away, once the
    plan reached 14:00:15."""
    hourly = CronSchedule("0 * * * *", "UTC")
    now = T0 + timedelta(hours=1, minutes=59, seconds=15)  # 13:59:15; cursor at 13:00
    common = dict(schedule=hourly, next_run_at=T0 + timedelta(hours=1), now=now, seed="s")
    common["rules"] = rules("run_once")
    extended = plan_job(
        horizon=now + timedelta(seconds=60), window=now + timedelta(seconds=30), **common
    )
    assert statuses(extended) == [("13:00", "scheduled", ""), ("14:00", "scheduled", "")]
    # Within the lookahead itself an on-time slot still stands in for the catch-up.
    later = now + timedelta(seconds=20)  # 13:59:35: 14:00 is 25 s away
    within = plan_job(
        horizon=later + timedelta(seconds=60),
        window=later + timedelta(seconds=30),
        **{**common, "now": later},
    )
    assert statuses(within) == [("13:00", "skipped", "misfire"), ("14:00", "scheduled", "")]
