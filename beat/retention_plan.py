"""Retention planning (pure): which tenant prunes next, where its history ends, and whether
a batch fits before the next run is due. `beat/retention.py` does the deleting.

Tenants take turns: one batch each per turn, so a tenant with ten million old runs costs
another tenant one batch of waiting, never its whole backlog.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass
class TenantTurn:
    tenant_id: int
    schema: str
    cutoff: datetime  # ended runs that finished before this go
    runs: int = 0  # pruned in this pass so far
    attempts: int = 0
    dag_runs: int = 0
    batches: int = 0


def cutoff_for(now: datetime, days: int) -> datetime | None:
    """The end of the history kept for `days` days; None: kept for ever (0 days)."""
    if days <= 0:
        return None
    return now - timedelta(days=days)


def retention_days(own: int | None, default: int) -> int:
    """A tenant's own retention, else the fleet's default."""
    return default if own is None else own


class RoundRobin:
    """The tenants of one pass, in turns: `next()` gives the next tenant, `again()` puts
    back at the end one whose batch was full (more to prune); one that is done is simply
    not put back."""

    def __init__(self) -> None:
        self._queue: deque[TenantTurn] = deque()

    def start(self, turns: Iterable[TenantTurn]) -> None:
        self._queue = deque(turns)

    def next(self) -> TenantTurn | None:
        return self._queue.popleft() if self._queue else None

    def again(self, turn: TenantTurn) -> None:
        self._queue.append(turn)

    def __len__(self) -> int:
        return len(self._queue)


class BatchSizer:
    """How many runs the next batch may delete: as many as fit before the next run is due
    (from the seconds per run the last batches took), so that pruning does not delay a
    fire. None fit when the next run is closer than a small batch would take; but a leader
    whose runs are due every few milliseconds must still prune: after `starve_seconds`
    without a batch, a small one goes anyway (it costs a fire a few milliseconds). Whatever
    the room, a batch is kept to about `target_seconds` (a slow or loaded database gets
    smaller batches, far from the statement timeout), and one that failed (a timeout)
    halves the next ones."""

    def __init__(
        self,
        maximum: int,
        *,
        minimum: int = 100,
        seconds_per_run: float = 20e-6,
        overhead_seconds: float = 0.005,
        starve_seconds: float = 30.0,
        target_seconds: float = 0.25,
        weight: float = 0.3,
    ) -> None:
        self.maximum = maximum
        self.minimum = min(minimum, maximum)
        self.seconds_per_run = seconds_per_run
        self.overhead = overhead_seconds
        self.starve_seconds = starve_seconds
        self.target_seconds = target_seconds
        self.weight = weight
        self.last_batch: float | None = None  # when the last batch ran (the caller's clock)

    def size(self, now: float, next_due: float | None, margin: float = 1.5) -> int:
        """Runs the batch starting at `now` may delete; 0: none now (fire first)."""
        largest = max(self.minimum, min(self.maximum, self._runs_in(self.target_seconds)))
        if next_due is None:
            return largest
        fits = self._runs_in((next_due - now) / margin)
        if fits >= self.minimum:
            return min(fits, largest)
        starved = self.last_batch is None or now - self.last_batch >= self.starve_seconds
        return self.minimum if starved else 0

    def _runs_in(self, seconds: float) -> int:
        room = seconds - self.overhead
        return int(room / self.seconds_per_run) if room > 0 else 0

    def failed(self, now: float, runs: int, seconds: float) -> None:
        """A batch of `runs` failed after `seconds` (a statement timeout, say): assume the
        worst of it, so that the next batches are smaller."""
        self.last_batch = now
        self.seconds_per_run = max(self.seconds_per_run * 2, seconds / max(runs, 1))

    def record(self, now: float, seconds: float, runs: int) -> None:
        """A batch that deleted `runs` runs took `seconds`."""
        self.last_batch = now
        if runs >= self.minimum:
            per_run = max(seconds - self.overhead, 0.0) / runs
            self.seconds_per_run += self.weight * (per_run - self.seconds_per_run)
