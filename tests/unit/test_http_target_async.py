"""Every test of the threaded HTTP target (tests/unit/test_http_target.py), run again
against the asyncio one (`runs.targets.http_async.send_async`): the same contract, the
same SSRF guard, deadline and caps, against the same real local servers."""

from __future__ import annotations

import asyncio

import pytest

from runs.targets.http_async import send_async

from . import test_http_target as threaded
from .test_http_target import *  # noqa: F403  (the tests and their fixtures, collected here)


def _send_async(call, *, allow, resolver=None, transport=None, max_excerpt_bytes=4096):
    async def resolve(host: str, port: int) -> list[str]:
        return resolver(host, port)

    # The https test brings an httpx transport only to trust its test certificate.
    pool = getattr(transport, "_pool", None)
    tls = getattr(pool, "_ssl_context", None)
    return asyncio.run(
        send_async(
            call,
            allow=allow,
            resolver=resolve if resolver is not None else None,
            max_excerpt_bytes=max_excerpt_bytes,
            tls=tls,
        )
    )


@pytest.fixture(autouse=True)
def _asyncio_target(monkeypatch):
    monkeypatch.setattr(threaded, "send", _send_async)


def test_the_collected_tests_call_the_asyncio_client():
    """The tests collected above assert the contract; this asserts that they exercise the
    asyncio client here, not the threaded one (the swap is what makes them async tests)."""
    assert threaded.send is _send_async
