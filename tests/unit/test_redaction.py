"""Secret values never reach a log line or kept text while the worker holds them."""

from __future__ import annotations

import io
import logging

from core.redaction import MASK, install_log_redaction, redact, redacting

SECRET = "Bearer s3cret-t0ken"


def test_redact_masks_every_occurrence_longest_value_first():
    text = f"sent {SECRET} and s3cret-t0ken"
    assert redact(text, ["s3cret-t0ken", SECRET]) == f"sent {MASK} and {MASK}"
    assert redact("nothing here", [SECRET, ""]) == "nothing here"


def _logger() -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("tests.redaction")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, stream


def test_log_records_made_while_redacting_lose_the_values_in_message_args_and_traceback():
    install_log_redaction()
    logger, stream = _logger()
    with redacting([SECRET]):
        logger.info("header value %s", SECRET)
        logger.warning(f"inline {SECRET}")
        try:
            raise ValueError(f"Illegal header value {SECRET!r}")
        except ValueError:
            logger.exception("call failed")
    logger.info("after: %s", SECRET)  # outside the block nothing is touched
    text = stream.getvalue()
    assert text.count(SECRET) == 1 and text.rstrip().endswith(f"after: {SECRET}")
    assert "ValueError: Illegal header value '[redacted]'" in text
    assert text.count(MASK) == 3


def test_a_bad_format_string_prints_neither_its_arguments_nor_fails():
    install_log_redaction()
    logger, stream = _logger()
    with redacting([SECRET]):
        logger.info("two %s %s", SECRET)
    assert SECRET not in stream.getvalue()
    assert "unformattable log message" in stream.getvalue()


def test_redacting_blocks_nest_and_restore():
    install_log_redaction()
    logger, stream = _logger()
    with redacting(["one"]):
        with redacting(["two"]):
            logger.info("one two")
        logger.info("one two")
    assert stream.getvalue().splitlines() == [f"INFO {MASK} {MASK}", f"INFO {MASK} two"]
