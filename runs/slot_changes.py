"""Which already-materialised runs of a job survive an edit of its schedule: pure.

The leader materialises slots ahead of time (its lookahead window and its extra). When an
edit lands inside that window, each run prepared for a slot after the edit must match the new
schedule exactly (same slot, same fate, same due time with the job's jitter), or go: a run
that matches is kept (its id stays, and the leader fires it with the job as edited), one
that does not is removed so that the leader materialises the slot afresh, or not at all.
Removing rather than cancelling matters: a cancelled row would keep the slot's unique
(job, scheduled_for) key and block the run the new schedule wants there.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class SlotRun:
    """A run as materialised for a slot: its fate (`scheduled`, or `skipped` with a reason)
    and the instant it is due."""

    scheduled_for: datetime
    status: str
    skip_reason: str
    due_at: datetime


def runs_to_remove(existing: dict[Any, SlotRun], wanted: list[SlotRun]) -> list[Any]:
    """Ids of the existing runs that the new schedule does not produce exactly."""
    expected = {run.scheduled_for: run for run in wanted}
    return [run_id for run_id, run in existing.items() if expected.get(run.scheduled_for) != run]
