"""The schedule package stays pure: no Django/Redis/database imports, croniter kept behind it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "jobs" / "schedules"
FORBIDDEN = ("django", "redis", "psycopg", "celery", "rest_framework", "tenants", "runs")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_package_imports_only_the_standard_library_and_its_two_libraries():
    for path in PACKAGE.glob("*.py"):
        assert not _imports(path) & set(FORBIDDEN), path.name
        assert "jobs" not in _imports(path), f"{path.name}: use relative imports"


def test_importing_the_package_loads_no_django():
    code = "import sys, jobs.schedules; print(','.join(sorted(sys.modules)))"
    loaded = (
        subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
        )
        .stdout.strip()
        .split(",")
    )
    assert not [m for m in loaded if m.split(".")[0] in FORBIDDEN]


def test_croniter_is_imported_only_by_the_reference_bridge():
    skip = {".venv", ".git", ".data", "node_modules", "static"}
    for path in ROOT.rglob("*.py"):
        if skip & set(path.relative_to(ROOT).parts):
            continue
        if "croniter" in _imports(path):
            assert path == PACKAGE / "reference.py", path
