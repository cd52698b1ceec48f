"""Dependencies point one way: core and tenants at the bottom, then jobs (definitions),
runs (execution), beat (the engine), and the top layer (scheduler_site, portal) that may
use everything. A module importing upward fails here, naming the import."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# app -> the apps it may import (besides itself and third-party packages)
ALLOWED = {
    "core": set(),
    "tenants": {"core"},
    "jobs": {"core", "tenants"},
    "runs": {"core", "tenants", "jobs"},
    # alerts reads run outcomes; runs knows nothing of alerts
    "alerts": {"core", "tenants", "jobs", "runs"},
    "beat": {"core", "tenants", "jobs", "runs", "alerts"},
}
APPS = {
    "core",
    "tenants",
    "jobs",
    "runs",
    "alerts",
    "beat",
    "scheduler_site",
    "portal",
    "bench",
    "devstack",
}


def _imported_apps(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return [(line, name) for line, name in found if name in APPS]


def _violations(root: Path = ROOT) -> list[str]:
    out = []
    for app, allowed in ALLOWED.items():
        for path in sorted((root / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue  # generated; they name the apps whose models they depend on
            for line, name in _imported_apps(path):
                if name != app and name not in allowed:
                    out.append(f"{path.relative_to(root)}:{line} imports {name}")
    return out


def test_no_app_imports_a_layer_above_it():
    assert _violations() == []


def test_the_check_sees_an_upward_import(tmp_path):
    """The test above could pass by reading nothing: prove it flags a planted import."""
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "planted.py").write_text("import os\n\nfrom runs.models import Run\n")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "fine.py").write_text("from jobs.models import Job\n")
    assert _violations(tmp_path) == ["jobs/planted.py:3 imports runs"]
