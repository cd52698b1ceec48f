"""docs/webhooks.md's receiver, run as written against real deliveries."""

from __future__ import annotations

import re
from pathlib import Path

from django.test import override_settings

from core.webhook_signing import webhook_headers

from .receiver import Receiver
from .test_outbound import deliver, http_job, new_secret, now_clock

DOC = Path(__file__).resolve().parents[2] / "docs" / "webhooks.md"


def _receiver_module() -> dict:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    [code] = [b for b in blocks if b.startswith("# receiver.py")]
    namespace: dict = {}
    exec(compile(code, str(DOC), "exec"), namespace)
    return namespace


@override_settings(SCHEDULER_HTTP_ALLOW_NETWORKS=["127.0.0.0/8"])
def test_the_documented_receiver_accepts_a_delivery_and_refuses_a_tampered_one(live, redis_client):
    verify = _receiver_module()["verify"]
    alpha = live["alpha"].tenant
    clock = now_clock()
    old = new_secret(alpha, clock)
    new = new_secret(alpha, clock, overlap=60)
    with Receiver() as receiver:
        deliver(alpha, clock, http_job(alpha, clock, receiver.url("/hook")))
    [request] = receiver.requests
    assert verify(request.body, request.headers, [new])
    assert verify(request.body, request.headers, [old])  # the overlap
    assert not verify(request.body + b" ", request.headers, [new, old])
    assert not verify(request.body, {**request.headers, "webhook-id": "x"}, [new])
    assert not verify(request.body, request.headers, [new_secret(live["beta"].tenant, clock)])
    # Correctly signed, but an hour old: refused for its age alone.
    hour_ago = int(clock.now().timestamp()) - 3600
    stale = webhook_headers([new], request.headers["webhook-id"], hour_ago, request.body)
    assert not verify(request.body, stale, [new])
    assert verify(request.body, webhook_headers([new], "id", hour_ago + 3600, request.body), [new])
