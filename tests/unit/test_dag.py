"""The pure DAG logic: graph checks (jobs/dag.py) and how a DAG run moves on
(runs/dag_progress.py), including a property test that drives random graphs through random
outcomes, settling at random moments, and checks what the ledger ends with."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.dag import (
    GraphLimits,
    component,
    depth,
    descendants,
    find_cycle,
    limit_error,
    replace_upstreams,
)
from runs import states
from runs.dag_progress import NodeRun, settle

DIAMOND = [(1, 2), (1, 3), (2, 4), (3, 4)]
OK, DEAD, RUNNING = NodeRun(states.SUCCEEDED), NodeRun(states.DEAD), NodeRun(states.RUNNING)
UPSTREAM_FAILED = NodeRun(states.SKIPPED, states.SKIP_UPSTREAM_FAILED)


# --- jobs/dag.py -----------------------------------------------------------------------


def test_find_cycle_names_it_in_the_direction_of_the_edges():
    assert find_cycle(DIAMOND) is None
    cycle = find_cycle([*DIAMOND, (4, 1)])
    assert cycle[0] == cycle[-1]
    pairs = set(itertools.pairwise(cycle))
    assert pairs <= {*DIAMOND, (4, 1)}  # every step of it is an edge, forwards
    assert find_cycle([(5, 5)]) == [5, 5]


def test_replace_upstreams_keeps_the_other_edges():
    assert sorted(replace_upstreams(DIAMOND, 4, [1])) == [(1, 2), (1, 3), (1, 4)]


def test_component_descendants_and_depth():
    edges = [*DIAMOND, (4, 5), (9, 10)]
    assert component(edges, 3)[0] == {1, 2, 3, 4, 5}
    assert descendants(edges, 2) == ({2, 4, 5}, [(2, 4), (4, 5)])
    assert descendants(edges, 5) == ({5}, [])
    assert depth(edges) == 3
    assert depth([]) == 0
    chain = [(i, i + 1) for i in range(999)]
    assert depth(chain) == 999


def test_limit_error_names_the_limit_that_is_passed():
    limits = GraphLimits(max_nodes=4, max_edges=10, max_depth=10)
    assert limit_error(DIAMOND, 1, limits) is None
    assert "5 jobs; the limit is 4" in limit_error([*DIAMOND, (4, 5)], 1, limits)
    assert "dependencies; the limit is 3" in limit_error(
        DIAMOND, 2, GraphLimits(max_nodes=10, max_edges=3, max_depth=10)
    )
    assert "2 dependencies deep; the limit is 1" in limit_error(
        DIAMOND, 4, GraphLimits(max_nodes=10, max_edges=10, max_depth=1)
    )
    # another graph of the tenant does not count against this one
    assert limit_error([*DIAMOND, (7, 8), (8, 9)], 1, limits) is None


# --- runs/dag_progress.py ---------------------------------------------------------------


def test_the_root_running_creates_nothing():
    step = settle([1, 2, 3, 4], DIAMOND, {1: RUNNING})
    assert (step.create, step.skip, step.status) == ([], [], states.DAG_RUNNING)


def test_the_root_succeeded_creates_both_branches():
    assert sorted(settle([1, 2, 3, 4], DIAMOND, {1: OK}).create) == [2, 3]


def test_d_waits_for_both_b_and_c():
    assert settle([1, 2, 3, 4], DIAMOND, {1: OK, 2: OK, 3: RUNNING}).create == []
    assert settle([1, 2, 3, 4], DIAMOND, {1: OK, 2: OK, 3: OK}).create == [4]
    done = settle([1, 2, 3, 4], DIAMOND, {1: OK, 2: OK, 3: OK, 4: OK})
    assert (done.create, done.status) == ([], states.DAG_SUCCEEDED)


def test_a_failure_skips_below_it_transitively_and_the_dag_run_fails_once_all_ended():
    edges = [*DIAMOND, (4, 5)]
    running = settle([1, 2, 3, 4, 5], edges, {1: OK, 2: DEAD, 3: RUNNING})
    assert (sorted(running.skip), running.status) == ([4, 5], states.DAG_RUNNING)
    ended = settle(
        [1, 2, 3, 4, 5], edges, {1: OK, 2: DEAD, 3: OK, 4: UPSTREAM_FAILED, 5: UPSTREAM_FAILED}
    )
    assert (ended.skip, ended.create, ended.status) == ([], [], states.DAG_FAILED)


def test_a_replayed_upstream_revives_what_it_skipped_and_success_creates_it():
    skipped = {3: OK, 1: OK, 4: UPSTREAM_FAILED}
    retrying = settle([1, 2, 3, 4], DIAMOND, {**skipped, 2: NodeRun(states.RETRYING)})
    assert (retrying.revive, retrying.create, retrying.status) == ([4], [], states.DAG_RUNNING)
    succeeded = settle([1, 2, 3, 4], DIAMOND, {**skipped, 2: OK})
    assert (succeeded.revive, succeeded.create) == ([4], [4])


def test_a_node_with_two_failed_upstreams_stays_skipped_when_one_is_replayed():
    step = settle([1, 2, 3, 4], DIAMOND, {1: OK, 2: OK, 3: DEAD, 4: UPSTREAM_FAILED})
    assert (step.revive, step.create, step.skip) == ([], [], [])


def test_a_dependency_run_skipped_for_another_reason_counts_as_not_succeeded():
    overlap = NodeRun(states.SKIPPED, states.SKIP_OVERLAP)
    assert settle([1, 2], [(1, 2)], {1: overlap}).skip == [2]


@st.composite
def dags(draw):
    """A random DAG over nodes 0..n-1 whose every node is reachable from 0 (a DAG run's
    graph: its root and everything downstream)."""
    n = draw(st.integers(2, 12))
    edges = set()
    for node in range(1, n):
        parents = draw(st.sets(st.integers(0, node - 1), min_size=1, max_size=min(3, node)))
        edges |= {(p, node) for p in parents}
    return list(range(n)), sorted(edges)


@settings(max_examples=300, deadline=None)
@given(dags(), st.randoms(use_true_random=False), st.floats(0, 1))
def test_any_order_of_ends_and_settles_converges_on_a_sound_ledger(graph, rnd, fail_rate):
    """Runs end in a random order (some dead, some replayed later), settles happen at random
    moments (some skipped, as when a worker dies before settling); at the end one settle
    from the final state must leave: every node with exactly one run, a node run only if all
    its upstreams succeeded, a node skipped only if an upstream did not succeed."""
    nodes, edges = graph
    ups = {n: [u for u, d in edges if d == n] for n in nodes}
    runs: dict[int, NodeRun] = {0: NodeRun(states.QUEUED)}
    creations = dict.fromkeys(nodes, 0)
    creations[0] = 1

    def apply(step) -> None:
        for node in step.revive:
            del runs[node]
        for node in step.create:
            assert node not in runs
            runs[node] = NodeRun(states.QUEUED)
            creations[node] += 1
        for node in step.skip:
            runs.setdefault(node, UPSTREAM_FAILED)

    replays = 0
    for _ in range(200):
        pending = [n for n, r in runs.items() if r.status == states.QUEUED]
        dead = [n for n, r in runs.items() if r.status == states.DEAD]
        if not pending and not (dead and replays < 3):
            break
        if dead and replays < 3 and (not pending or rnd.random() < 0.2):
            node = rnd.choice(dead)  # a replay: it runs again
            runs[node] = NodeRun(states.QUEUED)
            replays += 1
        else:
            node = rnd.choice(pending)
            runs[node] = DEAD if rnd.random() < fail_rate else OK
        if rnd.random() < 0.7:  # else: the worker died before its settle
            apply(settle(nodes, edges, runs))
    final = settle(nodes, edges, runs)
    apply(final)
    while any(r.status == states.QUEUED for r in runs.values()):  # finish what is left
        for node in [n for n, r in runs.items() if r.status == states.QUEUED]:
            runs[node] = OK
        apply(settle(nodes, edges, runs))
    final = settle(nodes, edges, runs)
    assert (final.create, final.skip, final.revive) == ([], [], [])
    assert set(runs) == set(nodes)
    for node, run in runs.items():
        if node and not run.derived:
            assert all(runs[u].status == states.SUCCEEDED for u in ups[node]), node
        if run.derived:
            assert any(runs[u].status != states.SUCCEEDED for u in ups[node]), node
    expected = (
        states.DAG_SUCCEEDED
        if all(r.status == states.SUCCEEDED for r in runs.values())
        else states.DAG_FAILED
    )
    assert final.status == expected
    # a node is created again only after its upstream_failed record was withdrawn
    assert all(count <= 1 + replays for count in creations.values())


def test_a_thousand_node_chain_and_fan_out():
    chain = [(i, i + 1) for i in range(999)]
    runs = {i: OK for i in range(500)}
    assert settle(range(1000), chain, runs).create == [500]
    fan = [(0, i) for i in range(1, 1000)]
    assert len(settle(range(1000), fan, {0: OK}).create) == 999
