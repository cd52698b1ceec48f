"""Every status filter comes from `runs.states`: no run status is spelled out in a string
anywhere else in the apps (SQL included), so a change to the state machine changes every
statement that depends on it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from runs import states

ROOT = Path(__file__).resolve().parents[2]
APPS = ("core", "tenants", "jobs", "runs", "alerts", "beat", "portal", "scheduler_site")
# Where the words are the definitions, or mean something else (an attempt's outcome).
ALLOWED = {"runs/states.py", "runs/models.py"}
WORD = re.compile(r"'(" + "|".join(states.ALL) + r")'")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes: prose may name a status."""
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            found.add(id(first.value))
    return found


def _strings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    prose = _docstrings(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
    ]


def _offences(root: Path) -> list[str]:
    out = []
    for app in APPS:
        for path in sorted((root / app).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if "migrations" in path.parts or rel in ALLOWED:
                continue
            for line, text in _strings(path):
                if text in states.ALL or WORD.search(text):
                    out.append(f"{rel}:{line}: {text.strip()[:60]!r}")
    return out


def test_no_status_word_outside_the_state_module():
    assert _offences(ROOT) == []


def test_the_check_sees_a_status_in_sql(tmp_path):
    (tmp_path / "beat").mkdir()
    (tmp_path / "beat" / "x.py").write_text("Q = \"UPDATE r SET status = 'queued'\"\n")
    assert _offences(tmp_path) == ["beat/x.py:1: \"UPDATE r SET status = 'queued'\""]
