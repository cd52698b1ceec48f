"""Fault injection for the chaos suite, off unless an environment variable names a trigger.

`TICKWORK_FREEZE_IN_FENCE=<path>`: while the file `<path>` exists, the next leader
transaction of the step it names (`fire`, `materialise`, `reap`; empty: any) to pass its
fencing check writes its pid to `<path>.frozen` and stops itself with SIGSTOP, inside the
fenced transaction: the one moment a frozen leader can hold up a
takeover, made to happen on purpose (`chaos/s2_leader_freeze.py`). With the variable
unset, a failpoint costs one attribute check.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

FREEZE_IN_FENCE = os.environ.get("TICKWORK_FREEZE_IN_FENCE", "")


def freeze_in_fence(step: str) -> None:
    if not FREEZE_IN_FENCE:
        return
    trigger = Path(FREEZE_IN_FENCE)
    try:
        wanted = trigger.read_text().strip()
    except OSError:
        return
    if wanted and wanted != step:
        return
    trigger.unlink(missing_ok=True)  # once per trigger
    Path(f"{trigger}.frozen").write_text(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGSTOP)
