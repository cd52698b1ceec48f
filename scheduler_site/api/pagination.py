"""Keyset ("cursor") pagination: `{"next": <url or null>, "results": [...]}`.

The cursor holds the sort key of the last item of the page, so the next page is an index
range scan from there: no COUNT(*), no OFFSET, and the cost of page 10 000 equals that of
page 1 (the run history grows to millions of rows). Ties on the first sort field (many runs
share a scheduled instant) are broken by the primary key, so no row is skipped or repeated.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
from datetime import datetime
from typing import Any
from uuid import UUID

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Q, QuerySet
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import BasePagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from .fields import query

MAX_PAGE_SIZE = 200


def default_page_size() -> int:
    return min(settings.SCHEDULER_API_PAGE_SIZE, MAX_PAGE_SIZE)


def _encode(values: list[Any]) -> str:
    plain = [v.isoformat() if isinstance(v, datetime) else v for v in values]
    plain = [str(v) if isinstance(v, UUID) else v for v in plain]
    raw = json.dumps(plain, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str, fields: list[Any]) -> list[Any]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        values = json.loads(raw)
        if not isinstance(values, list) or len(values) != len(fields):
            raise ValueError("wrong shape")
        decoded = [field.to_python(value) for field, value in zip(fields, values, strict=True)]
        if any(isinstance(v, int) and not -(2**63) <= v < 2**63 for v in decoded):
            raise ValueError("out of range")
        return decoded
    except (ValueError, TypeError, binascii.Error, DjangoValidationError, OverflowError):
        raise ValidationError({"cursor": ["is not a cursor this list returned"]}) from None


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
    """Subclass with `ordering`: the sort fields, the last one unique (the primary key)."""

    ordering: tuple[str, ...] = ("id",)
    cursor_query_param = "cursor"

    def __init__(self) -> None:
        self.next_url: str | None = None

    def paginate_queryset(self, queryset: QuerySet, request: Request, view: Any = None) -> list:
        params = query(PageParamsSerializer, request)
        size = params.get("page_size", default_page_size())
        cursor = params.get("cursor")
        model_fields = [queryset.model._meta.get_field(n.lstrip("-")) for n in self.ordering]
        if cursor:
            values = _decode(cursor, model_fields)
            queryset = queryset.filter(_range_start(self.ordering, values))
            queryset = queryset.filter(_after(self.ordering, values))
        rows = self.fetch(queryset, size + 1)
        page, more = rows[:size], len(rows) > size
        if more:
            last = [getattr(page[-1], f.attname) for f in model_fields]
            url = request.build_absolute_uri()
            self.next_url = replace_query_param(url, self.cursor_query_param, _encode(last))
        return page

    def fetch(self, queryset: QuerySet, limit: int) -> list:
        return list(queryset.order_by(*self.ordering)[:limit])

    def get_paginated_response(self, data: list) -> Response:
        return Response({"next": self.next_url, "results": data})

    @classmethod
    def parameters(cls) -> list[type[serializers.Serializer]]:
        """The query parameters, for extend_schema."""
        return [PageParamsSerializer]


class PageParamsSerializer(serializers.Serializer):
    cursor = serializers.CharField(required=False, help_text="Opaque: copy it from `next`.")
    page_size = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_PAGE_SIZE,
        help_text="Items per page (default SCHEDULER_API_PAGE_SIZE, 50).",
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
