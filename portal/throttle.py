"""Manual triggers from the portal count against the same per-tenant limit as the API's
(`SCHEDULER_MANUAL_TRIGGERS_PER_MINUTE`, one sliding window in Redis)."""

from __future__ import annotations

import logging

from django.conf import settings

from core.redis import REDIS_ERRORS, redis_key
from scheduler_site.api.throttling import take_slot
from tenants.models import Tenant

log = logging.getLogger(__name__)


def trigger_allowed(tenant: Tenant) -> bool:
    key = redis_key("api", "manual-triggers", tenant.pk)
    try:
        return take_slot(key, settings.SCHEDULER_MANUAL_TRIGGERS_PER_MINUTE) is None
    except REDIS_ERRORS:
        log.warning("manual trigger throttle unavailable: Redis error", exc_info=True)
        return True
