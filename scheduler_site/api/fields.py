"""Serializer pieces shared by the endpoints: strict bodies and ISO 8601 instants."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request

# Instants outside this range are refused: schedule math near datetime's limits overflows,
# and no one backfills the 1960s.
BIGINT_MAX = 2**63 - 1  # PostgreSQL's bigint: ids and id filters beyond it match nothing
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
# `+02:00` in an unencoded query string arrives as ` 02:00`: put the plus back.
_LOST_PLUS = re.compile(r"^(.*T[0-9:.]+) ([0-9]{2}(:?[0-9]{2})?)$")


# The years InstantField takes, as the schema states them (with `format: date-time`).
INSTANT_PATTERN = r"^(19[7-9][0-9]|[2-8][0-9]{3})-"


@extend_schema_field({"type": "string", "format": "date-time", "pattern": INSTANT_PATTERN})
class InstantField(serializers.DateTimeField):
    """An ISO 8601 instant with an offset or `Z` (a time without one names no instant)."""

    default_error_messages = {
        "instant": "must be an ISO 8601 instant with an offset, e.g. 2026-01-31T09:00:00Z",
        "range": "must be in the years 1970 to 8999",
    }

    def to_internal_value(self, value: Any) -> datetime:
        if not isinstance(value, str):
            self.fail("instant")
        text = _LOST_PLUS.sub(r"\1+\2", value)
        try:
            parsed = parse_datetime(text)
        except ValueError:
            parsed = None
        if parsed is None or parsed.tzinfo is None:
            self.fail("instant")
        # The year as written, which the schema's pattern states (not the UTC year, which
        # an offset can move into 1969 or 9000: still far from datetime's limits).
        if not EARLIEST.year <= parsed.year < LATEST.year:
            self.fail("range")
        return parsed.astimezone(UTC)


class QueryIntegerField(serializers.IntegerField):
    """An integer query parameter: its text as Python's int() reads it (`7`, `+7`, `007`),
    nothing else: DRF's own also takes `7.0`, which is no integer."""

    def to_internal_value(self, data: Any) -> int:
        if not isinstance(data, str) or not re.fullmatch(r"[+-]?[0-9]+", data):
            self.fail("invalid")
        return super().to_internal_value(data)


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
    """A request body serializer as strict as its schema: unknown keys are named instead of
    ignored (a typo such as `paylod` must not silently do nothing), and every value must
    have its JSON type (DRF reads 0 as the text "0", "5" and 5.0 as the integer 5, `false`
    as a UUID)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            errors = {key: ["unknown field"] for key in sorted(set(data) - set(self.fields))}
            for name, field in self.fields.items():
                if name in data and not field.read_only:
                    errors.update(json_type_errors(field, data[name], name))
            if errors:
                raise serializers.ValidationError(errors)
        return super().to_internal_value(data)


_WORDS = {
    str: "a string",
    bool: "true or false",
    int: "an integer",
    float: "a number",
    list: "an array",
    dict: "a JSON object",
}


def _json_type(field: serializers.Field) -> type | tuple[type, ...] | None:
    """The JSON type a field's schema declares (None: any, or its own checks decide)."""
    declared = getattr(field, "json_type", None)
    if declared is not None:
        return declared
    if isinstance(field, serializers.BooleanField):
        return bool
    if isinstance(field, serializers.IntegerField):
        return int
    if isinstance(field, serializers.FloatField | serializers.DecimalField):
        return (int, float)
    if isinstance(field, serializers.ListField | serializers.ListSerializer):
        return list
    if isinstance(field, serializers.DictField | serializers.Serializer):
        return dict
    if isinstance(field, serializers.JSONField):
        return None
    if isinstance(
        field,
        serializers.CharField
        | serializers.ChoiceField
        | serializers.DateField
        | serializers.DateTimeField
        | serializers.UUIDField,
    ):
        return str
    return None


def json_type_errors(field: serializers.Field, value: Any, path: str) -> dict[str, list[str]]:
    """{path: [reason]} when `value` is not of the JSON type `field` declares (list items
    too, as `path.<n>`); nested serializers check their own fields."""
    if value is None:
        return {} if field.allow_null else {path: ["may not be null"]}
    expected = _json_type(field)
    if expected is None:
        return {}
    wrong = isinstance(value, bool) and expected is not bool and bool not in _as_tuple(expected)
    if wrong or not isinstance(value, expected):
        words = " or ".join(dict.fromkeys(_WORDS[t] for t in _as_tuple(expected)))
        return {path: [f"must be {words}"]}
    limit = getattr(field, "max_length", None)
    if isinstance(field, serializers.CharField) and limit is not None and len(value) > limit:
        # DRF strips white space before it counts, so "\r" and 500 characters passed a
        # limit of 500 although the schema's maxLength refuses it.
        return {path: [f"Ensure this field has no more than {limit} characters."]}
    child = getattr(field, "child", None)
    if isinstance(value, list) and isinstance(child, serializers.Field):
        errors: dict[str, list[str]] = {}
        for number, item in enumerate(value):
            errors.update(json_type_errors(child, item, f"{path}.{number}"))
        return errors
    return {}


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def validated(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def query(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
    """Validated query parameters (400 naming the parameter when one is invalid). A plain
    dict, not the QueryDict: DRF reads `?q=` in a QueryDict as "absent", while the schema
    (and so this API) treats an empty value as the invalid value it is. A parameter given
    twice is refused: its schema is one value, not a list."""
    repeated = {
        name: ["given more than once"]
        for name, values in request.query_params.lists()
        if len(values) > 1 and name in serializer_class._declared_fields
    }
    if repeated:
        raise serializers.ValidationError(repeated)
    return validated(serializer_class, request.query_params.dict())
