"""Raw Redis clients for the engine (never the Django cache: its keys are schema-prefixed)."""

from __future__ import annotations

from functools import lru_cache

import redis
from django.conf import settings


@lru_cache(maxsize=4)
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(
        url, socket_connect_timeout=2, socket_timeout=10, health_check_interval=30
    )


def get_redis() -> redis.Redis:
    return _client(settings.REDIS_URL)


def redis_key(*parts: object) -> str:
    """A key under the deployment's prefix, e.g. `tw:index`."""
    return ":".join([settings.SCHEDULER_REDIS_PREFIX, *map(str, parts)])
