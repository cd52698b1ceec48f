"""A process backing off after an error in one partition's work (docs/adr/0020), with real
Redis and PostgreSQL: the others must not keep giving that partition up for it to take
(it cannot, blocked), and the process must not exit when PostgreSQL is away at start-up."""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from django.db import connection

from beat.loop import UNABLE_SECONDS, SchedulerProcess
from core.clock import FakeClock
from core.keys import leader_info_key, leader_lock_name

from .helpers import fleet_process, held_partitions, settle, utc

START = utc(2026, 6, 1, 12, 0, 0)
P = 4


@pytest.fixture
def four_partitions(live, settings):
    settings.SCHEDULER_PARTITIONS = P
    yield live
    with connection.cursor() as cursor:  # the rows of partitions 1..3, for other tests
        cursor.execute("DELETE FROM public.beat_schedulerlease WHERE id > 1")


def _process(client, name: str, partitions: int = P) -> SchedulerProcess:
    return fleet_process(client, name, clock=FakeClock(START), partitions=partitions)


def _holder(client, partition: int) -> str | None:
    if not client.exists("lock:" + leader_lock_name(partition)):
        return None
    return client.get(leader_info_key(partition)).decode()


def _broken(*args, **kwargs) -> float:
    raise RuntimeError("the broker cannot be reached from this host")


def _turns(processes: list[SchedulerProcess], seconds: float) -> Iterator[None]:
    """Each process's loop, as `run_once` does it without its sleep: a look at the fleet,
    then an iteration of every partition held; about every fleet poll, for `seconds`."""
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        for process in processes:
            if process.try_lead():
                process.lead_once()
        yield
        time.sleep(0.05)


def test_a_partition_is_not_handed_again_and_again_to_a_process_backing_off_from_it(
    four_partitions, redis_client
):
    """Counted live, the process backing off looks the least loaded: the other one took the
    partition as an orphan, gave it back (over its share), nobody could take it (both
    blocked), and so on, the partition unled most of the time."""
    b, a = _process(redis_client, "b:2"), _process(redis_client, "a:1")
    settle([b, a])  # b took all four first and gave up its highest, one a turn
    assert held_partitions(a) == [2, 3] and held_partitions(b) == [0, 1]
    for leader in b.partitions:  # as a while later: b may take back what it gave a
        leader.blocked_until = 0.0
    failing = a.partitions[3]
    failing.lead_once = _broken  # its work there fails at every iteration
    failing.error_backoff = 1.0  # it has failed before: the next back-off is 2 s
    holders, a_seen_live = [], []
    for _ in _turns([a, b], seconds=1.8):  # inside a's back-off
        holders.append(_holder(redis_client, 3))
        assert held_partitions(a)[:1] == [2], "a's other partition stays its own"
        a_seen_live.append("a:1" in b._read_fleet()[1])
    unled = holders.count(None) / len(holders)
    taken = sum(1 for was, now in itertools.pairwise(holders) if was != now == "b:2")
    assert taken == 1, str(holders)  # b took it once and kept it
    assert unled < 0.25, str(holders)
    assert not any(a_seen_live[1:]), "backing off, a is not counted live by b"
    time.sleep(max(0.0, failing.blocked_until - time.monotonic()) + 0.2)
    a.try_lead()  # a looks at the fleet again
    assert "a:1" in b._read_fleet()[1], "its back-off over, a counts as live again"


def test_a_failed_take_keeps_the_process_out_of_the_count_for_its_whole_back_off(
    four_partitions, redis_client
):
    a = _process(redis_client, "a:1")
    first = a.partitions[0]
    first.try_lead = _broken  # taking partition 0 fails with an error of this process
    first.error_backoff = 4.0  # the next back-off: 8 s, longer than UNABLE_SECONDS
    a.try_lead()
    assert held_partitions(a) == [1, 2, 3]
    assert first.blocked_until - time.monotonic() > UNABLE_SECONDS
    assert a.unable_until >= first.blocked_until  # not live while it cannot take it


@contextlib.contextmanager
def _postgresql_unreachable() -> Iterator[None]:
    """Django's connection pointed at a local port nobody listens on (refused at once)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        closed_port = listener.getsockname()[1]
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(closed_port))
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


def test_runscheduler_starts_when_postgresql_is_unreachable(live, redis_client, caplog):
    caplog.set_level(logging.INFO, logger="beat.loop")
    process = _process(redis_client, "a:1", partitions=1)
    stop = threading.Event()
    stop.set()  # the start-up alone: no turn of the loop
    with _postgresql_unreachable():
        process.run(stop)  # no traceback out of it: the loop waits for PostgreSQL
    [unchecked] = _events(caplog, "scheduler.clock_unchecked")
    assert unchecked.levelno == logging.WARNING and unchecked.exc_info is None  # one line
    assert "Connection refused" in unchecked.fields["error"]
    assert _events(caplog, "scheduler.started")


def _events(caplog, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


def test_a_process_stopping_leaves_the_live_count_before_it_releases(four_partitions, redis_client):
    """A stopped runscheduler releases its leases; still counted live for a second, it
    looked the least loaded, and the survivors gave up the partitions they took from it."""
    from core.keys import schedulers_seen_key

    leaving, staying = _process(redis_client, "leaving:1"), _process(redis_client, "staying:2")
    settle([leaving, staying])
    assert held_partitions(leaving) and held_partitions(staying)
    seen_at_release: list = []
    for leader in leaving.held():
        release = leader.release

        def watched(release=release) -> None:
            seen_at_release.append(redis_client.zscore(schedulers_seen_key(), "leaving:1"))
            release()

        leader.release = watched
    stop = threading.Event()
    stop.set()  # no turn: the shutdown path
    leaving.run(stop)
    assert seen_at_release and seen_at_release == [None] * len(seen_at_release)
    assert redis_client.zscore(schedulers_seen_key(), "leaving:1") is None
    _holders, live = staying._read_fleet()
    assert live == ["staying:2"]


def test_liveness_is_judged_on_redis_clock_not_a_hosts(four_partitions, redis_client, monkeypatch):
    """A host whose clock runs 30 s fast: its entry is stamped with Redis's time, so it
    leaves the live count within the window of its last look, not 30 s later (its
    partitions would go back and forth between the survivors meanwhile), and a host 30 s
    slow is not dropped from the count at once."""
    from beat import loop
    from core.keys import schedulers_seen_key

    fast, slow = _process(redis_client, "fast:1"), _process(redis_client, "slow:2")
    real = time.time
    monkeypatch.setattr(loop.time, "time", lambda: real() + 30)
    fast._read_fleet()
    monkeypatch.setattr(loop.time, "time", lambda: real() - 30)
    _holders, live = slow._read_fleet()
    monkeypatch.undo()
    seconds, micros = redis_client.time()
    server = seconds + micros / 1e6
    for name in ("fast:1", "slow:2"):
        assert abs(redis_client.zscore(schedulers_seen_key(), name) - server) < 1.0
    assert sorted(live) == ["fast:1", "slow:2"]
