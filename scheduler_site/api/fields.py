"""Serializer pieces shared by the endpoints: strict bodies and ISO 8601 instants."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.utils.dateparse import parse_datetime
from rest_framework import serializers
from rest_framework.request import Request

# Instants outside this range are refused: schedule math near datetime's limits overflows,
# and no one backfills the 1960s.
BIGINT_MAX = 2**63 - 1  # PostgreSQL's bigint: ids and id filters beyond it match nothing
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
# `+02:00` in an unencoded query string arrives as ` 02:00`: put the plus back.
_LOST_PLUS = re.compile(r"^(.*T[0-9:.]+) ([0-9]{2}(:?[0-9]{2})?)$")


class InstantField(serializers.DateTimeField):
    """An ISO 8601 instant with an offset or `Z` (a time without one names no instant)."""

    default_error_messages = {
        "instant": "must be an ISO 8601 instant with an offset, e.g. 2026-01-31T09:00:00Z",
        "range": "must be between 1970-01-01 and 9000-01-01",
    }

    def to_internal_value(self, value: Any) -> datetime:
        if not isinstance(value, str):
            self.fail("instant")
        text = _LOST_PLUS.sub(r"\1+\2", value.strip())
        try:
            parsed = parse_datetime(text)
        except ValueError:
            parsed = None
        if parsed is None or parsed.tzinfo is None:
            self.fail("instant")
        try:
            instant = parsed.astimezone(UTC)
        except (OverflowError, ValueError):
            self.fail("range")
        if not EARLIEST <= instant < LATEST:
            self.fail("range")
        return instant


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer, nothing else: DRF's own also takes "5", 5.0 and "5.0", which the
    schema (type: integer) does not allow. (Booleans are no integers either.)"""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictUUIDField(serializers.UUIDField):
    """A UUID string, nothing else: DRF's own reads an integer (and `false`, an integer in
    Python) as the UUID with that number, `false` as 00000000-0000-0000-0000-000000000000."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictSerializer(serializers.Serializer):
    """A request body serializer that names unknown keys instead of ignoring them (a typo
    such as `paylod` must not silently do nothing)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({key: ["unknown field"] for key in unknown})
        return super().to_internal_value(data)


def validated(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def query(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
    """Validated query parameters (400 naming the parameter when one is invalid). A plain
    dict, not the QueryDict: DRF reads `?q=` in a QueryDict as "absent", while the schema
    (and so this API) treats an empty value as the invalid value it is."""
    return validated(serializer_class, request.query_params.dict())
