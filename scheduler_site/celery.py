"""The Celery app: workers consume the run queues `runs.<priority>.<shard>`.

The Redis transport polls the run queues high before normal before low, and the shards of
one priority in turn (`scheduler_site/queue_order.py`), so a worker started without `-Q`
takes every run queue, always drains higher priorities first, and lets no shard of a
priority wait behind another that stays full. On RabbitMQ (`CELERY_BROKER_URL=amqp://`)
the run queues are one priority queue per shard, `runs.<shard>` (`core/broker.py`).
"""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import task_postrun, task_prerun, worker_ready
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_site.settings")

PRIORITIES = ("high", "normal", "low")


def run_queue_names(shard_count: int) -> list[str]:
    return [f"runs.{priority}.{shard}" for priority in PRIORITIES for shard in range(shard_count)]


app = Celery("scheduler_site")
app.config_from_object("django.conf:settings", namespace="CELERY")


def _configure_queues() -> None:
    from django.conf import settings

    from core.broker import amqp_queue_arguments, amqp_queue_names, is_amqp

    if is_amqp():
        # RabbitMQ (ADR 0019): one durable priority queue per shard, declared with the
        # arguments the leader declares them with; priority is the message's. Quorum
        # queues (SCHEDULER_AMQP_QUEUE_TYPE, ADR 0026) make Celery drop the global QoS they
        # do not support. A URL list (a cluster's nodes) is kombu's failover syntax: the
        # worker moves to the next node when its connection fails.
        names = amqp_queue_names(settings.SCHEDULER_SHARD_COUNT)
        arguments = amqp_queue_arguments()
        app.conf.task_queues = [
            Queue(name, routing_key=name, durable=True, queue_arguments=arguments) for name in names
        ]
        app.conf.task_default_queue = names[0]
        if settings.SCHEDULER_AMQP_QUEUE_TYPE == "quorum":
            # without the delayed-delivery step Celery adds for quorum queues, which stalls
            # a reconnecting worker on a dead node of the list (celery_consumer.py)
            app.conf.worker_consumer = "scheduler_site.celery_consumer:Consumer"
        return
    names = run_queue_names(settings.SCHEDULER_SHARD_COUNT)
    app.conf.task_queues = [Queue(name, routing_key=name) for name in names]
    app.conf.task_default_queue = names[len(names) // len(PRIORITIES)]  # runs.normal.0
    app.conf.broker_transport_options = {
        "queue_order_strategy": "scheduler_site.queue_order:PriorityThenRoundRobin",
        "visibility_timeout": settings.CELERY_BROKER_VISIBILITY_TIMEOUT,
    }


app.on_after_configure.connect(lambda **_: _configure_queues(), weak=False)


@task_prerun.connect
@task_postrun.connect
def _recycle_database_connections(**_: object) -> None:
    """What Django does around each request: close a connection only when it is broken or
    older than CONN_MAX_AGE. (Celery's own fixup closes it around every task unless
    CELERY_DB_REUSE_MAX is set: a reconnect per run that cost 80% of our throughput.)"""
    from django.db import close_old_connections

    close_old_connections()


@worker_ready.connect
def _serve_worker_metrics(**_: object) -> None:
    """In the main process, once the pool has started: WORKER_METRICS_BIND, if set."""
    from .worker_metrics import serve_from_settings

    serve_from_settings()


app.autodiscover_tasks()
