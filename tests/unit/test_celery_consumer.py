"""The workers' consumer on quorum run queues (ADR 0026) is Celery's without one step."""

from celery.worker.consumer import Consumer as CeleryConsumer

from scheduler_site.celery_consumer import Consumer


def test_the_quorum_consumer_leaves_out_the_delayed_delivery_step_only():
    celerys = CeleryConsumer.Blueprint.default_steps
    ours = Consumer.Blueprint.default_steps
    [left_out] = [step for step in celerys if step not in ours]
    assert left_out.endswith(":DelayedDelivery")
    assert [step for step in celerys if step != left_out] == list(ours)  # same order
