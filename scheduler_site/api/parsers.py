"""Request bodies: JSON only, capped in size (413), and refused (400) when they hold what
PostgreSQL cannot store (NUL characters, lone surrogates, non-finite numbers), so that such
input is a client error rather than a database error."""

from __future__ import annotations

import codecs
import json
import math
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from .exceptions import PayloadTooLarge


def max_body_bytes() -> int:
    return settings.SCHEDULER_API_MAX_BODY_BYTES


def content_length(meta: dict[str, Any]) -> int | None:
    try:
        return int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return None


def check_declared_size(meta: dict[str, Any]) -> None:
    """413 before anything is read when Content-Length already says too much."""
    length = content_length(meta)
    if length is not None and length > max_body_bytes():
        raise PayloadTooLarge(f"The request body is larger than {max_body_bytes()} bytes.")


def unstorable(data: Any) -> str | None:
    """Why `data` cannot be stored in PostgreSQL, or None. Iterative: input may nest deeply."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "strings must not contain NUL (\\u0000) characters"
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "strings must be valid Unicode (no lone surrogates)"
        elif isinstance(item, float) and not math.isfinite(item):
            return "numbers must be finite"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


class CappedJSONParser(JSONParser):
    """DRF's strict JSON parser with a size cap and a storability check."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        limit = max_body_bytes()
        # Content-Length may be absent (chunked): read one byte past the cap to find out.
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise PayloadTooLarge(f"The request body is larger than {limit} bytes.")
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = codecs.decode(raw, encoding)
            data = json.loads(text, parse_constant=_refuse_constant)
        except (ValueError, RecursionError) as exc:
            raise ParseError(f"JSON parse error: {str(exc)[:200]}") from None
        reason = unstorable(data)
        if reason is not None:
            raise ParseError(f"Invalid JSON content: {reason}.")
        return data


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")
