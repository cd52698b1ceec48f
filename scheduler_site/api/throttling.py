"""Per-tenant rate limits kept in Redis, so that every web process shares one count (the
Django cache is per process here, and its keys are schema-prefixed)."""

from __future__ import annotations

import logging
import math
import time
import uuid
from typing import Any

from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from core.redis import REDIS_ERRORS, KeyedScript, get_redis, redis_key

from .authentication import tenant_of

logger = logging.getLogger(__name__)

# A sliding log: drop entries older than the window, admit if fewer than the limit remain.
# One script, so that concurrent requests cannot both take the last slot.
# Returns -1 when admitted, else the milliseconds until the oldest entry leaves the window.
SLIDING_WINDOW = """
local now, window, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[4])
  redis.call('PEXPIRE', KEYS[1], window)
  return -1
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return math.max(1, tonumber(oldest[2]) + window - now)
"""
_SLIDING_WINDOW = KeyedScript(SLIDING_WINDOW)
WINDOW_MS = 60_000


def take_slot(key: str, limit: int, window_ms: int = WINDOW_MS) -> float | None:
    """None if admitted, else the seconds to wait."""
    now_ms = int(time.time() * 1000)
    args = [now_ms, window_ms, limit, uuid.uuid4().hex]
    waited = int(_SLIDING_WINDOW(keys=[key], args=args, client=get_redis()))
    return None if waited < 0 else math.ceil(waited / 1000)


class ManualTriggerThrottle(BaseThrottle):
    """SCHEDULER_MANUAL_TRIGGERS_PER_MINUTE manual triggers per tenant, any client."""

    def __init__(self) -> None:
        self._wait: float | None = None

    def allow_request(self, request: Request, view: Any) -> bool:
        key = redis_key("api", "manual-triggers", tenant_of(request).pk)
        try:
            self._wait = take_slot(key, settings.SCHEDULER_MANUAL_TRIGGERS_PER_MINUTE)
        except REDIS_ERRORS:
            # A rate limit protects the service; it is not worth refusing every trigger.
            logger.warning("manual trigger throttle unavailable: Redis error", exc_info=True)
            return True
        return self._wait is None

    def wait(self) -> float | None:
        return self._wait
