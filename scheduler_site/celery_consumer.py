"""The worker's consumer on quorum run queues (ADR 0026): Celery's, without its native
delayed-delivery step.

Celery adds that step when it sees a quorum queue: at every consumer start, reconnections
included, it declares its `celery_delayed_*` topology through every URL of the broker list,
retrying a dead node with back-offs of 1, 3 and 5 s. Measured here with one node of three
SIGKILLed, that held a worker's reconnected consumer for about 17 s before it took a
message. It serves ETA/countdown tasks only, which Tickwork never sends (retries are runs
the leader fires at their time), so the step is left out.
"""

from __future__ import annotations

from celery.worker.consumer import Consumer as CeleryConsumer


class Consumer(CeleryConsumer):
    class Blueprint(CeleryConsumer.Blueprint):
        default_steps = [
            step
            for step in CeleryConsumer.Blueprint.default_steps
            if not step.endswith(":DelayedDelivery")
        ]
