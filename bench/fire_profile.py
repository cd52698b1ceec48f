"""Where a real scheduler's fire step spends its wall time: `py-spy` samples the process
from outside (waits on PostgreSQL and Redis included, `--idle`), and the samples taken
inside `beat/fire.py`'s `fire` are summed by the steps named below. Used by
`partitioned-fire --profile`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

RATE = 1000  # samples a second: one sample is one millisecond of wall time

# (label, a frame that marks it), first match wins, in the order of the fire step.
STEPS = [
    ("pop the due runs (heap)", "PendingRuns.pop_due"),
    ("fair admission: offer", "AdmissionControl.offer"),
    ("fair admission: choose", "AdmissionControl.choose"),
    ("early publication: read runs and jobs", "publishable_runs"),
    ("early publication: wait for the pushes", "concurrent/futures/_base.py"),
    ("early publication: other", "publish_first"),
    ("chunks: mark queued / admit (PostgreSQL)", "_admit_all"),
    ("chunks: bookkeeping after the commit", "_apply"),
]
PUSHER = ("pusher thread: pushing (alongside the reads)", "_push (beat/fire.py")


def start(pid: int, out: Path, seconds: float) -> subprocess.Popen | None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("py-spy is not installed (make install): no profile", flush=True)
        return None
    sampling = ["-p", str(pid), "-r", str(RATE), "--idle", "--nonblocking"]
    output = ["--format", "raw", "-o", str(out), "--duration", str(int(seconds))]
    return subprocess.Popen(
        [spy, "record", *sampling, *output],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def summarise(raw: Path) -> dict[str, int]:
    """Milliseconds of the fire step by step (`other` is the rest of `fire`)."""
    steps: Counter = Counter()
    if not raw.exists():
        return {}
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if any(f.startswith(PUSHER[1]) for f in frames):
            steps[PUSHER[0]] += int(count)
            continue
        if not any(f.startswith("fire (beat/fire.py") for f in frames):
            continue
        label = "other"
        for name, marker in STEPS:
            if any(marker in f for f in frames):
                label = name
                break
        steps[label] += int(count)
    steps["total"] = sum(v for k, v in steps.items() if k != PUSHER[0])
    return dict(steps)


def report(steps: dict[str, int], title: str) -> None:
    if not steps:
        print(f"{title}: no samples", flush=True)
        return
    print(f"{title}: fire step {steps['total']} ms of wall time, sampled", flush=True)
    # (py-spy at 1,000 samples a second takes some of a core: a profiled run is slower.)
    for name, _ in [*STEPS, ("other", ""), PUSHER]:
        if steps.get(name):
            print(f"  {name:<44} {steps[name]:>6} ms", flush=True)
