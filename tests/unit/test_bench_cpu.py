"""The throughput benchmark's CPU split (bench/cpu.py): each process's CPU time between two
snapshots, filed under its group, and the live snapshot's grouping of real processes,
including the time of a child that ended between the snapshots."""

from __future__ import annotations

import os
import subprocess
import sys

from bench import cpu


def test_a_process_counts_what_it_used_between_the_snapshots():
    before = {
        (10, 1.0, "self"): ("worker parent", 5.0),
        (11, 1.0, "self"): ("postgres", 2.0),
        (12, 1.0, "self"): ("redis", 1.0),
    }
    after = {
        (10, 1.0, "self"): ("worker parent", 5.5),
        (11, 1.0, "self"): ("postgres", 2.25),
        (12, 1.0, "self"): ("redis", 1.0),
    }
    split = cpu.between(before, after)
    assert split.seconds["worker parent"] == 0.5
    assert split.seconds["postgres"] == 0.25
    assert split.seconds["redis"] == 0.0
    assert split.per_item_us(1_000)["worker parent"] == 500.0


def test_a_process_born_between_the_snapshots_counts_from_zero():
    # A pool child started mid-round; and a pid reused by a new process (another start).
    before = {(20, 1.0, "self"): ("other", 9.0)}
    after = {
        (20, 2.0, "self"): ("worker children", 0.5),
        (21, 2.0, "self"): ("worker children", 0.25),
    }
    assert cpu.between(before, after).seconds["worker children"] == 0.75
    assert cpu.between(before, after).seconds["other"] == 0.0


# Forks a child that burns CPU and ends, when told to; says when it has reaped it.
PARENT = """
import subprocess, sys
sys.stdin.readline()
subprocess.run([sys.executable, "-c", "sum(range(20_000_000))"], check=True)
print("reaped", flush=True)
sys.stdin.readline()
"""


def test_a_child_that_ended_between_the_snapshots_still_counts():
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        before = cpu.snapshot(parent.pid)
        parent.stdin.write("go\n")
        parent.stdin.flush()
        assert parent.stdout.readline().strip() == "reaped"
        after = cpu.snapshot(parent.pid)
    finally:
        parent.kill()
        parent.wait()
    assert {group for group, _s in after.values()} >= {"worker parent", "bench"}
    assert after[next(k for k in after if k[0] == os.getpid() and k[2] == "self")][0] == "bench"
    # The child is gone: only its parent's reaped-children time can hold its CPU.
    assert cpu.between(before, after).seconds["worker children"] > 0.1
