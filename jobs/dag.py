"""Dependency graph checks: pure functions over (upstream, downstream) edges.

Edges point the way work flows: `upstream -> downstream`, the downstream job runs once its
upstreams have succeeded. The topological work is the standard library's `graphlib`
(its cycle error names the cycle); the rest is the arithmetic of a graph's size.
"""

from __future__ import annotations

import graphlib
from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass

Edge = tuple[int, int]


def _predecessors(edges: Iterable[Edge]) -> dict[int, set[int]]:
    graph: dict[int, set[int]] = defaultdict(set)
    for upstream, downstream in edges:
        graph[downstream].add(upstream)
        graph.setdefault(upstream, set())
    return graph


def find_cycle(edges: Iterable[Edge]) -> list[int] | None:
    """A cycle as a list of nodes [a, b, ..., a] in the direction of the edges, or None
    when the graph is acyclic."""
    try:
        graphlib.TopologicalSorter(_predecessors(edges)).prepare()
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def replace_upstreams(
    edges: Iterable[Edge], downstream: int, upstreams: Iterable[int]
) -> list[Edge]:
    """The edge set after `downstream`'s upstream list is replaced by `upstreams`."""
    kept = [(u, d) for u, d in edges if d != downstream]
    return kept + [(u, downstream) for u in upstreams]


def component(edges: Iterable[Edge], node: int) -> tuple[set[int], list[Edge]]:
    """The nodes and edges connected to `node` in either direction (its whole graph)."""
    edges = list(edges)
    neighbours: dict[int, set[int]] = defaultdict(set)
    for upstream, downstream in edges:
        neighbours[upstream].add(downstream)
        neighbours[downstream].add(upstream)
    seen, todo = {node}, deque([node])
    while todo:
        for other in neighbours[todo.popleft()]:
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen, [(u, d) for u, d in edges if u in seen]


def descendants(edges: Iterable[Edge], root: int) -> tuple[set[int], list[Edge]]:
    """`root` and every node downstream of it, with the edges among them: what a DAG run
    started by a run of `root` covers."""
    edges = list(edges)
    children: dict[int, list[int]] = defaultdict(list)
    for upstream, downstream in edges:
        children[upstream].append(downstream)
    seen, todo = {root}, deque([root])
    while todo:
        for child in children[todo.popleft()]:
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen, [(u, d) for u, d in edges if u in seen and d in seen]


def depth(edges: Iterable[Edge]) -> int:
    """The number of edges on the longest path (0 for a lone node). Acyclic input."""
    longest: dict[int, int] = {}
    graph = _predecessors(edges)
    for node in graphlib.TopologicalSorter(graph).static_order():
        longest[node] = max((longest[u] + 1 for u in graph[node]), default=0)
    return max(longest.values(), default=0)


@dataclass(frozen=True)
class GraphLimits:
    max_nodes: int
    max_edges: int
    max_depth: int


def limit_error(edges: Iterable[Edge], node: int, limits: GraphLimits) -> str | None:
    """Why the graph `node` belongs to is too large for the operator's limits, or None.
    Acyclic input (check `find_cycle` first)."""
    nodes, own = component(edges, node)
    if len(nodes) > limits.max_nodes:
        return f"the graph would have {len(nodes)} jobs; the limit is {limits.max_nodes}"
    if len(own) > limits.max_edges:
        return f"the graph would have {len(own)} dependencies; the limit is {limits.max_edges}"
    longest = depth(own)
    if longest > limits.max_depth:
        return (
            f"the graph's longest chain would be {longest} dependencies deep; "
            f"the limit is {limits.max_depth}"
        )
    return None
