"""Where a leader step's wall time goes, without a profiler's overhead: SQL statements
(timed around each execute, by their first words), Redis round trips, and named Python
functions, each summed; the rest of the step is "other Python"."""

from __future__ import annotations

import re
import time
from collections import defaultdict
from contextlib import ExitStack, contextmanager

from django.db import connection

_WORDS = re.compile(r"\s+")


def _statement_kind(sql_text) -> str:
    text = _WORDS.sub(" ", str(sql_text)).strip()
    upper = text.upper()
    if "BEAT_SCHEDULERLEASE" in upper and "FOR SHARE" in upper:
        return "SQL fence (lease row FOR SHARE)"
    if "FOR UPDATE" in upper:
        return "SQL lock due jobs (FOR UPDATE SKIP LOCKED)"
    for prefix in ("INSERT", "UPDATE", "SAVEPOINT", "RELEASE", "COPY", "CREATE"):
        if upper.startswith(prefix):
            return f"SQL {prefix.lower()}"
    return "SQL " + " ".join(text.split(" ")[:3]).lower()


class Breakdown:
    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)

    def add(self, name: str, seconds: float) -> None:
        self.totals[name] += seconds
        self.counts[name] += 1

    def _sql(self, execute, sql_text, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql_text, params, many, context)
        finally:
            self.add(_statement_kind(sql_text), time.perf_counter() - started)

    def wrap(self, obj, name: str, label: str) -> None:
        method = getattr(obj, name)

        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.add(label, time.perf_counter() - started)

        setattr(obj, name, wrapper)

    @contextmanager
    def measuring(self, *, commits: bool = True):
        with ExitStack() as stack:
            stack.enter_context(connection.execute_wrapper(self._sql))
            if commits:  # Django's commits go around execute_wrapper: time them too
                raw = connection.connection
                if raw is not None:
                    original = raw.commit

                    def commit():
                        started = time.perf_counter()
                        try:
                            return original()
                        finally:
                            self.add("SQL commit", time.perf_counter() - started)

                    raw.commit = commit
                    stack.callback(setattr, raw, "commit", original)
            yield self

    def report(self, total: float, title: str) -> str:
        lines = [f"{title}: {total * 1000:.1f} ms"]
        accounted = 0.0
        for name, seconds in sorted(self.totals.items(), key=lambda kv: -kv[1]):
            accounted += seconds
            lines.append(
                f"  {name:<48} {seconds * 1000:8.1f} ms  {seconds / total:5.1%}"
                f"  ({self.counts[name]} calls)"
            )
        lines.append(f"  {'other Python':<48} {(total - accounted) * 1000:8.1f} ms")
        return "\n".join(lines)
