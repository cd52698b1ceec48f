"""The iCalendar import: VEVENT DATE and DATE-TIME values, all-day events, folded lines,
zones, durations, and the refusals (recurrence, bad values, unknown zones)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jobs.schedules import ScheduleError, calendar_from_ics, excluding, iter_slots, parse_cron


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# --- iCalendar import ---------------------------------------------------------------------


def ics(*events: str, head: str = "") -> str:
    body = "".join(f"BEGIN:VEVENT\r\n{event}END:VEVENT\r\n" for event in events)
    return f"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\n{head}{body}END:VCALENDAR\r\n"


def spans(text: str, zone: str = "Europe/Berlin") -> list[tuple[str, str]]:
    calendar = calendar_from_ics(text, timezone=zone)
    return [(first.isoformat(), last.isoformat()) for first, last in calendar.spans]


def test_all_day_events_end_the_day_before_their_dtend():
    text = ics(
        "SUMMARY:Christmas\r\nDTSTART;VALUE=DATE:20261225\r\nDTEND;VALUE=DATE:20261227\r\n",
        "SUMMARY:New year\r\nDTSTART;VALUE=DATE:20270101\r\n",  # no DTEND: that one day
        "DTSTART:20270106\r\nDTEND:20270107\r\n",  # eight digits without VALUE=DATE
    )
    assert spans(text) == [("2026-12-25", "2026-12-26"), ("2027-01-01", "2027-01-01"),
                           ("2027-01-06", "2027-01-06")]  # fmt: skip


def test_a_quoted_parameter_value_may_hold_colons_and_semicolons():
    text = ics('DTSTART;X-NOTE="a:b;c";VALUE=DATE:20260501\r\n')
    assert spans(text) == [("2026-05-01", "2026-05-01")]


def test_folded_lines_are_unfolded():
    text = (
        "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nSUMMARY:A long\r\n  summary\r\n"
        "DTSTART;VALUE=DA\r\n TE:2026\r\n\t0501\r\n"  # folded inside the parameter and the value
        "DTEND;VALUE=DATE:20260503\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
    )
    assert spans(text) == [("2026-05-01", "2026-05-02")]
    assert spans(text.replace("\r\n", "\n")) == [("2026-05-01", "2026-05-02")]  # bare LF


def test_date_times_become_local_dates_in_the_calendars_zone():
    text = ics(
        # 23:30 UTC is 00:30 on the next day in Berlin (+01 in winter)
        "DTSTART:20261224T233000Z\r\nDTEND:20261225T010000Z\r\n",
        # New York evening to Berlin: 18:00 EST = 00:00 CET on the 1st; ends at 01:00 CET
        "DTSTART;TZID=America/New_York:20261231T180000\r\n"
        'DTEND;TZID="America/New_York":20261231T190000\r\n',
        # floating: a wall time, its date as written
        "DTSTART:20270105T230000\r\nDTEND:20270106T000000\r\n",  # ends at midnight: one day
    )
    assert spans(text) == [("2026-12-25", "2026-12-25"), ("2027-01-01", "2027-01-01"),
                           ("2027-01-05", "2027-01-05")]  # fmt: skip
    assert spans(text, "America/New_York")[0] == ("2026-12-24", "2026-12-24")


def test_timed_events_spanning_days_and_without_an_end():
    text = ics(
        "DTSTART:20260501T220000Z\r\nDTEND:20260503T080000Z\r\n",  # May 2 00:00 - May 3 10:00
        "DTSTART:20260601T120000Z\r\n",  # an instant
        "DTSTART:20260701T120000Z\r\nDTEND:20260701T120000Z\r\n",  # zero length
    )
    assert spans(text) == [("2026-05-02", "2026-05-03"), ("2026-06-01", "2026-06-01"),
                           ("2026-07-01", "2026-07-01")]  # fmt: skip


@pytest.mark.parametrize(
    ("start", "duration", "expected"),
    [
        ("DTSTART;VALUE=DATE:20260501", "P1D", ("2026-05-01", "2026-05-01")),
        ("DTSTART;VALUE=DATE:20260501", "P1W", ("2026-05-01", "2026-05-07")),
        ("DTSTART:20260501T220000Z", "PT1H", ("2026-05-02", "2026-05-02")),  # 00:00-01:00 CEST
        ("DTSTART:20260501T200000Z", "PT2H", ("2026-05-01", "2026-05-01")),  # ends 00:00
        ("DTSTART:20260501T200000Z", "P1DT2H30M", ("2026-05-01", "2026-05-03")),
    ],
)
def test_duration_stands_in_for_dtend(start, duration, expected):
    assert spans(ics(f"{start}\r\nDURATION:{duration}\r\n")) == [expected]


def test_components_other_than_events_are_skipped():
    text = ics(
        "DTSTART;VALUE=DATE:20260501\r\nBEGIN:VALARM\r\nTRIGGER:-PT15M\r\n"
        "DTSTART:20260101T000000Z\r\nEND:VALARM\r\n",
        head="BEGIN:VTIMEZONE\r\nTZID:Europe/Berlin\r\nBEGIN:STANDARD\r\n"
        "DTSTART:19701025T030000\r\nTZOFFSETFROM:+0200\r\nTZOFFSETTO:+0100\r\nEND:STANDARD\r\n"
        "END:VTIMEZONE\r\nBEGIN:VTODO\r\nDTSTART:20260301T000000Z\r\nEND:VTODO\r\n",
    )
    assert spans(text) == [("2026-05-01", "2026-05-01")]


def test_cancelled_events_exclude_nothing():
    text = ics("DTSTART;VALUE=DATE:20260501\r\nSTATUS:CANCELLED\r\n", "DTSTART:20260502\r\n")
    assert spans(text) == [("2026-05-02", "2026-05-02")]


def test_calendar_name():
    head = "X-WR-CALNAME:Team holidays\r\n"
    assert calendar_from_ics(ics(head=head), timezone="UTC").name == "Team holidays"
    assert calendar_from_ics(ics(head=head), timezone="UTC", name="mine").name == "mine"
    assert calendar_from_ics(ics(), timezone="UTC").name == "calendar"
    assert calendar_from_ics("\ufeff" + ics(), timezone="UTC").spans == ()  # a BOM is fine


RECURRENCE = ["RRULE:FREQ=YEARLY", "RDATE;VALUE=DATE:20270501", "EXDATE;VALUE=DATE:20270501",
              "RECURRENCE-ID:20270501"]  # fmt: skip


@pytest.mark.parametrize("prop", RECURRENCE)
def test_recurring_events_are_refused_not_ignored(prop):
    text = ics(f"SUMMARY:May Day\r\nDTSTART;VALUE=DATE:20260501\r\n{prop}\r\n")
    with pytest.raises(ScheduleError) as caught:
        calendar_from_ics(text, timezone="UTC")
    assert caught.value.field == "calendar"
    name = prop.split(":")[0].split(";")[0]
    assert caught.value.message == (
        f"calendar: event 1 ('May Day') has {name}: recurring events are not supported "
        "(expand them into single events first)"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "not an iCalendar file"),
        ("BEGIN:VEVENT\r\nEND:VEVENT\r\n", "not an iCalendar file"),
        ("hello world", "not an iCalendar file"),
        (ics("SUMMARY:x\r\n"), "event 1 ('x'): no DTSTART"),
        (ics("DTSTART:2026050\r\n"), "is not a DATE or DATE-TIME"),
        (ics("DTSTART;VALUE=DATE:20260501T100000\r\n"), "is not a DATE (YYYYMMDD)"),
        (ics("DTSTART:20260230\r\n"), "'20260230' is not a real date"),
        (ics("DTSTART:20260501T250000Z\r\n"), "is not a real time"),
        (ics("DTSTART;TZID=W. Europe Standard Time:20260501T100000\r\n"),
         "unknown TZID 'W. Europe Standard Time' (IANA zone names only)"),
        (ics("DTSTART:20260502\r\nDTEND:20260501\r\n"), "its end is before its start"),
        (ics("DTSTART:20260502\r\nDURATION:-P1D\r\n"), "is not a positive duration"),
        (ics("DTSTART:20260502\r\nDURATION:P\r\n"), "is not a positive duration"),
        ("BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nEND:VCALENDAR\r\n", "does not close VEVENT"),
        ("BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\n", "BEGIN:VEVENT is never closed"),
        ("BEGIN:VCALENDAR\r\nno colon here\r\nEND:VCALENDAR\r\n", "not a content line"),
        (ics() + "BEGIN:VEVENT\r\n", "outside BEGIN:VCALENDAR"),
    ],
)  # fmt: skip
def test_bad_ics_is_a_calendar_error(text, message):
    with pytest.raises(ScheduleError) as caught:
        calendar_from_ics(text, timezone="UTC")
    assert caught.value.field == "calendar"
    assert message in caught.value.message


def test_ics_calendar_excludes_slots_end_to_end():
    text = ics("SUMMARY:Closed\r\nDTSTART;VALUE=DATE:20261225\r\nDTEND;VALUE=DATE:20261226\r\n")
    closed = calendar_from_ics(text, timezone="Europe/Berlin")
    daily = excluding(parse_cron("0 9 * * *", timezone="Europe/Berlin", seed="s"), closed)
    got = iter_slots(daily, utc(2026, 12, 24), utc(2026, 12, 26, 12))
    assert [slot.skip_reason for slot in got] == [
        None,
        "excluded",
        None,
    ]
