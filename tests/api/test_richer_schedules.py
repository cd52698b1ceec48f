"""Richer schedules through the API: day extensions, seconds, several specs, one-offs,
start/end, exclusion calendars, and the full preview."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings

from .conftest import Api

ICS = (
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nBEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20261225\r\n"
    "DTEND;VALUE=DATE:20261227\r\nSUMMARY:Christmas\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
)


def _errors(response) -> dict:
    assert response.status_code == 400, response.content
    return response.json()["errors"]


@pytest.mark.parametrize(
    "cron", ["0 9 L * *", "0 9 L-3 * *", "0 9 15W * *", "0 18 * * 5L", "0 9 * * 1#2"]
)
def test_day_extensions_are_accepted_and_described(alpha_api: Api, cron):
    job = alpha_api.create_job(schedule={"cron": cron, "timezone": "Europe/Berlin"})
    assert job["schedule"]["cron"] == cron
    assert job["next_run_at"] is not None
    assert "Europe/Berlin" in job["schedule"]["description"]


def test_an_impossible_day_rule_is_refused_naming_the_field(alpha_api: Api):
    errors = _errors(
        alpha_api.post(
            "jobs",
            {
                "name": "x",
                "target": {"type": "task", "task": "builtin.noop"},
                "schedule": {"cron": "0 0 31W 4 *"},
            },
        )
    )
    assert list(errors) == ["schedule.cron"]


def test_seconds_field_needs_a_minimum_interval_below_a_minute(alpha_api: Api):
    job = alpha_api.create_job(schedule={"cron": "*/15 * * * * *"})  # tests allow 1 s
    assert job["schedule"]["cron"] == "*/15 * * * * *"
    with override_settings(SCHEDULER_MIN_INTERVAL_SECONDS=60):
        errors = _errors(
            alpha_api.post(
                "jobs",
                {
                    "name": "x",
                    "target": {"type": "task", "task": "builtin.noop"},
                    "schedule": {"cron": "*/15 * * * * *"},
                },
            )
        )
    assert "schedule.cron" in errors and "minimum interval" in errors["schedule.cron"][0]


def test_several_specs_fire_on_their_union(alpha_api: Api):
    job = alpha_api.create_job(
        schedule={
            "specs": [{"cron": "0 9 * * 1-5"}, {"cron": "0 12 * * 6", "timezone": "Asia/Tokyo"}],
            "timezone": "Europe/Berlin",
        }
    )
    assert job["schedule"]["specs"] == [
        {"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin"},
        {"cron": "0 12 * * 6", "timezone": "Asia/Tokyo"},
    ]
    errors = _errors(
        alpha_api.post(
            "jobs",
            {
                "name": "x",
                "target": {"type": "task", "task": "builtin.noop"},
                "schedule": {"specs": [{"cron": "0 9 * * *"}, {"cron": "61 * * * *"}]},
            },
        )
    )
    assert list(errors) == ["schedule.specs.1.cron"]


def test_a_one_off_in_the_future_is_accepted_and_one_in_the_past_refused(alpha_api: Api):
    soon = (datetime.now(UTC) + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    job = alpha_api.create_job(schedule={"at": soon, "timezone": "UTC"})
    assert job["schedule"]["at"].startswith(soon) and job["next_run_at"].startswith(soon)
    errors = _errors(
        alpha_api.post(
            "jobs",
            {
                "name": "x",
                "target": {"type": "task", "task": "builtin.noop"},
                "schedule": {"at": "2020-01-01T10:00"},
            },
        )
    )
    assert list(errors) == ["schedule"] and "no slot after now" in errors["schedule"][0]


def test_start_and_end_bound_the_slots(alpha_api: Api):
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3)
    job = alpha_api.create_job(
        schedule={
            "cron": "0 * * * *",
            "start": start.isoformat(),
            "end": (start + timedelta(days=1)).isoformat(),
        }
    )
    assert datetime.fromisoformat(job["next_run_at"].replace("Z", "+00:00")) >= start
    errors = _errors(
        alpha_api.post(
            "jobs",
            {
                "name": "x",
                "target": {"type": "task", "task": "builtin.noop"},
                "schedule": {
                    "cron": "0 * * * *",
                    "start": "2030-01-02T00:00:00Z",
                    "end": "2030-01-01T00:00:00Z",
                },
            },
        )
    )
    assert list(errors) == ["schedule.end"]


def test_calendars_are_created_used_listed_and_protected(alpha_api: Api, beta_api: Api):
    created = alpha_api.post(
        "calendars",
        {"name": "holidays", "dates": ["2026-12-25"], "ranges": [["2026-12-31", "2027-01-01"]]},
    )
    assert created.status_code == 201, created.content
    assert created.json()["dates"] == ["2026-12-25"]
    job = alpha_api.create_job(schedule={"cron": "0 9 * * *", "calendars": ["holidays"]})
    assert job["schedule"]["calendars"] == ["holidays"]
    assert alpha_api.get("calendars/holidays").json()["jobs"] == [job["id"]]
    assert alpha_api.delete("calendars/holidays").status_code == 409  # in use
    assert beta_api.get("calendars/holidays").status_code == 404  # another tenant's
    errors = _errors(
        alpha_api.post(
            "jobs",
            {
                "name": "x",
                "target": {"type": "task", "task": "builtin.noop"},
                "schedule": {"cron": "0 9 * * *", "calendars": ["nope"]},
            },
        )
    )
    assert "nope" in errors["schedule.calendars"][0]
    imported = alpha_api.post("calendars", {"name": "christmas", "ics": ICS})
    assert imported.status_code == 201, imported.content
    assert imported.json()["ranges"] == [["2026-12-25", "2026-12-26"]]  # DTEND is exclusive
    bad = alpha_api.post("calendars", {"name": "bad", "dates": ["2026-13-01"]})
    assert list(_errors(bad)) == ["dates.0"]


def test_full_preview_marks_excluded_and_dst_days(alpha_api: Api):
    assert alpha_api.post("calendars", {"name": "off", "dates": ["2026-03-30"]}).status_code == 201
    response = alpha_api.post(
        "schedule/preview",
        {
            "schedule": {"cron": "30 2 * * *", "timezone": "Europe/Berlin", "calendars": ["off"]},
            "after": "2026-03-27T12:00:00Z",
            "count": 4,
        },
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert [(s["at"], s["skip_reason"], s["dst_day"]) for s in body["slots"]] == [
        ("2026-03-28T02:30:00+01:00", None, False),
        ("2026-03-29T03:00:00+02:00", None, True),  # 02:30 did not exist: shifted
        ("2026-03-30T02:30:00+02:00", "excluded", False),
        ("2026-03-31T02:30:00+02:00", None, False),
    ]


def test_next_run_at_is_the_cursor_and_can_be_an_excluded_slot(alpha_api: Api):
    """As documented: `next_run_at` is the scheduler's next slot, which may be one recorded
    as skipped (here an excluded date), not necessarily the next run that fires; the
    preview shows which slots fire."""
    day = (datetime.now(UTC) + timedelta(days=2)).date()
    created = alpha_api.post("calendars", {"name": "cursor-off", "dates": [day.isoformat()]})
    assert created.status_code == 201, created.content
    schedule = {
        "cron": "0 9 * * *",
        "start": f"{day.isoformat()}T00:00:00Z",
        "calendars": ["cursor-off"],
    }
    job = alpha_api.create_job(schedule=schedule)
    assert job["next_run_at"] == f"{day.isoformat()}T09:00:00Z"
    preview = alpha_api.post("schedule/preview", {"schedule": schedule, "count": 2}).json()
    assert [s["skip_reason"] for s in preview["slots"]] == ["excluded", None]
    schema = alpha_api.get("/api/v1/openapi.json").content.decode()
    assert "recorded as skipped (`excluded`, `dst`)" in schema
    assert not re.search(r"next (scheduled )?fire time(?!s)", schema)  # the preview's: "times"


def test_specs_calendars_use_the_first_specs_zone(alpha_api: Api):
    """As documented: with `specs`, a slot is excluded by its local date in the first spec's
    zone (Auckland, UTC+13 in January), whichever spec it comes from; the top-level
    `timezone` (UTC) only fills in the second spec's zone."""
    created = alpha_api.post("calendars", {"name": "nz-day", "dates": ["2030-01-10"]})
    assert created.status_code == 201, created.content
    schedule = {
        "specs": [{"cron": "0 9 * * *", "timezone": "Pacific/Auckland"}, {"cron": "0 12 * * *"}],
        "timezone": "UTC",
        "calendars": ["nz-day"],
    }
    response = alpha_api.post(
        "schedule/preview", {"schedule": schedule, "after": "2030-01-08T00:00:00Z", "count": 6}
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["timezone"] == "Pacific/Auckland"
    assert [(s["at"], s["skip_reason"]) for s in body["slots"]] == [
        ("2030-01-09T01:00:00+13:00", None),  # 12:00 UTC on the 8th
        ("2030-01-09T09:00:00+13:00", None),
        ("2030-01-10T01:00:00+13:00", "excluded"),  # 12:00 UTC on the 9th: NZ date the 10th
        ("2030-01-10T09:00:00+13:00", "excluded"),
        ("2030-01-11T01:00:00+13:00", None),  # 12:00 UTC on the 10th: NZ date the 11th
        ("2030-01-11T09:00:00+13:00", None),
    ]
    job = alpha_api.create_job(schedule=schedule)
    assert "timezone" not in job["schedule"]
    assert [s["timezone"] for s in job["schedule"]["specs"]] == ["Pacific/Auckland", "UTC"]
    assert job["schedule"]["description"].endswith(
        "except on the dates of 'nz-day' (Pacific/Auckland)"
    )


def test_an_interval_with_calendars_uses_utc_dates(alpha_api: Api):
    """The preview of an interval with calendars answered 500 (no zone to read the dates
    in); a cron job in Auckland changed to an interval kept Auckland for its calendars."""
    assert (
        alpha_api.post("calendars", {"name": "utc-day", "dates": ["2030-01-10"]}).status_code == 201
    )
    schedule = {
        "interval_seconds": 43200,
        "start_at": "2030-01-09T00:00:00Z",
        "calendars": ["utc-day"],
    }
    response = alpha_api.post(
        "schedule/preview", {"schedule": schedule, "after": "2030-01-09T06:00:00Z", "count": 4}
    )
    assert response.status_code == 200, response.content
    assert [(s["at"], s["skip_reason"]) for s in response.json()["slots"]] == [
        ("2030-01-09T12:00:00+00:00", None),
        ("2030-01-10T00:00:00+00:00", "excluded"),
        ("2030-01-10T12:00:00+00:00", "excluded"),
        ("2030-01-11T00:00:00+00:00", None),
    ]
    job = alpha_api.create_job(schedule={"cron": "0 9 * * *", "timezone": "Pacific/Auckland"})
    changed = alpha_api.patch(f"jobs/{job['id']}", {"schedule": schedule})
    assert changed.status_code == 200, changed.content
    assert changed.json()["schedule"]["description"].endswith("'utc-day' (UTC)")
