"""What jobs does when a lower app says something happened (see tenants/signals.py)."""

from __future__ import annotations

import logging

from django.db import transaction
from django.dispatch import receiver

from tenants.signals import tenant_resumed

from .indexing import best_effort, index_tenant_jobs

log = logging.getLogger("jobs.receivers")


@receiver(tenant_resumed)
def put_resumed_tenants_jobs_back(sender, tenant, **kwargs) -> None:
    def write() -> None:
        log.info("tenant %s resumed: %s jobs indexed again", tenant.slug, index_tenant_jobs(tenant))

    transaction.on_commit(lambda: best_effort(write))
