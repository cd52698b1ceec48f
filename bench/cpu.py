"""CPU time spent by each kind of process on this machine between two snapshots: which
processes a benchmark's work costs.

A snapshot reads every process's user+system time (`/proc` through psutil) and files it
under a group: the worker's parent, its pool children, PostgreSQL, Redis, RabbitMQ, this
process, and the rest: every process of that kind on the machine, so the figures are a
quiet machine's. A process that ends between two snapshots counts through its parent's
reaped-children time (a database backend under the postmaster, a pool child under the
worker's parent), when that parent is still there."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

import psutil

GROUPS = ("worker parent", "worker children", "postgres", "redis", "rabbitmq", "bench", "other")


def _group(process: psutil.Process, worker_pid: int, name: str, ppid: int) -> str:
    if process.pid == worker_pid:
        return "worker parent"
    if ppid == worker_pid:
        return "worker children"
    if process.pid == os.getpid():
        return "bench"
    if name.startswith("postgres") or name.startswith("postmaster"):
        return "postgres"
    if name.startswith("redis-server"):
        return "redis"
    if name.startswith("beam"):  # RabbitMQ's Erlang VM
        return "rabbitmq"
    return "other"


# (pid, start time, "self" or "reaped"): a pid reused by a new process is another key.
Key = tuple[int, float, str]
Snapshot = dict[Key, tuple[str, float]]


def snapshot(worker_pid: int) -> Snapshot:
    """Every process this user may read: its own CPU seconds so far, and those of its
    children that ended (the kernel adds them to the parent that reaped them), so that a
    database backend or a pool child that exits between two snapshots still counts: under
    the postmaster's group and the worker's children's."""
    taken: Snapshot = {}
    for process in psutil.process_iter(["name", "ppid", "cpu_times", "create_time"]):
        times, started = process.info["cpu_times"], process.info["create_time"]
        if times is None or started is None:  # gone, or not ours to read
            continue
        group = _group(process, worker_pid, process.info["name"] or "", process.info["ppid"])
        taken[(process.pid, started, "self")] = (group, times.user + times.system)
        reaped_group = "worker children" if group == "worker parent" else group
        reaped = times.children_user + times.children_system
        taken[(process.pid, started, "reaped")] = (reaped_group, reaped)
    return taken


@dataclass(frozen=True)
class CpuSplit:
    """CPU seconds per group between two snapshots."""

    seconds: dict[str, float]

    def per_item_us(self, count: int) -> dict[str, float]:
        return {group: 1e6 * s / count for group, s in self.seconds.items()}


def between(before: Snapshot, after: Snapshot) -> CpuSplit:
    seconds = dict.fromkeys(GROUPS, 0.0)
    for key, (group, cpu) in after.items():
        start = before.get(key)
        # A process born during the interval counts from zero: its whole CPU time is new.
        seconds[group] += cpu - (start[1] if start and start[0] == group else 0.0)
    return CpuSplit(seconds)


@contextlib.contextmanager
def per_item(worker_pid: int, count: int, into: list[dict[str, float]]) -> Iterator[None]:
    """Around `count` items' work: appends each group's CPU µs per item to `into`."""
    before = snapshot(worker_pid)
    yield
    into.append(between(before, snapshot(worker_pid)).per_item_us(count))


def describe(per_run_us: dict[str, float]) -> str:
    total = sum(per_run_us.values())
    parts = ", ".join(f"{group} {us:,.0f}" for group, us in per_run_us.items() if us >= 0.5)
    return f"{total:,.0f} µs ({parts})"
