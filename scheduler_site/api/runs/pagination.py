"""Run lists: newest scheduled first, in keyset pages (see scheduler_site.api.pagination)."""

from __future__ import annotations

from django.db.models import QuerySet, prefetch_related_objects

from runs.models import Run
from runs.selectors import RUN_ORDER, newest_runs, with_job_names
from scheduler_site.api.pagination import KeysetPagination


class RunPagination(KeysetPagination):
    """`by_status`: the list has no job or status filter, so fetch it status by status
    (runs.selectors.newest_runs) to stay on an index."""

    model = Run
    ordering = RUN_ORDER

    def __init__(self, *, by_status: bool = False) -> None:
        super().__init__()
        self.by_status = by_status

    def fetch(self, queryset: QuerySet, limit: int) -> list:
        if self.by_status:
            return with_job_names(newest_runs(queryset, limit))
        rows = super().fetch(queryset, limit)
        prefetch_related_objects(rows, "attempts")
        return with_job_names(rows)
