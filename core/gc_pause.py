"""Keep Python's cyclic garbage collector out of latency-critical steps.

A full collection walks every tracked object the process holds. In a leader with tens of
thousands of runs in memory one took 174 ms, and the allocations of a fire step (tuples,
rows, messages) were what set it off, in the middle of publishing a due second. Pausing
the collector for the step moves that collection to after it; reference counting still
frees everything that is not in a cycle at once, so memory does not grow meanwhile."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic collection inside the block (nested blocks leave it to the outermost)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def freeze_startup_objects() -> None:
    """Move everything allocated so far (modules, settings, Django's app registry) out of
    the collector's reach for good, so that later full collections walk only what the
    process allocated since: the long-lived state a collection can actually free."""
    gc.collect()
    gc.freeze()
