"""Geometry for the server-rendered SVGs: a duration chart with its p95, and a DAG laid out
in layers. Pure: numbers in, shapes out; the templates draw them."""

from __future__ import annotations

from dataclasses import dataclass, field
from math import ceil

from runs import states


def percentile(values: list[float], p: float) -> float | None:
    """The nearest-rank percentile (p in 0-100)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    seconds: float
    status: str
    label: str
    run_id: str


@dataclass(frozen=True)
class DurationChart:
    width: int
    height: int
    bars: list[Bar]
    p50: float | None
    p95: float | None
    p95_y: float | None
    max_seconds: float
    ticks: list[tuple[float, str]]

    @property
    def p95_label_y(self) -> float | None:
        return None if self.p95_y is None else max(10.0, self.p95_y - 3)

    @property
    def label_x(self) -> int:
        return self.width - 4


def human_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def duration_chart(runs: list, width: int = 640, height: int = 160) -> DurationChart:
    """Bars of each run's duration (started -> finished), oldest left, and the p95 line."""
    left, bottom, top = 48, 18, 8
    durations = [max(0.0, (r.finished_at - r.started_at).total_seconds()) for r in runs]
    peak = max(durations, default=0.0) or 1.0
    plot_w, plot_h = width - left - 4, height - bottom - top
    step = plot_w / max(len(runs), 1)
    bars = []
    for n, (run, seconds) in enumerate(zip(runs, durations, strict=True)):
        h = max(1.0, seconds / peak * plot_h)
        bars.append(
            Bar(
                x=round(left + n * step + step * 0.1, 1),
                y=round(top + plot_h - h, 1),
                width=round(min(max(step * 0.8, 1.0), 24.0), 1),
                height=round(h, 1),
                seconds=seconds,
                status=run.status,
                label=f"{run.scheduled_for:%Y-%m-%d %H:%M:%S} UTC: {human_seconds(seconds)}, "
                f"{run.status}",
                run_id=str(run.id),
            )
        )
    p95 = percentile(durations, 95)
    p95_y = round(top + plot_h - p95 / peak * plot_h, 1) if p95 is not None else None
    ticks = [(round(top + plot_h - f * plot_h, 1), human_seconds(peak * f)) for f in (0, 0.5, 1)]
    return DurationChart(width, height, bars, percentile(durations, 50), p95, p95_y, peak, ticks)


@dataclass
class Node:
    id: int
    name: str
    status: str  # the colour class: a run status, "waiting" or "none"
    status_label: str  # the status in words, drawn under the name (never colour alone)
    href: str = ""
    title: str = ""  # the tooltip: name, status and when
    x: float = 0
    y: float = 0
    focus: bool = False
    deleted: bool = False


@dataclass(frozen=True)
class Edge:
    upstream: int
    downstream: int
    path: str


@dataclass
class DagLayout:
    width: int
    height: int
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)

    @property
    def legend(self) -> list[tuple[str, str]]:
        """(colour class, words) of the classes the graph uses, in LEGEND order."""
        used = {node.status for node in self.nodes}
        return [(status, LEGEND_WORDS.get(status, status)) for status in LEGEND if status in used]


# Every colour class a node can have, in the legend's order (static/css/app.css colours them):
# the run statuses, and a job not reached yet, deleted, or in no DAG run.
LEGEND = (
    states.SUCCEEDED,
    states.RUNNING,
    states.QUEUED,
    states.SCHEDULED,
    states.RETRYING,
    "waiting",
    states.DEAD,
    states.SKIPPED,
    states.CANCELLED,
    "deleted",
    "none",
)
LEGEND_WORDS = {
    "waiting": "waiting for upstreams",
    states.DEAD: f"{states.DEAD} (failed)",
    "none": "in no DAG run yet",
}


NODE_W, NODE_H, GAP_X, GAP_Y = 170, 44, 60, 22


def dag_layout(nodes: dict[int, Node], edges: list[tuple[int, int]]) -> DagLayout:
    """Layers by longest path from a root (upstream left, downstream right), nodes in a
    layer in name order; edges as curves from a node's right side to the next's left."""
    ups: dict[int, list[int]] = {n: [] for n in nodes}
    for u, d in edges:
        if u in nodes and d in nodes:
            ups[d].append(u)
    depth: dict[int, int] = {}

    def depth_of(n: int, seen: frozenset = frozenset()) -> int:
        if n not in depth:
            parents = [u for u in ups[n] if u not in seen]
            depth[n] = 1 + max((depth_of(u, seen | {n}) for u in parents), default=-1)
        return depth[n]

    layers: dict[int, list[Node]] = {}
    for n in nodes:
        layers.setdefault(depth_of(n), []).append(nodes[n])
    tallest = max((len(v) for v in layers.values()), default=1)
    height = tallest * (NODE_H + GAP_Y) + GAP_Y
    for layer, members in layers.items():
        members.sort(key=lambda node: (node.name, node.id))
        offset = (height - len(members) * (NODE_H + GAP_Y) + GAP_Y) / 2
        for k, node in enumerate(members):
            node.x = GAP_Y + layer * (NODE_W + GAP_X)
            node.y = offset + k * (NODE_H + GAP_Y)
    width = int(GAP_Y * 2 + (max(layers, default=0) + 1) * (NODE_W + GAP_X) - GAP_X)
    laid = DagLayout(width=max(width, 200), height=int(height))
    laid.nodes = sorted(nodes.values(), key=lambda node: (node.x, node.y))
    for u, d in edges:
        if u in nodes and d in nodes:
            a, b = nodes[u], nodes[d]
            x1, y1 = a.x + NODE_W, a.y + NODE_H / 2
            x2, y2 = b.x - 6, b.y + NODE_H / 2
            mid = (x1 + x2) / 2
            laid.edges.append(
                Edge(
                    u,
                    d,
                    f"M{x1:.0f},{y1:.0f} C{mid:.0f},{y1:.0f} {mid:.0f},{y2:.0f} {x2:.0f},{y2:.0f}",
                )
            )
    return laid
