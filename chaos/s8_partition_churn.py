"""Scenario 8: partitioned leadership (SCHEDULER_PARTITIONS=4) under churn. Three
runscheduler processes share four partitions; again and again one is killed with SIGKILL
(and restarted once its partitions are led again, as a supervisor would), stopped with
SIGTERM, or another one joins, at random moments, while
every-second jobs of tenants in every partition fire and a worker executes them.

Checks:
- every fenced write was made under its partition's current epoch by its holder: a
  trigger on the runs table records, inside the writing transaction, the fence it took
  (`tickwork.fence`: lease row and epoch), what every lease row says, and the writer
  (`application_name`); the fence must be the row of the run's partition at its current
  epoch and the writer its holder, for every insert and status change a scheduler made;
- each partition's epochs only grow, one holder per epoch (a trigger on the lease table);
- no slot lost and none executed twice, over the whole window;
- every partition is led again after each action, by a live process.
Goal: every partition led again within 3 s of each kill.
"""

from __future__ import annotations

import json
import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.db import connection
from django.test import override_settings
from psycopg import sql

from core.partitions import lease_row_id, partition_of
from core.redis import get_redis

from . import harness as h
from .tasks import LEDGER_KEY, ledger_client

PARTITIONS = 4
ENV = {
    "SCHEDULER_PARTITIONS": str(PARTITIONS),
    "SCHEDULER_LEASE_SECONDS": "2",
    "SCHEDULER_LOOKAHEAD_SECONDS": "5",
    "SCHEDULER_RELAY_INTERVAL_SECONDS": "2",
    "SCHEDULER_VISIBILITY_TIMEOUT_SECONDS": "30",
}

AUDIT_SQL = """
CREATE TABLE IF NOT EXISTS public.chaos_fence_audit (
    schema_name text, run_id uuid, status text, writer text, fence text, leases jsonb,
    at timestamptz DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS public.chaos_lease_audit (
    id int, epoch bigint, holder text, at timestamptz DEFAULT clock_timestamp());
TRUNCATE public.chaos_fence_audit, public.chaos_lease_audit;
CREATE OR REPLACE FUNCTION public.chaos_audit_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('application_name') LIKE 'tickwork-scheduler %' THEN
    INSERT INTO public.chaos_fence_audit (schema_name, run_id, status, writer, fence, leases)
    SELECT TG_TABLE_SCHEMA, NEW.id, NEW.status, current_setting('application_name'),
           current_setting('tickwork.fence', true),
           jsonb_object_agg(id::text, jsonb_build_array(epoch, holder))
    FROM public.beat_schedulerlease;
  END IF;
  RETURN NEW;
END $$;
CREATE OR REPLACE FUNCTION public.chaos_audit_lease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.chaos_lease_audit (id, epoch, holder) VALUES (NEW.id, NEW.epoch, NEW.holder);
  RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS chaos_audit ON public.beat_schedulerlease;
CREATE TRIGGER chaos_audit AFTER INSERT OR UPDATE ON public.beat_schedulerlease
  FOR EACH ROW EXECUTE FUNCTION public.chaos_audit_lease();
"""

DROP_SQL = """
DROP TRIGGER IF EXISTS chaos_audit ON public.beat_schedulerlease;
DROP FUNCTION IF EXISTS public.chaos_audit_lease() CASCADE;
DROP FUNCTION IF EXISTS public.chaos_audit_run() CASCADE;
DROP TABLE IF EXISTS public.chaos_fence_audit, public.chaos_lease_audit;
"""


def _tenants_in_every_partition() -> list:
    """Chaos tenants until each partition has one (tenant ids are sequential)."""
    tenants, covered = [], set()
    for n in range(4 * PARTITIONS):
        tenant = h.chaos_tenant(f"chaos-part-{n}")
        partition = partition_of(tenant.id, PARTITIONS)
        if partition not in covered:
            tenants.append(tenant)
            covered.add(partition)
        if len(covered) == PARTITIONS:
            break
    return tenants


def _audit(tenants: list) -> None:
    with connection.cursor() as cursor:
        cursor.execute(AUDIT_SQL)
        for tenant in tenants:
            cursor.execute(
                sql.SQL(
                    "CREATE TRIGGER chaos_audit AFTER INSERT OR UPDATE OF status ON {} "
                    "FOR EACH ROW EXECUTE FUNCTION public.chaos_audit_run()"
                ).format(sql.Identifier(tenant.schema_name, "runs_run"))
            )


def _holders(client) -> dict[int, int | None]:
    """Partition -> the pid named by its lease holder (None: not led)."""
    from core.keys import leader_info_key

    pipe = client.pipeline(transaction=False)
    for p in range(PARTITIONS):
        pipe.get(leader_info_key(p))
    out = {}
    for p, raw in enumerate(pipe.execute()):
        out[p] = int(raw.decode().rsplit(":", 1)[1]) if raw else None
    return out


def _tokens(client, partitions: list[int]) -> list[bytes | None]:
    from core.keys import leader_lock_name

    return [client.get("lock:" + leader_lock_name(p)) for p in partitions]


def _expired(client, partitions: list[int], before: list[bytes | None]) -> bool:
    """None of the victim's lock tokens is left (gone, or another process's by now)."""
    now = _tokens(client, partitions)
    return all(a is None or a != b for a, b in zip(now, before, strict=True))


def _all_led_by(client, alive_pids: set[int]) -> bool:
    holders = _holders(client)
    return all(pid in alive_pids for pid in holders.values())


def run(workdir: Path, *, small: bool) -> dict:
    with override_settings(SCHEDULER_PARTITIONS=PARTITIONS):
        try:
            return _run(workdir, small=small)
        finally:
            with connection.cursor() as cursor:
                cursor.execute(DROP_SQL)


def _run(workdir: Path, *, small: bool) -> dict:
    rounds, job_count = (8, 2) if small else (50, 5)
    rng = random.Random(8)
    client = get_redis()
    ledger_client().delete(LEDGER_KEY)
    tenants = _tenants_in_every_partition()
    jobs = {t.id: h.every_second_jobs(t, job_count) for t in tenants}
    _audit(tenants)
    env = h.process_env(**ENV)
    led_again: list[float] = []  # seconds from each kill until every partition is led
    expired: list[float] = []  # seconds from each kill until the victim's leases expired
    actions: list[str] = []
    unled_after: list[str] = []
    with h.Fleet(workdir) as fleet:
        schedulers = [fleet.add(h.scheduler(workdir, f"s{n}", env)) for n in range(3)]
        fleet.add(h.worker(workdir, "w", env, "-P", "threads", "-c", "50"))

        def alive() -> set[int]:
            return {p.pid for p in schedulers if p.alive()}

        h.wait_for(lambda: _all_led_by(client, alive()), timeout=60)
        time.sleep(3)
        since = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
        for n in range(rounds):
            roll, count = rng.random(), len(schedulers)
            if count < 2 or (0.7 <= roll < 0.85 and count < 4):  # a kill needs a survivor
                schedulers.append(fleet.add(h.scheduler(workdir, f"j{n}", env)))
                at, action = time.monotonic(), "join"
            elif roll >= 0.85 and count > 2:
                victim = rng.choice(schedulers)
                at = time.monotonic()
                victim.stop()
                schedulers.remove(victim)
                action = "stop"
            else:
                victim = rng.choice(schedulers)
                held = [p for p, pid in _holders(client).items() if pid == victim.pid]
                tokens = _tokens(client, held)
                at = time.monotonic()
                victim.kill9()
                schedulers.remove(victim)
                action = "kill"
            actions.append(action)
            try:
                if action == "kill" and held:  # where the time goes: the leases expiring
                    h.wait_for(
                        lambda h_=held, t_=tokens: _expired(client, h_, t_),
                        timeout=30,
                        interval=0.01,
                    )
                    expired.append(time.monotonic() - at)
                h.wait_for(lambda: _all_led_by(client, alive()), timeout=30, interval=0.01)
                if action == "kill":
                    led_again.append(time.monotonic() - at)
            except (AssertionError, TimeoutError):
                unled_after.append(f"{action} {n}")
            if action == "kill":  # its supervisor restarts it (after the failover)
                schedulers.append(fleet.add(h.scheduler(workdir, f"r{n}", env)))
            time.sleep(rng.uniform(0.5, 2.5))
        until = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=2)
        time.sleep(4)  # the worker drains what the window fired
        exited = [p.name for p in schedulers if not p.alive()]
    lost = doubled = slots = 0
    examples: list = []
    executed = h.executions(ledger_client())
    for tenant in tenants:
        book = h.ledger(h.slot_runs(tenant, since, until), jobs[tenant.id], since, until, executed)
        lost, doubled, slots = lost + book["lost"], doubled + book["doubled"], slots + book["slots"]
        examples += book["examples"]
    foreign, writes = _foreign_writes(tenants)
    epochs_ok = _epochs_grow_one_holder_each()
    return {
        "partitions": PARTITIONS,
        "rounds": rounds,
        "actions": {a: actions.count(a) for a in sorted(set(actions))},
        "leases_expired_after_kill_seconds": h.summary(expired),
        "led_again_after_kill_seconds": h.summary(led_again),
        "slots": slots,
        "lost": lost,
        "doubled": doubled,
        "examples": examples[:5],
        "fenced_writes_audited": writes,
        "writes_by_a_non_holder": foreign[:5],
        "checks": {
            "no_lost_fire": lost == 0,
            "no_double_fire": doubled == 0,
            "every_write_by_its_partitions_holder": writes > 0 and not foreign,
            "epochs_grow_one_holder_each": epochs_ok,
            "every_partition_led_after_each_action": not unled_after,
            "no_scheduler_exited": not exited,
        },
        "goals": {
            "every_partition_led_within_3s_of_a_kill": bool(led_again) and max(led_again) <= 3.0
        },
    }


def _foreign_writes(tenants: list) -> tuple[list[str], int]:
    """Audited scheduler writes not fenced by their partition's current epoch: the fence
    the transaction took (`tickwork.fence`, row and epoch) must be the row of the run's
    tenant's partition, at the epoch that row holds inside the same transaction, and the
    writer must be the holder that row names."""
    row_of_schema = {
        t.schema_name: lease_row_id(partition_of(t.id, PARTITIONS), PARTITIONS) for t in tenants
    }
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT schema_name, run_id, status, writer, fence, leases FROM chaos_fence_audit"
        )
        rows = cursor.fetchall()
    foreign = []
    for schema, run_id, status, writer, fence, raw in rows:
        leases = json.loads(raw) if isinstance(raw, str) else raw
        row = row_of_schema[schema]
        epoch, holder = leases.get(str(row), [None, None])
        if fence != f"{row}:{epoch}" or writer != f"tickwork-scheduler {holder}"[:63]:
            foreign.append(
                f"{schema} {run_id} {status} by {writer} fenced by {fence!r}; "
                f"row {row} is at epoch {epoch} held by {holder}"
            )
    return foreign, len(rows)


def _epochs_grow_one_holder_each() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, epoch, holder FROM chaos_lease_audit ORDER BY at")
        rows = cursor.fetchall()
    last: dict[int, int] = {}
    holder_of: dict[tuple[int, int], str] = {}
    for lease_id, epoch, holder in rows:
        if epoch <= last.get(lease_id, 0) and (lease_id, epoch) not in holder_of:
            return False  # an epoch went back, or one was handed out twice
        if holder_of.setdefault((lease_id, epoch), holder) != holder:
            return False
        last[lease_id] = epoch
    return bool(rows)
