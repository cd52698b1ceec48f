"""Keeping secret values out of the text we keep: attempt records, run errors and log lines.

While a worker holds a secret header value in clear (between opening it and recording the
attempt) it runs inside ``redacting(values)``. Every log record created meanwhile in that
thread or task, by any logger, has those values replaced by ``[redacted]`` in its message,
its traceback and its stack (a log-record factory, so it holds whatever handlers and
formatters the process configured: Django's, Celery's, a JSON one). Text stored from the
attempt goes through :func:`redact` explicitly. Pure: the standard library only.

What it cannot see: a value the receiver transformed before echoing it (re-encoded,
truncated); an excerpt cut in the middle of a value is redacted only up to the cut.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterable, Iterator

MASK = "[redacted]"

_ACTIVE: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "tickwork_redacted_values", default=()
)
_installed = False


def redact(text: str, values: Iterable[str]) -> str:
    """`text` with every occurrence of each value replaced (longest first, so that a value
    containing another is masked whole)."""
    for value in sorted({v for v in values if v}, key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


def active_values() -> tuple[str, ...]:
    return _ACTIVE.get()


@contextlib.contextmanager
def redacting(values: Iterable[str]) -> Iterator[None]:
    token = _ACTIVE.set(_ACTIVE.get() + tuple(v for v in values if v))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def _redact_record(record: logging.LogRecord, values: tuple[str, ...]) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: its arguments must not be printed either
        message = f"(unformattable log message from {record.name})"
    record.msg, record.args = redact(message, values), None
    if record.exc_info:
        text = logging.Formatter().formatException(record.exc_info)
        # exc_text is what formatters print; without exc_info none formats it again.
        record.exc_text, record.exc_info = redact(text, values), None
    elif record.exc_text:
        record.exc_text = redact(record.exc_text, values)
    if record.stack_info:
        record.stack_info = redact(record.stack_info, values)


def install_log_redaction() -> None:
    """Wrap the process's log-record factory (once)."""
    global _installed
    if _installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        values = _ACTIVE.get()
        if values:
            _redact_record(record, values)
        return record

    logging.setLogRecordFactory(factory)
    _installed = True
