"""Log events: the readable text line, the JSON line, and secrets kept out of both."""

from __future__ import annotations

import json
import logging

import pytest

from core.logs import JsonFormatter, TextFormatter, log_event
from core.redaction import install_log_redaction, redacting


@pytest.fixture
def records():
    captured: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            captured.append(record)

    logger = logging.getLogger("test.events")
    logger.setLevel(logging.DEBUG)
    handler = Keep()
    logger.addHandler(handler)
    yield logger, captured
    logger.removeHandler(handler)


def test_an_event_carries_its_name_and_ids(records):
    logger, captured = records
    log_event(logger, "run.dead", "run %s is dead", "r-1", level=logging.ERROR, tenant="acme",
              job_id=7, run_id="r-1", attempt=3, error=None)  # fmt: skip
    [record] = captured
    assert record.event == "run.dead" and record.levelno == logging.ERROR
    assert record.fields == {"tenant": "acme", "job_id": 7, "run_id": "r-1", "attempt": 3}
    assert record.getMessage() == "run r-1 is dead"


def test_the_text_line_is_the_sentence_then_the_event(records):
    logger, captured = records
    log_event(logger, "leader.step_down", "stepping down (epoch %s): %s", 4, "lease lost",
              epoch=4, reason="LeaseLost: renewal failed", attempt=2, tenant="acme")  # fmt: skip
    line = TextFormatter().format(captured[0])
    assert line.endswith(
        "stepping down (epoch 4): lease lost [leader.step_down tenant=acme attempt=2 epoch=4 "
        'reason="LeaseLost: renewal failed"]'
    )


def test_the_json_line_is_one_object_with_the_fields(records):
    logger, captured = records
    try:
        raise ValueError("boom")
    except ValueError:
        log_event(logger, "run.target_error", "run %s: %s", "r-2", "ValueError",
                  level=logging.ERROR, exc_info=True, tenant="acme", run_id="r-2")  # fmt: skip
    line = JsonFormatter().format(captured[0])
    assert "\n" not in line
    out = json.loads(line)
    assert out["event"] == "run.target_error" and out["level"] == "ERROR"
    assert out["logger"] == "test.events" and out["message"] == "run r-2: ValueError"
    assert out["tenant"] == "acme" and out["run_id"] == "r-2"
    assert "ValueError: boom" in out["exc_info"]
    assert out["time"].endswith("+00:00")


def test_a_plain_record_has_no_event(records):
    logger, captured = records
    logger.info("hello %s", "world", extra={"queue": "runs.high.0"})
    out = json.loads(JsonFormatter().format(captured[0]))
    assert "event" not in out and out["message"] == "hello world" and out["queue"] == "runs.high.0"
    assert TextFormatter().format(captured[0]).endswith("INFO test.events hello world")


def test_fields_are_redacted_while_secrets_are_held(records):
    install_log_redaction()
    logger, captured = records
    with redacting(["Bearer hunter2"]):
        log_event(logger, "run.http_call_failed", "failed: %s", "Bearer hunter2 refused",
                  error="sent Bearer hunter2", run_id="r-3")  # fmt: skip
    text, data = TextFormatter().format(captured[0]), JsonFormatter().format(captured[0])
    assert "hunter2" not in text and "hunter2" not in data
    assert json.loads(data)["error"] == "sent [redacted]"


def test_nothing_is_built_below_the_level(records):
    logger, captured = records
    logger.setLevel(logging.WARNING)
    log_event(logger, "run.claimed", "claimed", level=logging.DEBUG, run_id="r-4")
    assert captured == []
