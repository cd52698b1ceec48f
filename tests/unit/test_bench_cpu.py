"""The throughput benchmark's CPU split (bench/cpu.py): each process's CPU time between two
snapshots, filed under its group, and the live snapshot's grouping of real processes."""

from __future__ import annotations

import os
import subprocess
import sys

from bench import cpu


def test_a_process_counts_what_it_used_between_the_snapshots():
    before = {10: ("worker parent", 5.0), 11: ("postgres", 2.0), 12: ("redis", 1.0)}
    after = {10: ("worker parent", 5.5), 11: ("postgres", 2.25), 12: ("redis", 1.0)}
    split = cpu.between(before, after)
    assert split.seconds["worker parent"] == 0.5
    assert split.seconds["postgres"] == 0.25
    assert split.seconds["redis"] == 0.0
    assert split.per_item_us(1_000)["worker parent"] == 500.0


def test_a_process_born_between_the_snapshots_counts_from_zero():
    # A pool child restarted mid-round, or a pid reused by another kind of process.
    before = {20: ("other", 9.0)}
    after = {20: ("worker children", 0.5), 21: ("worker children", 0.25)}
    assert cpu.between(before, after).seconds["worker children"] == 0.75
    assert cpu.between(before, after).seconds["other"] == 0.0


def test_a_live_snapshot_files_the_worker_its_children_and_this_process():
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; subprocess.run([sys.executable, '-c', "
            "'import time; time.sleep(30)'])",
        ]
    )
    try:
        for _ in range(200):
            taken = cpu.snapshot(parent.pid)
            children = [pid for pid, (group, _s) in taken.items() if group == "worker children"]
            if children:
                break
            subprocess.run([sys.executable, "-c", "pass"], check=True)  # give it time to fork
        assert taken[parent.pid][0] == "worker parent"
        assert len(children) == 1
        assert taken[os.getpid()][0] == "bench"
    finally:
        subprocess.run(["pkill", "-P", str(parent.pid)], check=False)
        parent.kill()
        parent.wait()
