"""Runs the leader holds in memory until their instant, each with its Celery message built
ahead of time (ADR 0003), and the heap that orders them."""

from __future__ import annotations

import heapq
import itertools
import operator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .messages import MessageTemplate, queue_for, time_limits
from .store import RunRef

EXECUTE_TASK = "runs.execute_run"


@dataclass
class Pending:
    """A run waiting in memory for its instant, with its Celery message already built."""

    due: float
    seq: int
    tenant_id: int
    schema: str
    run_id: Any
    job_id: int
    scheduled_for: datetime
    trigger: str
    attempt: int
    priority: str
    timeout_seconds: int
    queue: str
    message: bytes
    # True when the run may have waited out its instant with no leader holding it: it came
    # from PostgreSQL (relay, takeover) or was put back for a failing tenant's back-off.
    # Only those go through the misfire policy at admission; a run this leader held from
    # before its instant is on time even when the leader wakes a few ms after it, and a
    # `queue`-policy run released after its turn came is not a misfire either.
    judge_lateness: bool = False


# Oldest due first, then the order they were prepared in: the fire's order (a C key, not
# a lambda: sorting 10,000 runs twice per fire).
DUE_ORDER = operator.attrgetter("due", "seq")


class PendingRuns:
    """A heap of (due, seq, entry) (tuples compare in C, dataclasses in Python), the ids it
    holds, and the runs that the `queue` concurrency policy holds back."""

    def __init__(self, *, shard_count: int, origin: str) -> None:
        self.shard_count = shard_count
        self.origin = origin
        self.heap: list[tuple[float, int, Pending]] = []
        self.known: set = set()  # run ids in the heap or held
        self.held: dict[tuple[int, int], list[Pending]] = {}
        self._seq = itertools.count()
        self._template = MessageTemplate(EXECUTE_TASK, origin)

    def build(self, tenant_id: int, schema: str, ref: RunRef) -> Pending:
        queue, message = self._message(
            tenant_id,
            schema,
            ref.job_id,
            ref.run_id,
            ref.attempt,
            ref.priority,
            ref.timeout_seconds,
        )
        return Pending(
            ref.due_at.timestamp(),
            next(self._seq),
            tenant_id,
            schema,
            ref.run_id,
            ref.job_id,
            ref.scheduled_for,
            ref.trigger,
            ref.attempt,
            ref.priority,
            ref.timeout_seconds,
            queue,
            message,
        )

    def rebuilt(self, entry: Pending, priority: str, timeout_seconds: int) -> Pending:
        """The entry with its message built again for the job as it is now (an edit
        changed its priority, hence its queue, or its timeout, hence the time limits)."""
        if (entry.priority, entry.timeout_seconds) == (priority, timeout_seconds):
            return entry
        entry.priority, entry.timeout_seconds = priority, timeout_seconds
        entry.queue, entry.message = self._message(
            entry.tenant_id,
            entry.schema,
            entry.job_id,
            entry.run_id,
            entry.attempt,
            priority,
            timeout_seconds,
        )
        return entry

    def _message(self, tenant_id, schema, job_id, run_id, attempt, priority, timeout):
        queue = queue_for(priority, f"{tenant_id}:{job_id}", self.shard_count)
        message = self._template.render(
            run_id=str(run_id),
            schema=schema,
            attempt=attempt,
            queue=queue,
            time_limits=time_limits(timeout),
        )
        return queue, message

    def remember(self, entry: Pending) -> bool:
        if entry.run_id in self.known:
            return False
        self.known.add(entry.run_id)
        heapq.heappush(self.heap, (entry.due, entry.seq, entry))
        return True

    def hold(self, entry: Pending) -> None:
        entry.judge_lateness = False  # it waits for its turn, not for a leader
        self.held.setdefault((entry.tenant_id, entry.job_id), []).append(entry)

    def requeue(self, entries: list[Pending], not_before: float | None = None) -> None:
        """Entries to be tried again: back in the heap, not before `not_before` (a failing
        tenant's back-off); their `due` stays what it was, for lag figures."""
        for entry in entries:
            key = entry.due if not_before is None else max(entry.due, not_before)
            heapq.heappush(self.heap, (key, entry.seq, entry))

    def pop_due(self, now: float, limit: int | None = None) -> list[Pending]:
        due: list[Pending] = []
        while self.heap and self.heap[0][0] <= now and (limit is None or len(due) < limit):
            due.append(heapq.heappop(self.heap)[2])
        return due

    def forget(self, run_ids) -> None:
        self.known.difference_update(run_ids)

    def release(self, tenant_id: int, job_id: int) -> int:
        """A run of the job ended: its held runs go back to the heap for admission."""
        entries = self.held.pop((tenant_id, job_id), [])
        self.requeue(entries)
        return len(entries)

    def release_all(self) -> int:
        """Every held run is admitted again (the relay's safety net for lost wake-ups)."""
        count = 0
        for key in list(self.held):
            count += self.release(*key)
        return count

    @property
    def next_due(self) -> float | None:
        return self.heap[0][0] if self.heap else None

    def __len__(self) -> int:
        return len(self.heap)
