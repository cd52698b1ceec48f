"""Scenario 2: the leader is frozen with SIGSTOP for 12 s, then continued, again and again;
half the time at a random moment (outside any transaction, most likely), half the time on
purpose inside a fenced fire transaction (the failpoint of core/failpoints.py), where a
frozen leader holds the lease row that the next leader's epoch bump must update.

No worker runs: every published message stays in the broker, so that they can be counted
by run and by the leader that published them (the `origin` header).

Figures: takeover time (freeze to a new leader); messages the woken leader got accepted
(goal 0: from waking until it is elected again, if ever, it must write nothing), seen by a
tap on the broker's queues that notes when each message arrived and which leader sent it;
lost fires (a slot with no message) and doubled fires (two runs for a slot, or a run
published twice other than after a leader frozen between its push and its commit: see
`run`) (goal 0, 0).
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from core.redis import get_redis

from . import harness as h

FREEZE_SECONDS = 12.0
ENV = {
    "SCHEDULER_LEASE_SECONDS": "2",
    "SCHEDULER_LOOKAHEAD_SECONDS": "5",
    "SCHEDULER_RELAY_INTERVAL_SECONDS": "2",
    "SCHEDULER_VISIBILITY_TIMEOUT_SECONDS": "600",  # no re-publishing of unclaimed runs
}


def run(workdir: Path, *, small: bool) -> dict:
    rounds, job_count = (1, 10) if small else (5, 40)
    client = get_redis()
    tenant = h.chaos_tenant("chaos-freeze")
    jobs = h.every_second_jobs(tenant, job_count)
    freezes: list[dict] = []
    with h.Fleet(workdir) as fleet:
        schedulers = {}
        for n in range(2):
            trigger = workdir / f"freeze-s{n}"
            env = h.process_env(**ENV, TICKWORK_FREEZE_IN_FENCE=str(trigger))
            proc = fleet.add(h.scheduler(workdir, f"s{n}", env))
            schedulers[proc.pid] = (proc, trigger)
        h.wait_for(lambda: h.leader_pid(client), timeout=60)
        time.sleep(3)
        since = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
        with h.LeadershipLog(client) as leadership, h.BrokerTap(client) as tap:
            _freeze_rounds(rounds, client, schedulers, freezes)
            until = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=2)
            time.sleep(0.5)
        alive = sum(p.alive() for p, _ in schedulers.values())
    runs = h.slot_runs(tenant, since, until)
    ledger = h.ledger(runs, jobs, since, until, executed=None)
    messages = tap.messages
    published = Counter(m["run"] for m in messages)
    # From waking until it next leads (if it does), a woken leader is deposed: whatever of
    # its messages arrived then got through when it should not have (0.3 s of slack for
    # the tap's polling at each end).
    accepted_after_wake = 0
    for freeze in freezes:
        woke = freeze["at"] + FREEZE_SECONDS
        led_again = leadership.led_from(freeze["pid"], woke) or float("inf")
        suffix = f":{freeze['pid']}"
        accepted_after_wake += sum(
            1
            for m in messages
            if m["origin"].endswith(suffix) and woke - 0.3 <= m["at"] < led_again - 0.3
        )
    duplicates = sum(1 for count in published.values() if count > 1)
    # A leader frozen after its fire chunk's push and before the commit (a random freeze
    # can land there) is ended by the next leader's bounded takeover: its transaction rolls
    # back, the runs stay `scheduled`, and the new leader publishes them again. The first
    # copy then claims nothing (the run is not `queued`; invariant 4, ADR 0003). So a run
    # published twice is a double fire unless its first copy came from a leader that froze
    # within a second of sending it and the second from another leader.
    by_run: dict[str, list[dict]] = {}
    for m in sorted(messages, key=lambda m: m["at"]):
        by_run.setdefault(m["run"], []).append(m)
    frozen_after = [(f"{f['pid']}", f["at"]) for f in freezes]
    unexplained = 0
    for copies in by_run.values():
        if len(copies) < 2:
            continue
        first, second = copies[0], copies[1]
        cut_off = any(
            first["origin"].endswith(f":{pid}") and -0.5 <= at - first["at"] <= 1.0
            for pid, at in frozen_after
        )
        if len(copies) > 2 or first["origin"] == second["origin"] or not cut_off:
            unexplained += 1
    by_kind = {
        kind: h.summary([f["takeover"] for f in freezes if f["inside_transaction"] == inside])
        for kind, inside in (("outside", False), ("inside_fenced_transaction", True))
    }
    return {
        "freezes": len(freezes),
        "jobs": job_count,
        "takeover_seconds": by_kind,
        "woken_leader_writes_accepted": accepted_after_wake,
        "messages_published_twice": duplicates,
        "published_twice_not_after_a_cut_off_commit": unexplained,
        "schedulers_alive": alive,
        **ledger,
        "checks": {
            "woken_leader_writes_nothing": accepted_after_wake == 0,
            "no_lost_fire": ledger["lost"] == 0,
            "no_double_fire": ledger["doubled"] == 0 and unexplained == 0,
            "every_scheduler_alive": alive == 2,
        },
    }


def _freeze_rounds(rounds: int, client, schedulers: dict, freezes: list[dict]) -> None:
    for n in range(rounds * 2):
        inside = n % 2 == 1
        pid = h.wait_for(lambda: h.leader_pid(client), timeout=30)
        proc, trigger = schedulers[pid]
        frozen_at = _freeze(proc, trigger, inside)
        h.wait_for(lambda p=pid: h.leader_pid(client) not in (None, p), timeout=30)
        takeover = time.time() - frozen_at
        time.sleep(max(0.0, frozen_at + FREEZE_SECONDS - time.time()))
        proc.signal(signal.SIGCONT)
        freezes.append(
            {"inside_transaction": inside, "pid": pid, "at": frozen_at, "takeover": takeover}
        )
        time.sleep(3)


def _freeze(proc: h.Proc, trigger: Path, inside: bool) -> float:
    """Freeze the leader; returns when it froze (epoch seconds)."""
    if not inside:
        proc.signal(signal.SIGSTOP)
        return time.time()
    frozen = Path(f"{trigger}.frozen")
    frozen.unlink(missing_ok=True)
    trigger.write_text("fire")  # the next fire transaction stops itself after its fence
    h.wait_for(frozen.exists, timeout=30, interval=0.01)
    return frozen.stat().st_mtime
