"""The leader's broker pushes on one Redis are fenced with WATCH and MULTI/EXEC
(`beat/fenced.py` `push_messages`), falling back to the fenced script when a write to the
key aborted them. The write that decides each case is made by a second
connection between the push's read of the lease key and its EXEC, where the check and the
push are apart."""

from __future__ import annotations

import pytest
import redis

from beat.fenced import FencedRedis
from beat.lease import LeaseLost

LOCK = "lock:test-fenced-push"
QUEUE = "runs.normal.0"
MESSAGES = [(QUEUE, f"message {n}".encode()) for n in range(5)]


@pytest.fixture
def between_read_and_exec(monkeypatch):
    """Run `action` (on its own connection) each time a push goes from its read of the
    lease key to MULTI: the moment a script fence never leaves open."""
    actions: list = []
    original = redis.client.Pipeline.multi

    def multi(self):
        if actions:
            actions.pop(0)()
        return original(self)

    monkeypatch.setattr(redis.client.Pipeline, "multi", multi)
    return actions


@pytest.fixture
def other(redis_client):
    """A second client with its own connections."""
    pool = redis.ConnectionPool(**redis_client.connection_pool.connection_kwargs)
    yield redis.Redis(connection_pool=pool)
    pool.disconnect()


def test_a_takeover_between_the_read_and_the_exec_pushes_nothing(
    redis_client, between_read_and_exec, other
):
    redis_client.set(LOCK, "mine", px=60_000)
    between_read_and_exec.append(lambda: other.set(LOCK, "theirs", px=60_000))
    with pytest.raises(LeaseLost):
        FencedRedis(redis_client, LOCK, "mine").push_messages(MESSAGES)
    assert redis_client.llen(QUEUE) == 0
    assert not between_read_and_exec, "the takeover landed inside the push"


def test_a_renewal_between_the_read_and_the_exec_pushes_once_through_the_script(
    redis_client, between_read_and_exec, other
):
    """The lease's own renewal aborts the watched push (nothing pushed); it goes again
    through the fenced script, which no write can abort: a link slow enough for a renewal
    to land inside every push still publishes."""
    redis_client.set(LOCK, "mine", px=60_000)
    scripts_before = _script_calls(redis_client)
    between_read_and_exec.append(lambda: other.pexpire(LOCK, 120_000))  # the lease renewed
    FencedRedis(redis_client, LOCK, "mine").push_messages(MESSAGES)
    assert redis_client.lrange(QUEUE, 0, -1)[::-1] == [m for _q, m in MESSAGES]
    assert _script_calls(redis_client) == scripts_before + 1


def test_a_push_nothing_aborts_goes_without_the_script(redis_client):
    redis_client.set(LOCK, "mine", px=60_000)
    scripts_before = _script_calls(redis_client)
    FencedRedis(redis_client, LOCK, "mine").push_messages(MESSAGES)
    assert redis_client.llen(QUEUE) == len(MESSAGES)
    assert _script_calls(redis_client) == scripts_before


def _script_calls(client) -> int:
    stats = client.info("commandstats")
    return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval"))


def test_no_lease_key_pushes_nothing(redis_client):
    with pytest.raises(LeaseLost):
        FencedRedis(redis_client, LOCK, "mine").push_messages(MESSAGES)
    assert redis_client.llen(QUEUE) == 0


def test_messages_keep_their_order_per_queue_across_chunks(redis_client, monkeypatch):
    import beat.fenced

    monkeypatch.setattr(beat.fenced, "CHUNK", 2)
    redis_client.set(LOCK, "mine", px=60_000)
    messages = [(f"runs.normal.{n % 2}", f"m{n}".encode()) for n in range(9)]
    FencedRedis(redis_client, LOCK, "mine").push_messages(messages)
    for queue in ("runs.normal.0", "runs.normal.1"):
        # a worker pops from the right: the oldest first
        popped = [redis_client.rpop(queue) for _ in range(redis_client.llen(queue))]
        assert popped == [m for q, m in messages if q == queue]


def test_a_connection_lost_between_the_read_and_the_exec_is_raised_as_such(
    redis_client, between_read_and_exec, other
):
    """redis-py reports it as a WatchError; it is Redis unreachable, not the lease
    changing: raised as the connection error, not tried again as an abort."""
    redis_client.set(LOCK, "mine", px=60_000)
    between_read_and_exec.append(lambda: other.client_kill_filter(skipme=True))
    with pytest.raises(redis.ConnectionError):
        FencedRedis(redis_client, LOCK, "mine").push_messages(MESSAGES)
    assert redis_client.llen(QUEUE) == 0


def test_an_empty_push_sends_nothing(redis_client):
    """No lease check either (most fire chunks push nothing: their runs went out early)."""
    FencedRedis(redis_client, LOCK, "nobody's").push_messages([])
    assert redis_client.llen(QUEUE) == 0
