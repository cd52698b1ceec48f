"""Cron expressions: macros, per-field validation with precise messages, Jenkins ``H``
resolution and compilation into a :class:`~.match.CronMatcher`.

Semantics (standard 5-field cron): minute hour day-of-month month day-of-week; ``*``, numbers,
names (JAN-DEC, SUN-SAT, any case), ranges ``a-b``, steps ``*/n``, ``a-b/n`` and ``a/n``
(= ``a-max/n``), comma lists; day-of-week 0-7 with 0 and 7 both Sunday. An equal range
``a-a`` is the single value ``a``.

Day extensions (Quartz forms, any case, also as items of a comma list, see :mod:`.days`):
day-of-month ``L``, ``L-n``, ``nW``, ``LW``; day-of-week ``d#k`` and ``dL``. Each item selects
a set of days and a field selects the union of its items.

Combining the day fields: when both are restricted (neither covers its whole range) a day
matches if either matches (OR); otherwise both must match. An item using ``L``, ``W`` or ``#``
makes its field restricted, so ``0 0 L * 5`` is "the last day of the month, or any Friday"
and ``0 0 13 * 5#2`` "the 13th, or the second Friday". Quartz refuses to restrict both fields
(one must be ``?``) and cronie has no L/W/#, so the two do not agree here; the OR rule is
cronie's (and Vixie cron's, POSIX's) rule for the fields they share, kept for the
extensions so that one rule holds for every expression. croniter differs: see reference.py.

Six-field form: ``second minute hour day-of-month month day-of-week`` (seconds first, 0-59,
the same syntax as minutes), accepted by :func:`parse_cron` only when the caller passes the
operator's ``minimum_interval_seconds``, and then only if the seconds field never selects two
seconds closer together than that minimum (see :func:`check_seconds`). A seconds field with
a single value fires at most once a minute, like a five-field expression, and is always
accepted then. DST: fixed-time is decided on the minute and hour fields alone.

An expression no day can ever match is refused ("never fires"), extensions included:
``0 0 30 2 *``, ``0 0 L-29 2 *`` (February has at most 29 days), ``0 0 31W 4 *`` (April has
no 31st; ``nW`` is never moved into a month lacking day n). Day-of-week rules always fire
eventually (a fifth Friday of February: in leap years whose February starts on a Friday).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from itertools import pairwise

from . import days
from .errors import ScheduleError
from .match import MONTH_DAYS, CronMatcher
from .model import DST_GAP_CHOICES, DST_REPEAT_CHOICES, MACROS, CronSchedule
from .zones import validate_timezone

FIELD_NAMES = ("minute", "hour", "day_of_month", "month", "day_of_week")
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_DIGITS = re.compile(r"[0-9]{1,9}")
_HASH = re.compile(r"H(?:\(([0-9]{1,9})-([0-9]{1,9})\))?(?:/([0-9]{1,9}))?", re.IGNORECASE)
_FIELD_COUNT_HELP = "minute hour day-of-month month day-of-week"
Rules = tuple[days.Rule, ...]


@dataclass(frozen=True)
class FieldSpec:
    name: str
    lo: int  # lowest accepted value
    hi: int  # highest accepted value (day_of_week accepts 7 = Sunday)
    top: int  # highest value a ``*`` or open step covers
    hash_hi: int  # highest value a plain ``H`` picks (day_of_month: 28, exists every month)
    names: dict[str, int] = field(default_factory=dict)

    @property
    def span(self) -> int:
        return self.top - self.lo + 1

    def error(self, message: str) -> ScheduleError:
        return ScheduleError(f"{self.name}: {message}", self.name)


SPECS = (
    FieldSpec("minute", 0, 59, 59, 59),
    FieldSpec("hour", 0, 23, 23, 23),
    FieldSpec("day_of_month", 1, 31, 31, 28),
    FieldSpec("month", 1, 12, 12, 12, {n: i + 1 for i, n in enumerate(_MONTHS)}),
    FieldSpec("day_of_week", 0, 7, 6, 6, {n: i for i, n in enumerate(_DAYS)}),
)
SECOND_SPEC = FieldSpec("second", 0, 59, 59, 59)
SPECS6 = (SECOND_SPEC, *SPECS)
# H hash positions: the five-field positions stay what they always were (resolved values are
# pinned), and the seconds field of the six-field form hashes at its own position 5.
_HASH_POSITIONS = {5: (0, 1, 2, 3, 4), 6: (5, 0, 1, 2, 3, 4)}


def split_fields(expression: str) -> list[str]:
    """Expand a macro and split into five fields, or six (seconds first), or raise
    ScheduleError("cron"). Whether six are acceptable is :func:`parse_cron`'s decision."""
    if not isinstance(expression, str):
        raise ScheduleError("cron expression must be a string", "cron")
    text = expression.strip()
    if not text:
        raise ScheduleError("cron expression is empty", "cron")
    if text.startswith("@"):
        text = _expand_macro(text)
    fields = text.split()
    if len(fields) not in (5, 6):
        extra = "; the 7-field (year) form is not supported" if len(fields) == 7 else ""
        raise ScheduleError(
            f"expected 5 fields ({_FIELD_COUNT_HELP}), got {len(fields)}{extra}", "cron"
        )
    return fields


def specs_for(fields: list[str]) -> tuple[FieldSpec, ...]:
    return SPECS6 if len(fields) == 6 else SPECS


def _expand_macro(text: str) -> str:
    key = text.lower()
    if key == "@reboot":
        raise ScheduleError("@reboot is not supported: a schedule needs a time", "cron")
    if key not in MACROS:
        known = ", ".join(sorted(MACROS))
        raise ScheduleError(f"unknown macro {text[:40]!r}; supported: {known}", "cron")
    return MACROS[key]


# --- Jenkins H ------------------------------------------------------------------------------


def _hash_value(seed: str, position: int) -> int:
    """A stable (cross-process) 64-bit hash of the seed and the field position."""
    digest = hashlib.sha256(f"{seed}\x00{position}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _resolve_hash_item(spec: FieldSpec, item: str, hashed: int) -> str:
    match = _HASH.fullmatch(item)
    if match is None:
        raise spec.error(f"{item!r} is not a valid H form (use H, H(a-b), H/n or H(a-b)/n)")
    lo_txt, hi_txt, step_txt = match.groups()
    lo, hi, end = spec.lo, spec.hash_hi, spec.top
    if lo_txt is not None:
        lo, hi = int(lo_txt), int(hi_txt)
        if lo < spec.lo or hi > spec.top:
            raise spec.error(f"{item!r}: range is out of range {spec.lo}-{spec.top}")
        if lo > hi:
            raise spec.error(f"{item!r}: range is reversed ({lo} is greater than {hi})")
        end = hi
    if step_txt is None:
        return str(lo + hashed % (hi - lo + 1))
    step = _check_step(spec, step_txt, item)
    offset = lo + hashed % min(step, hi - lo + 1)
    return str(offset) if offset + step > end else f"{offset}-{end}/{step}"


def resolve_hash_fields(expression: str, seed: str) -> str:
    """Replace every Jenkins ``H`` item with numbers derived from ``seed`` (stable)."""
    if not isinstance(seed, str):
        raise TypeError(f"seed must be a string, got {type(seed).__name__}")
    fields = split_fields(expression)
    out = []
    positions = _HASH_POSITIONS[len(fields)]
    for position, spec, text in zip(positions, specs_for(fields), fields, strict=True):
        if "h" not in text.lower():
            out.append(text)
            continue
        hashed = _hash_value(seed, position)
        items = [
            _resolve_hash_item(spec, item, hashed) if item[:1] in ("H", "h") else item
            for item in text.split(",")
        ]
        out.append(",".join(items))
    return " ".join(out)


# --- validation and compilation -------------------------------------------------------------


def _check_step(spec: FieldSpec, text: str, item: str) -> int:
    if not _DIGITS.fullmatch(text):
        raise spec.error(f"{item!r}: step {text!r} is not a whole number")
    step = int(text)
    if not 1 <= step <= spec.span:
        raise spec.error(f"{item!r}: step {step} must be between 1 and {spec.span}")
    return step


def _value(spec: FieldSpec, token: str, item: str) -> int:
    named = spec.names.get(token.upper())
    if named is not None:
        return named
    if not token:
        raise spec.error(f"{item!r} is malformed")
    if not _DIGITS.fullmatch(token):
        raise spec.error(f"{token[:20]!r} is not a valid value")
    value = int(token)
    if not spec.lo <= value <= spec.hi:
        raise spec.error(f"{value} is out of range {spec.lo}-{spec.hi}")
    return value


def _item_bounds(spec: FieldSpec, base: str, item: str, stepped: bool) -> tuple[int, int]:
    if base == "*":
        return spec.lo, spec.top
    first, dash, last = base.partition("-")
    lo = _value(spec, first, item)
    if not dash:
        return (lo, max(lo, spec.top)) if stepped else (lo, lo)
    hi = _value(spec, last, item)
    if lo > hi:
        raise spec.error(f"range {base!r} is reversed ({lo} is greater than {hi})")
    return lo, hi


def _item_mask(spec: FieldSpec, item: str) -> int:
    if not item:
        raise spec.error("empty item in list")
    if item[:1] in ("H", "h"):
        raise spec.error(f"{item!r}: unresolved H (resolve it with parse_cron)")
    base, slash, step_txt = item.partition("/")
    step = _check_step(spec, step_txt, item) if slash else 1
    lo, hi = _item_bounds(spec, base, item, bool(slash))
    mask = 0
    for value in range(lo, hi + 1, step):
        mask |= 1 << value
    return mask


def field_mask(spec: FieldSpec, text: str) -> int:
    """The set of values a plain field selects, as a bit mask (bit v set: value v selected)."""
    mask, rules = field_items(spec, text)
    if rules:
        raise spec.error(f"{text[:40]!r}: L, W and # are not plain values")
    return mask


def field_items(spec: FieldSpec, text: str) -> tuple[int, Rules]:
    """A field's plain values as a bit mask, and its day rules (L, W, #) in item order."""
    mask, rules = 0, []
    for item in text.split(","):
        if spec.name == "day_of_month" and item and days.is_dom_rule(item):
            rules.append(days.parse_dom_rule(item, spec.error))
        elif spec.name == "day_of_week" and item and days.is_dow_rule(item):
            rules.append(
                days.parse_dow_rule(item, lambda t, i=item: _value(spec, t, i), spec.error)
            )
        else:
            mask |= _item_mask(spec, item)
    if spec.name == "day_of_week" and mask & (1 << 7):
        mask = (mask | 1) & 0x7F
    return mask, tuple(dict.fromkeys(rules))


def _check_fires(expression: str, matcher: CronMatcher) -> None:
    """Reject day-of-month/month combinations that never exist (``0 0 30 2 *``,
    ``0 0 L-29 2 *``, ``0 0 31W 4 *``). With the day-of-week field restricted some weekday
    rule or value always fires (OR), so only the day-of-month-only case can be empty."""
    if not matcher.dom_only:
        return
    for month in range(1, 13):
        if not matcher.months >> month & 1:
            continue
        if matcher.doms & ((1 << (MONTH_DAYS[month] + 1)) - 1):
            return
        if any(days.dom_rule_possible(rule, month) for rule in matcher.dom_rules):
            return
    raise ScheduleError(
        f"{expression!r} never fires: no selected month has the selected day of the month",
        "cron",
    )


@lru_cache(maxsize=16384)
def compile_expression(expression: str) -> CronMatcher:
    """Validate a resolved expression (no ``H``; five or six fields) and build its matcher.
    Cached. The seconds-field policy is :func:`parse_cron`'s, not checked here."""
    fields = split_fields(expression)
    specs = specs_for(fields)
    items = [field_items(spec, text) for spec, text in zip(specs, fields, strict=True)]
    seconds = items.pop(0)[0] if len(fields) == 6 else None
    (minutes, _), (hours, _), (doms, dom_rules), (months, _), (dows, dow_rules) = items
    matcher = CronMatcher(
        minutes,
        hours,
        doms,
        months,
        dows,
        seconds=seconds,
        dom_rules=dom_rules,
        dow_rules=dow_rules,
    )
    _check_fires(" ".join(fields), matcher)
    return matcher


def seconds_spacing(mask: int) -> int | None:
    """The closest two selected seconds can be (None: one second selected). The gap from
    the last selected second to the first one of the next minute counts too, as if the
    next minute fires as well (conservative: the minute field may not allow it)."""
    selected = [s for s in range(60) if mask >> s & 1]
    if len(selected) < 2:
        return None
    gaps = [b - a for a, b in pairwise(selected)]
    return min(*gaps, 60 - selected[-1] + selected[0])


def _six_fields_refused() -> ScheduleError:
    return ScheduleError(
        f"expected 5 fields ({_FIELD_COUNT_HELP}), got 6; the 6-field (seconds) form is "
        "not accepted here",
        "cron",
    )


def check_seconds(fields: list[str], minimum_interval_seconds: int | None) -> None:
    """The six-field policy: refused without a minimum interval; with one, refused when two
    selected seconds can be closer than it. So with a minimum of 60 or more only a single
    seconds value passes (``0``, ``30``), and ``*/15`` needs a minimum of at most 15."""
    if len(fields) != 6:
        return
    if minimum_interval_seconds is None:
        raise _six_fields_refused()
    if isinstance(minimum_interval_seconds, bool) or not isinstance(minimum_interval_seconds, int):
        raise TypeError("minimum_interval_seconds must be an int")
    minimum = max(1, minimum_interval_seconds)
    gap = seconds_spacing(field_mask(SECOND_SPEC, fields[0]))
    if gap is not None and gap < minimum:
        raise SECOND_SPEC.error(
            f"{fields[0][:40]!r} fires {gap} second{'s' if gap != 1 else ''} apart, more often "
            f"than the minimum interval of {minimum} seconds; use a single second (e.g. 0)"
            + (" or a step of at least the minimum" if minimum < 60 else "")
        )


def _check_choice(value: str, choices: tuple[str, ...], name: str) -> None:
    if value not in choices:
        raise ScheduleError(f"{name} must be one of {', '.join(choices)}", name)


def parse_cron(
    expression: str,
    *,
    timezone: str,
    seed: str,
    dst_gap: str = "shift",
    dst_repeat: str = "first",
    minimum_interval_seconds: int | None = None,
) -> CronSchedule:
    """Validate everything, resolve ``H`` with ``seed``, return the resolved schedule.

    ``minimum_interval_seconds`` (the operator's minimum) enables the six-field form with
    seconds, subject to :func:`check_seconds`; without it six fields are refused."""
    if minimum_interval_seconds is None and len(split_fields(expression)) == 6:
        raise _six_fields_refused()  # before H resolution can complain about the seconds
    resolved = resolve_hash_fields(expression, seed)
    compile_expression(resolved)
    check_seconds(resolved.split(), minimum_interval_seconds)
    validate_timezone(timezone)
    _check_choice(dst_gap, DST_GAP_CHOICES, "dst_gap")
    _check_choice(dst_repeat, DST_REPEAT_CHOICES, "dst_repeat")
    return CronSchedule(resolved, timezone, dst_gap, dst_repeat)


def matches(expression: str, wall: datetime) -> bool:
    """Does the (naive, local) wall-clock minute ``wall`` match the resolved expression?"""
    return compile_expression(expression).matches(wall)
