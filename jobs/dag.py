"""Dependency graph checks: pure functions over (upstream, downstream) edges."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable


def find_cycle(edges: Iterable[tuple[int, int]]) -> list[int] | None:
    """A cycle as a list of nodes [a, b, ..., a], or None when the graph is acyclic."""
    graph: dict[int, list[int]] = defaultdict(list)
    for upstream, downstream in edges:
        graph[upstream].append(downstream)
    white, grey, black = 0, 1, 2
    color: dict[int, int] = defaultdict(int)
    for start in list(graph):
        if color[start] != white:
            continue
        stack = [(start, iter(graph[start]))]
        path = [start]
        color[start] = grey
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                color[node] = black
            elif color[child] == grey:
                return [*path[path.index(child) :], child]
            elif color[child] == white:
                color[child] = grey
                stack.append((child, iter(graph[child])))
                path.append(child)
    return None


def replace_upstreams(
    edges: Iterable[tuple[int, int]], downstream: int, upstreams: Iterable[int]
) -> list[tuple[int, int]]:
    """The edge set after `downstream`'s upstream list is replaced by `upstreams`."""
    kept = [(u, d) for u, d in edges if d != downstream]
    return kept + [(u, downstream) for u in upstreams]
