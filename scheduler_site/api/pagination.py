"""Keyset ("cursor") pagination: `{"next": <url or null>, "results": [...]}`.

The cursor holds the sort key of the last item of the page (in a shape the schema states as
a pattern), so the next page is an index range scan from there: no COUNT(*), no OFFSET,
and the cost of page 10 000 equals that of page 1 (the run history grows to millions of
rows). Ties on the first sort field (many runs
share a scheduled instant) are broken by the primary key, so no row is skipped or repeated.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import models
from django.db.models import Q, QuerySet
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import BasePagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from .fields import BIGINT_MAX, QueryIntegerField, query

MAX_PAGE_SIZE = 200


def default_page_size() -> int:
    return min(settings.SCHEDULER_API_PAGE_SIZE, MAX_PAGE_SIZE)


# A cursor is the page's last sort key, field by field, joined with "." (an id in digits, an
# instant in microseconds since 1970 UTC, a UUID in 32 hex digits): any text of that shape
# names a position in the list, so the schema's pattern says exactly which cursors the
# server takes. A number beyond what the column can hold names the position past its end.
_PARTS = {int: r"[0-9]{1,19}", datetime: r"[0-9]{1,17}", UUID: r"[0-9a-f]{32}"}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _kind(field: Any) -> type:
    if isinstance(field, models.DateTimeField):
        return datetime
    if isinstance(field, models.UUIDField):
        return UUID
    if isinstance(field, models.IntegerField | models.AutoField):
        return int
    raise TypeError(f"no cursor form for {field!r}")


def cursor_pattern(fields: list[Any]) -> str:
    return "^" + r"\.".join(_PARTS[_kind(f)] for f in fields) + "$"


def encode_cursor(values: list[Any]) -> str:
    parts = []
    for value in values:
        if isinstance(value, datetime):
            delta = value.astimezone(UTC) - _EPOCH
            parts.append(
                str((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds)
            )
        elif isinstance(value, UUID):
            parts.append(value.hex)
        else:
            parts.append(str(value))
    return ".".join(parts)


def decode_cursor(cursor: str, fields: list[Any]) -> list[Any]:
    """The sort key a cursor names; a ValidationError on `cursor` if it has another shape."""
    if not re.fullmatch(cursor_pattern(fields)[1:-1], cursor):
        raise ValidationError({"cursor": ["is not a cursor this list returned"]})
    values: list[Any] = []
    for field, text in zip(fields, cursor.split("."), strict=True):
        kind = _kind(field)
        if kind is datetime:
            values.append(_EPOCH + timedelta(microseconds=int(text)))
        elif kind is UUID:
            values.append(UUID(hex=text))
        else:
            values.append(min(int(text), BIGINT_MAX))
    return values


def _after(ordering: tuple[str, ...], values: list[Any]) -> Q:
    """Rows after `values` in `ordering` (lexicographic), e.g. for ("-at", "-id"):
    at < v0 OR (at = v0 AND id < v1)."""
    condition = Q(pk__in=[])
    equal = Q()
    for name, value in zip(ordering, values, strict=True):
        field = name.lstrip("-")
        op = "lt" if name.startswith("-") else "gt"
        condition |= equal & Q(**{f"{field}__{op}": value})
        equal &= Q(**{field: value})
    return condition


def _range_start(ordering: tuple[str, ...], values: list[Any]) -> Q:
    """The same bound on the first field alone, inclusive: an index range the planner uses."""
    name = ordering[0]
    op = "lte" if name.startswith("-") else "gte"
    return Q(**{f"{name.lstrip('-')}__{op}": values[0]})


class KeysetPagination(BasePagination):
    """Subclass with `model` and `ordering`: the sort fields, the last one unique (the
    primary key)."""

    model: Any
    ordering: tuple[str, ...] = ("id",)
    cursor_query_param = "cursor"

    def __init__(self) -> None:
        self.next_url: str | None = None

    def paginate_queryset(self, queryset: QuerySet, request: Request, view: Any = None) -> list:
        params = query(self.params_serializer(), request)
        size = params.get("page_size", default_page_size())
        cursor = params.get("cursor")
        model_fields = [queryset.model._meta.get_field(n.lstrip("-")) for n in self.ordering]
        if cursor:
            values = decode_cursor(cursor, model_fields)
            queryset = queryset.filter(_range_start(self.ordering, values))
            queryset = queryset.filter(_after(self.ordering, values))
        rows = self.fetch(queryset, size + 1)
        page, more = rows[:size], len(rows) > size
        if more:
            last = [getattr(page[-1], f.attname) for f in model_fields]
            url = request.build_absolute_uri()
            self.next_url = replace_query_param(url, self.cursor_query_param, encode_cursor(last))
        return page

    def fetch(self, queryset: QuerySet, limit: int) -> list:
        return list(queryset.order_by(*self.ordering)[:limit])

    def get_paginated_response(self, data: list) -> Response:
        return Response({"next": self.next_url, "results": data})

    @classmethod
    def parameters(cls) -> list[type[serializers.Serializer]]:
        """The query parameters, for extend_schema."""
        return [cls.params_serializer()]

    @classmethod
    def params_serializer(cls) -> type[serializers.Serializer]:
        return _params_serializer(cls.model, cls.ordering)


@functools.cache
def _params_serializer(model: Any, ordering: tuple[str, ...]) -> type[serializers.Serializer]:
    """`cursor` (with the pattern of this list's sort key) and `page_size`."""
    fields = [model._meta.get_field(name.lstrip("-")) for name in ordering]
    name = f"{model.__name__}PageParamsSerializer"
    return type(
        name,
        (serializers.Serializer,),
        {
            "cursor": serializers.RegexField(
                cursor_pattern(fields),
                required=False,
                error_messages={"invalid": "is not a cursor this list returned"},
                help_text="Copy it from `next`: the position after the previous page.",
            ),
            "page_size": QueryIntegerField(
                required=False,
                min_value=1,
                max_value=MAX_PAGE_SIZE,
                help_text="Items per page (default SCHEDULER_API_PAGE_SIZE, 50).",
            ),
        },
    )


@functools.cache
def page_of(item: type[serializers.Serializer]) -> type[serializers.Serializer]:
    """The schema of one page of `item`s: {"next": url | null, "results": [...]}."""
    name = item.__name__.removesuffix("Serializer")
    return type(
        f"{name}PageSerializer",
        (serializers.Serializer,),
        {
            "__doc__": f"One page of {name.lower()}s, in order.",
            "next": serializers.URLField(
                allow_null=True, help_text="The next page; null on the last one."
            ),
            "results": item(many=True),
        },
    )
