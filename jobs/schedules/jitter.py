"""Deterministic jitter: the same (seed, slot) always gets the same delay, in every process."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from .errors import ScheduleError
from .model import check_aware


def jitter_seconds_for(seed: str, at: datetime, jitter_seconds: int) -> int:
    """A stable delay in [0, jitter_seconds] for the slot ``at`` of the job ``seed``."""
    if isinstance(jitter_seconds, bool) or not isinstance(jitter_seconds, int):
        raise ScheduleError("jitter_seconds must be a whole number", "jitter_seconds")
    if jitter_seconds < 0:
        raise ScheduleError("jitter_seconds must not be negative", "jitter_seconds")
    check_aware(at, "at")
    if jitter_seconds == 0:
        return 0
    instant = at.astimezone(UTC).isoformat()
    digest = hashlib.sha256(f"{seed}\x00{instant}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (jitter_seconds + 1)
