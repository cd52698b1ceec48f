"""The sample alerting rules and the Grafana dashboard only query series that exist, and
every alert is explained in docs/operations.md."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from core import metrics

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
NAME = re.compile(r"\btickwork_[a-z0-9_]+")


def exposed_series() -> set[str]:
    """Every series name /metrics can show: the event metrics of core/metrics.py (with
    their suffixes) and the facts' gauges (named in scheduler_site/metrics/facts.py)."""
    names: set[str] = set()
    events = [(s.name, s.kind) for s in metrics.LEADER_SPECS]
    for metric in vars(metrics).values():
        kind = None if isinstance(metric, type) else getattr(metric, "_type", None)
        if kind in ("counter", "histogram"):
            events.append((metric._name, kind))
    for name, kind in events:
        suffixes = ("_total",) if kind == "counter" else ("_bucket", "_count", "_sum")
        names |= {name + suffix for suffix in suffixes}
    for source in ("scheduler_site/metrics/facts.py", "core/metrics.py"):
        names |= set(NAME.findall((ROOT / source).read_text()))
    return names


def _alert_rules() -> list[dict]:
    groups = yaml.safe_load((DOCS / "monitoring" / "alerts.yml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_alert_rules_query_existing_series():
    exposed = exposed_series()
    for rule in _alert_rules():
        unknown = set(NAME.findall(rule["expr"])) - exposed
        assert not unknown, f"{rule['alert']}: {unknown}"
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}


def test_every_alert_is_explained_in_the_operations_guide():
    guide = (DOCS / "operations.md").read_text()
    alerts = guide.split("## Alerts", 1)[1]
    for rule in _alert_rules():
        assert f"| `{rule['alert']}` |" in alerts, rule["alert"]


def test_the_dashboard_queries_existing_series():
    dashboard = json.loads((DOCS / "monitoring" / "grafana-dashboard.json").read_text())
    exposed = exposed_series()
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(exprs) >= 15
    for expr in exprs:
        assert not set(NAME.findall(expr)) - exposed, expr


def test_the_guide_names_only_existing_metrics():
    guide = (DOCS / "operations.md").read_text()
    exposed = exposed_series()
    # `tickwork_x(` is a database function the guide names (the calendars trigger's)
    documented = set(re.findall(r"\btickwork_[a-z0-9_]+\b(?!\()", guide))
    bases = {re.sub(r"_(total|bucket|count|sum)$", "", n) for n in exposed}
    assert documented <= exposed | bases, documented - exposed - bases
