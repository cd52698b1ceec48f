"""How a DAG run moves on: pure, from its graph and the runs it has so far.

Every settle re-derives the whole state from what the runs say (never from what the last
settle decided), so settling twice, late, or from a view that a replay has since changed
converges on the same answer:

- a job whose upstreams (inside this DAG run) have all succeeded gets its run (`create`);
- a job with an upstream that did not succeed (dead, cancelled, skipped, or itself skipped
  as `upstream_failed`) is recorded `skipped` with the reason `upstream_failed`
  (`skip`), transitively, so the ledger shows why nothing ran;
- a job skipped as `upstream_failed` whose upstreams no longer failed (one was replayed)
  has that record withdrawn (`revive`), and is created at once if its upstreams have all
  succeeded by then;
- the DAG run is `succeeded` once every job's run succeeded, `failed` once none is to
  come and one did not succeed, else `running`.
"""

from __future__ import annotations

import graphlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from . import states

_OK, _FAILED, _PENDING = "ok", "failed", "pending"


@dataclass(frozen=True)
class NodeRun:
    """What the DAG run's run of one job says."""

    status: str
    skip_reason: str = ""

    @property
    def derived(self) -> bool:
        """A record this module wrote for an upstream's failure, re-derived each time."""
        return self.status == states.SKIPPED and self.skip_reason == states.SKIP_UPSTREAM_FAILED


@dataclass
class Step:
    create: list[int] = field(default_factory=list)
    skip: list[int] = field(default_factory=list)
    revive: list[int] = field(default_factory=list)  # upstream_failed records withdrawn
    status: str = states.DAG_RUNNING


def _state_of(run: NodeRun) -> str:
    if run.status == states.SUCCEEDED:
        return _OK
    if run.status in states.TERMINAL:  # dead, cancelled, skipped: it did not succeed
        return _FAILED
    return _PENDING


def settle(
    nodes: Iterable[int], edges: Iterable[tuple[int, int]], runs: Mapping[int, NodeRun]
) -> Step:
    """What to do now; `runs` maps a job to its run in this DAG run (absent: none yet)."""
    upstreams: dict[int, list[int]] = defaultdict(list)
    graph: dict[int, set[int]] = {node: set() for node in nodes}
    for upstream, downstream in edges:
        upstreams[downstream].append(upstream)
        graph.setdefault(downstream, set()).add(upstream)
    step, state = Step(), {}
    for node in graphlib.TopologicalSorter(graph).static_order():
        run = runs.get(node)
        if run is not None and not run.derived:
            state[node] = _state_of(run)
            continue
        above = [state[u] for u in upstreams[node]]
        if not above and run is None:  # the root's run is missing: nothing can go on
            state[node] = _PENDING
        elif _FAILED in above:
            state[node] = _FAILED
            if run is None:
                step.skip.append(node)
        else:
            state[node] = _PENDING  # created now, or waiting for its upstreams
            if run is not None:
                step.revive.append(node)
            if all(s == _OK for s in above):
                step.create.append(node)
    values = set(state.values())
    if values == {_OK} or not values:
        step.status = states.DAG_SUCCEEDED
    elif _PENDING not in values:
        step.status = states.DAG_FAILED
    return step
