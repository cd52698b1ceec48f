"""Structured logs: one event per line, readable text by default, JSON with LOG_FORMAT=json.

An *event* is a log record with a stable name (`leader.lease_taken`, `run.dead`, ...) and
its fields: the ids that say what it is about (`tenant`, `job_id`, `run_id`, `attempt`)
and a few facts (`epoch`, `reason`, `count`). The message stays a sentence for people; the
name and fields are for machines and tests, which assert on `record.event` (caplog) or on
the `event` key of a JSON line. Records without an event (Django's, Celery's) are printed
the same way, without one.

    log_event(log, "run.dead", "run %s is dead after %s attempts", run_id, attempt,
              level=logging.ERROR, tenant=slug, job_id=job_id, run_id=run_id, attempt=attempt)

Fields are redacted like the message while a worker holds secret values (`core.redaction`):
they are set on the record after the log-record factory ran, so this module does it.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from .redaction import active_values, redact

# The ids first, in this order, then any other field in the order given.
ID_FIELDS = ("tenant", "job_id", "run_id", "attempt")
# LogRecord attributes that are not the caller's extras.
_RESERVED = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


def log_event(
    logger: logging.Logger,
    event: str,
    message: str = "",
    *args: object,
    level: int = logging.INFO,
    exc_info: Any = None,
    **fields: Any,
) -> None:
    """Log `message % args` as the event `event` with `fields` (None values are left out)."""
    if not logger.isEnabledFor(level):
        return
    kept = {k: _redacted(v) for k, v in fields.items() if v is not None}
    logger.log(
        level,
        message or event,
        *args,
        exc_info=exc_info,
        extra={"event": event, "fields": kept},
        stacklevel=2,
    )


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        values = active_values()
        return redact(value, values) if values else value
    if isinstance(value, bool | int | float):
        return value
    return _redacted(str(value))  # UUIDs, datetimes, exceptions: as text


def event_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The record's fields, ids first."""
    fields = dict(getattr(record, "fields", None) or {})
    ordered = {k: fields.pop(k) for k in ID_FIELDS if k in fields}
    ordered.update(fields)
    return ordered


class TextFormatter(logging.Formatter):
    """`time LEVEL logger message [event key=value ...]`: the message for people first."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        event = getattr(record, "event", None)
        if not event:
            return line
        head, sep, tail = line.partition("\n")  # a traceback goes after the fields
        pairs = " ".join(f"{k}={_text(v)}" for k, v in event_fields(record).items())
        return f"{head} [{event}{' ' + pairs if pairs else ''}]{sep}{tail}"


def _text(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if (not text or any(c in text for c in ' "=[]\n')) else text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, event, message, the
    event's fields, the caller's other extras, and the traceback as `exc_info`."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
        }
        if getattr(record, "event", None):
            out["event"] = record.event
        out["message"] = record.getMessage()
        for key, value in event_fields(record).items():
            out.setdefault(key, value)
        for key, value in record.__dict__.items():  # extras given without log_event
            if key not in _RESERVED and key not in ("event", "fields") and key not in out:
                out[key] = value if isinstance(value, str | int | float | bool) else str(value)
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc_info"] = record.exc_text
        if record.stack_info:
            out["stack_info"] = record.stack_info
        return json.dumps(out, default=str, ensure_ascii=False)


FORMATS = {"text": TextFormatter, "json": JsonFormatter}
