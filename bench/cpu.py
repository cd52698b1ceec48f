"""CPU time spent by each kind of process on this machine between two snapshots: which
processes a benchmark's work costs, and how much of the cores it leaves idle.

A snapshot reads every process's user+system time (`/proc` through psutil) and files it
under a group: the worker's parent, its pool children, PostgreSQL, Redis, RabbitMQ, this
process, and the rest. Processes that ended between two snapshots are not counted, so
the groups are for long-lived processes (a benchmark's workers and servers)."""

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


def snapshot(worker_pid: int) -> dict[int, tuple[str, float]]:
    """pid -> (group, CPU seconds so far) of every process this user may read."""
    taken: dict[int, tuple[str, float]] = {}
    for process in psutil.process_iter(["name", "ppid", "cpu_times"]):
        times = process.info["cpu_times"]
        if times is None:  # gone, or not ours to read
            continue
        group = _group(process, worker_pid, process.info["name"] or "", process.info["ppid"])
        taken[process.pid] = (group, times.user + times.system)
    return taken


@dataclass(frozen=True)
class CpuSplit:
    """CPU seconds per group between two snapshots."""

    seconds: dict[str, float]

    def per_item_us(self, count: int) -> dict[str, float]:
        return {group: 1e6 * s / count for group, s in self.seconds.items()}


def between(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> CpuSplit:
    seconds = dict.fromkeys(GROUPS, 0.0)
    for pid, (group, cpu) in after.items():
        start = before.get(pid)
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
