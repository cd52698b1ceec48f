"""The leader's fast message path writes the very bytes of the reference builder, which
`tests/integration/test_messages.py` compares with what Celery itself publishes."""

from __future__ import annotations

import json
import uuid

import pytest

from beat.messages import MessageTemplate, build_message, new_delivery_tag


@pytest.mark.parametrize("schema", ["t_alpha", "t_a-b_9", 't_"quoted\\é'])
@pytest.mark.parametrize("origin", ["gen42@host", 'o"dd\\ö'])
@pytest.mark.parametrize("limits", [(None, None), (330, 302)])
@pytest.mark.parametrize("attempt", [1, 12])
def test_template_renders_the_reference_builders_bytes(schema, origin, limits, attempt):
    run_id, tag = str(uuid.uuid4()), str(uuid.uuid4())
    reference = build_message(
        task_name="runs.execute_run",
        task_id=run_id,
        args=[schema, run_id, attempt],
        queue="runs.high.3",
        origin=origin,
        time_limits=limits,
        delivery_tag=tag,
    )
    rendered = MessageTemplate("runs.execute_run", origin).render(
        run_id=run_id,
        schema=schema,
        attempt=attempt,
        queue="runs.high.3",
        time_limits=limits,
        delivery_tag=tag,
    )
    assert rendered == reference


def test_each_rendered_message_gets_its_own_delivery_tag():
    template = MessageTemplate("runs.execute_run", "x")
    run_id = str(uuid.uuid4())
    tags = {
        json.loads(template.render(run_id=run_id, schema="t_a", attempt=1, queue="runs.low.0"))[
            "properties"
        ]["delivery_tag"]
        for _ in range(3)
    }
    assert len(tags) == 3


def test_delivery_tags_are_version_4_uuids():
    for _ in range(200):
        tag = uuid.UUID(new_delivery_tag())
        assert (tag.version, tag.variant) == (4, uuid.RFC_4122)
