"""The croniter bridge: the project's only import of croniter.

Production matching is done by :mod:`.match` (microseconds, standard cron semantics);
croniter is kept as an independent reference to cross-check it (see the property tests).
Known croniter 7 divergences, avoided by the cross-check: an equal range such as ``3-3``
means the whole field in croniter (standard cron, and this package: the single value 3),
and croniter treats a full-but-not-``*`` day field (``1-31``, ``*/1``, ``0-6``) as restricted
when the other day field has no ``*`` (this package: a full day field never restricts).

Six fields (seconds first) and the macros (``@yearly`` ... ``@hourly``) are cross-checked
too. The day extensions in croniter 7, checked by the property tests (test_schedule_extension_
properties.py), which use croniter only where the two agree:

* agree: ``L`` in day-of-month, alone or in a list (``1,L``), also ORed with plain weekdays;
  ``nW`` alone with day-of-week ``*`` for n <= 28; ``d#k`` (``7#1`` too) and the last
  weekday with day-of-month ``*`` (croniter spells ``5L`` as ``L5``).
* croniter refuses: ``L-n``, ``LW``, ``5L`` (it wants ``L5``), ``W`` in a list
  (``1W,15W``), ``#`` or ``Ld`` mixed with plain weekdays (``1,5#2``), plain ``L`` in
  day-of-week (this package refuses it too: it names no weekday).
* different meaning: ``nW`` in a month without day n: croniter clamps to the month's end
  (``31W`` in February fires on the last weekday); here the month has no such day (as a
  plain ``31``). ``13 * 5#2``: croniter ignores the day of month next to ``#`` (second
  Fridays only); here the OR rule holds (the 13th, or the second Friday). ``L * L5`` and
  ``13 * L5``: croniter finds no date at all. ``nW`` with a restricted weekday: croniter
  fails or ANDs (``1W * 0-1``); here OR.
"""

from __future__ import annotations

from datetime import datetime

from croniter import croniter


def croniter_next(expression: str, wall: datetime, *, seconds: bool = False) -> datetime:
    """croniter's next match strictly after the naive wall-clock time ``wall``. ``seconds``:
    a six-field expression with the seconds first, as here (croniter's
    ``second_at_beginning``; by default croniter reads a sixth field as seconds *last*)."""
    return croniter(expression, wall, second_at_beginning=seconds).get_next(datetime)
