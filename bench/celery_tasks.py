"""A plain Celery task for comparison benchmarks (loaded into a worker with `-I`)."""

from celery import shared_task

from core.redis import get_redis

PLAIN_COUNTER = "bench:plain"


@shared_task(name="bench.plain_noop", acks_late=True, ignore_result=True)
def plain_noop() -> None:
    get_redis().incr(PLAIN_COUNTER)
