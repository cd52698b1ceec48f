"""Cron expressions: macros, per-field validation with precise messages, Jenkins ``H``
resolution and compilation into a :class:`~.match.CronMatcher`.

Semantics (standard 5-field cron): minute hour day-of-month month day-of-week; ``*``, numbers,
names (JAN-DEC, SUN-SAT, any case), ranges ``a-b``, steps ``*/n``, ``a-b/n`` and ``a/n``
(= ``a-max/n``), comma lists; day-of-week 0-7 with 0 and 7 both Sunday. When both day fields
are restricted (neither covers its whole range) a day matches if either matches (OR);
otherwise both must match. An equal range ``a-a`` is the single value ``a``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache

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


def split_fields(expression: str) -> list[str]:
    """Expand a macro and split into exactly five fields, or raise ScheduleError("cron")."""
    if not isinstance(expression, str):
        raise ScheduleError("cron expression must be a string", "cron")
    text = expression.strip()
    if not text:
        raise ScheduleError("cron expression is empty", "cron")
    if text.startswith("@"):
        text = _expand_macro(text)
    fields = text.split()
    if len(fields) != 5:
        extra = ""
        if len(fields) in (6, 7):
            extra = "; 6-field (seconds) and 7-field (year) forms are not supported"
        raise ScheduleError(
            f"expected 5 fields ({_FIELD_COUNT_HELP}), got {len(fields)}{extra}", "cron"
        )
    return fields


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
    for position, (spec, text) in enumerate(zip(SPECS, fields, strict=True)):
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
    """The set of values a field selects, as a bit mask (bit v set: value v selected)."""
    mask = 0
    for item in text.split(","):
        mask |= _item_mask(spec, item)
    if spec.name == "day_of_week" and mask & (1 << 7):
        mask = (mask | 1) & 0x7F
    return mask


def _check_fires(expression: str, doms: int, months: int, dom_only: bool) -> None:
    """Reject day-of-month/month combinations that never exist (``0 0 30 2 *``)."""
    if not dom_only:
        return
    for month in range(1, 13):
        if months >> month & 1 and doms & ((1 << (MONTH_DAYS[month] + 1)) - 1):
            return
    raise ScheduleError(
        f"{expression!r} never fires: no selected month has the selected day of the month",
        "cron",
    )


@lru_cache(maxsize=16384)
def compile_expression(expression: str) -> CronMatcher:
    """Validate a resolved expression (no ``H``) and build its matcher. Cached."""
    fields = split_fields(expression)
    masks = [field_mask(spec, text) for spec, text in zip(SPECS, fields, strict=True)]
    matcher = CronMatcher(*masks)
    _check_fires(" ".join(fields), masks[2], masks[3], matcher.dom_only)
    return matcher


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
) -> CronSchedule:
    """Validate everything, resolve ``H`` with ``seed``, return the resolved schedule."""
    resolved = resolve_hash_fields(expression, seed)
    compile_expression(resolved)
    validate_timezone(timezone)
    _check_choice(dst_gap, DST_GAP_CHOICES, "dst_gap")
    _check_choice(dst_repeat, DST_REPEAT_CHOICES, "dst_repeat")
    return CronSchedule(resolved, timezone, dst_gap, dst_repeat)


def matches(expression: str, wall: datetime) -> bool:
    """Does the (naive, local) wall-clock minute ``wall`` match the resolved expression?"""
    return compile_expression(expression).matches(wall)
