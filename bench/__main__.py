"""`make bench [ARGS=...]`: the benchmarks, printing their figures (never asserting them)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import django


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make bench ARGS=")
    sub = parser.add_subparsers(dest="bench")
    cost = sub.add_parser("leader-cost", help="iteration cost vs registered jobs")
    cost.add_argument("--sizes", default="1000,100000,1000000")
    cost.add_argument("--due", type=int, default=1000)
    cost.add_argument("--tenants", type=int, default=10)
    cost.add_argument("--repeats", type=int, default=5)
    cost.add_argument(
        "--profile",
        action="store_true",
        help="print where the last iteration's time goes (cProfile)",
    )
    cost.add_argument(
        "--breakdown",
        action="store_true",
        help="print the last materialise's wall time by SQL statement, Redis call and step",
    )
    lag = sub.add_parser("fire-lag", help="publish lag for many jobs due together")
    lag.add_argument("--count", type=int, default=10_000)
    lag.add_argument("--spread", type=int, default=0, help="seconds the due instants span")
    lag.add_argument("--tenants", type=int, default=10)
    lag.add_argument(
        "--no-admission",
        action="store_true",
        help="fair admission off (plain FIFO, as SCHEDULER_FAIR_ADMISSION=0) for comparison",
    )
    plag = sub.add_parser(
        "partitioned-fire", help="fire lag with real schedulers: partitions x processes"
    )
    plag.add_argument("--count", type=int, default=10_000)
    plag.add_argument("--partitions", default="1,2,4")
    plag.add_argument("--processes", default="1,2,4")
    plag.add_argument("--tenants", type=int, default=8)
    plag.add_argument(
        "--profile",
        action="store_true",
        help="sample each scheduler with py-spy and print where its fire step's time goes",
    )
    scale = sub.add_parser(
        "partitioned-scale",
        help="registered jobs with P partitions: iteration cost, memory, takeover time",
    )
    scale.add_argument("--size", type=int, default=1_000_000, help="registered jobs")
    scale.add_argument("--partitions", type=int, default=4)
    scale.add_argument("--tenants", type=int, default=40)
    scale.add_argument("--due", type=int, default=1000)
    scale.add_argument("--repeats", type=int, default=5)
    scale.add_argument("--kills", type=int, default=5, help="schedulers killed, one at a time")
    scale.add_argument("--keep", action="store_true", help="reuse the jobs a previous run loaded")
    thr = sub.add_parser("throughput", help="noop runs/s vs plain Celery, side by side")
    thr.add_argument("--count", type=int, default=5000)
    thr.add_argument("--repeats", type=int, default=3)
    thr.add_argument(
        "--concurrency", type=int, default=2, help="prefork processes of each worker (-c)"
    )
    thr.add_argument(
        "--broker",
        choices=("redis", "amqp"),
        default="redis",
        help="amqp: both sides on RabbitMQ (BENCH_AMQP_URL, default vhost tickwork_bench)",
    )
    thr.add_argument(
        "--pgbouncer",
        type=int,
        default=0,
        metavar="SERVERS",
        help="also a worker behind a transaction-pooling PgBouncer with SERVERS connections",
    )
    thr.add_argument(
        "--pooled-direct",
        action="store_true",
        help="also a worker with DB_TRANSACTION_POOLING=1 connected directly (no PgBouncer)",
    )
    pub = sub.add_parser("broker-publish", help="the leader's publish: RabbitMQ vs Redis")
    pub.add_argument("--count", type=int, default=10_000)
    pub.add_argument("--repeats", type=int, default=3)
    conc = sub.add_parser("concurrency", help="long runs held in flight by a thread worker")
    conc.add_argument("--inflight", type=int, default=2000)
    conc.add_argument("--db-pool", type=int, default=10)
    conc.add_argument("--workers", type=int, default=1, help="worker processes")
    hin = sub.add_parser(
        "http-inflight", help="HTTP executions held in flight by the asyncio execution mode"
    )
    hin.add_argument("--inflight", type=int, default=2000)
    hin.add_argument("--processes", type=int, default=2, help="prefork pool processes")
    hin.add_argument("--per-process", type=int, default=0, help="TICKWORK_HTTP_MAX_INFLIGHT")
    hin.add_argument("--hold", type=int, default=120, help="seconds a receiver holds each")
    hin.add_argument("--receivers", type=int, default=0, help="receiver processes (ports)")
    hin.add_argument("--beat-seconds", type=int, default=10)
    hin.add_argument("--prefetch", type=int, default=1, help="--prefetch-multiplier")
    hin.add_argument("--workers", type=int, default=1, help="worker processes (parents)")
    many = sub.add_parser(
        "many-tenants", help="leader iterations, lease gaps, failover: many tenants"
    )
    many.add_argument("--tenants", type=int, default=2000)
    many.add_argument("--seconds", type=float, default=60.0)
    many.add_argument("--keep", action="store_true", help="keep the tenants (bench-m-*)")
    many.add_argument("--jobs", type=int, default=1, help="jobs per tenant")
    many.add_argument("--interval", type=int, default=10, help="seconds between a job's runs")
    many.add_argument("--spread", type=float, default=0.0, help="seconds the instants span")
    many.add_argument("--modes", default="bounded,unbounded")
    many.add_argument("--failover", action="store_true", help="kill a real leader, time it")
    many.add_argument("--threads", type=int, default=4, help="provisioning threads")
    prov = sub.add_parser("provisioning", help="seconds per tenant_provision; clone vs migrate")
    prov.add_argument("--count", type=int, default=100)
    prov.add_argument("--threads", default="1,4")
    prov.add_argument("--samples", type=int, default=5, help="schemas built by each path")
    prov.add_argument("--keep", action="store_true", help="keep the tenants (bench-p-*)")
    stmts = sub.add_parser(
        "schema-statements", help="PostgreSQL's cost of one leader statement over N schemas"
    )
    stmts.add_argument("--schemas", type=int, default=25, help="schemas per statement")
    stmts.add_argument("--repeats", type=int, default=5)
    stmts.add_argument("--tenants", type=int, default=100, help="bench-m tenants at least")
    upgrade = sub.add_parser("tenant-upgrade", help="a migration across many tenant schemas")
    upgrade.add_argument("--schemas", type=int, default=200)
    upgrade.add_argument("--processes", type=int, default=2)
    upgrade.add_argument("--skip-checks", action="store_true")
    scrape = sub.add_parser("metrics-scrape", help="/metrics cost with many tenants")
    scrape.add_argument("--tenants", type=int, default=2000)
    scrape.add_argument("--repeats", type=int, default=10)
    scrape.add_argument("--keep", action="store_true", help="keep the cloned tenants")
    sub.add_parser("schedule-math", help="µs per next_slot, fast and DST paths")
    sub.add_parser("outbound", help="µs per delivery signature, secret header opening, redaction")
    pages = sub.add_parser("portal-pages", help="portal jobs list and job history server time")
    pages.add_argument("--jobs", type=int, default=100_000)
    pages.add_argument("--runs", type=int, default=1_000_000)
    pages.add_argument("--repeats", type=int, default=30)
    dag = sub.add_parser("dag", help="DAG runs of 1,000 jobs: a fan-out and a chain")
    dag.add_argument("--size", type=int, default=1000)
    dag.add_argument("--repeats", type=int, default=3)
    fair = sub.add_parser(
        "fair-share", help="a 20,000-run flood of one tenant: another's start lag, fair vs FIFO"
    )
    fair.add_argument("--count", type=int, default=20_000)
    fair.add_argument("--workers", type=int, default=4)
    fair.add_argument("--repeats", type=int, default=1)
    api = sub.add_parser("api-latency", help="POST/GET /jobs p50/p99 and bulk registration")
    api.add_argument("--requests", type=int, default=500, help="requests per measurement")
    api.add_argument("--bulk-jobs", type=int, default=10_000)
    api.add_argument("--batch", type=int, default=1000, help="jobs per bulk request")
    api.add_argument("--keep", action="store_true", help="keep the bench-api tenant")
    ret = sub.add_parser("retention", help="a leader pruning old runs: rows/s, its fire lag")
    ret.add_argument("--runs", type=int, default=1_000_000, help="old runs to load and prune")
    ret.add_argument("--jobs", type=int, default=50, help="jobs firing every second")
    ret.add_argument("--seconds", type=float, default=60.0, help="the phase without pruning")
    ret.add_argument("--max-prune-seconds", type=float, default=3600.0)
    sub.add_parser("small", help="every benchmark at a small size (what CI runs)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_site.settings")
    django.setup()
    from . import (
        api_latency,
        concurrency,
        dag,
        fair_share,
        fire_lag,
        http_inflight,
        leader_cost,
        many_tenants,
        metrics_scrape,
        outbound,
        partitioned_fire,
        partitioned_scale,
        portal_pages,
        provisioning,
        retention,
        schedule_math,
        tenant_upgrade,
        throughput,
    )

    if args.bench == "leader-cost":
        sizes = [int(s) for s in args.sizes.split(",")]
        result = leader_cost.run(
            sizes,
            args.due,
            args.tenants,
            args.repeats,
            profile=args.profile,
            breakdown=args.breakdown,
        )
    elif args.bench == "schedule-math":
        result = schedule_math.run()
    elif args.bench == "outbound":
        result = outbound.run()
    elif args.bench == "concurrency":
        result = concurrency.run(args.inflight, args.db_pool, workers=args.workers)
    elif args.bench == "http-inflight":
        result = http_inflight.run(
            args.inflight,
            args.processes,
            args.per_process,
            args.hold,
            args.receivers,
            args.beat_seconds,
            args.prefetch,
            args.workers,
        )
    elif args.bench == "broker-publish":
        from . import broker_publish

        result = broker_publish.run(args.count, args.repeats)
    elif args.bench == "throughput":
        result = throughput.run(
            args.count,
            args.repeats,
            concurrency=args.concurrency,
            broker=args.broker,
            pgbouncer_pool=args.pgbouncer,
            pooled_direct=args.pooled_direct,
        )
    elif args.bench == "many-tenants":
        result = many_tenants.run(
            args.tenants,
            args.seconds,
            keep=args.keep,
            jobs=args.jobs,
            interval=args.interval,
            spread=args.spread,
            modes=tuple(args.modes.split(",")),
            failover=args.failover,
            threads=args.threads,
        )
    elif args.bench == "provisioning":
        threads = tuple(int(n) for n in args.threads.split(","))
        result = provisioning.run(args.count, threads, args.samples, keep=args.keep)
    elif args.bench == "schema-statements":
        from . import schema_statements

        result = schema_statements.run(args.schemas, args.repeats, args.tenants)
    elif args.bench == "tenant-upgrade":
        result = tenant_upgrade.run(args.schemas, args.processes, args.skip_checks)
    elif args.bench == "metrics-scrape":
        result = metrics_scrape.run(args.tenants, args.repeats, keep=args.keep)
    elif args.bench == "portal-pages":
        result = portal_pages.run(args.jobs, args.runs, args.repeats)
    elif args.bench == "fair-share":
        result = fair_share.run(args.count, args.workers, args.repeats)
    elif args.bench == "dag":
        result = dag.run(args.size, args.repeats)
    elif args.bench == "api-latency":
        result = api_latency.run(args.requests, args.bulk_jobs, args.batch, keep=args.keep)
    elif args.bench == "retention":
        result = retention.run(args.runs, args.jobs, args.seconds, args.max_prune_seconds)
    elif args.bench == "partitioned-fire":
        result = partitioned_fire.run(
            args.count,
            [int(p) for p in args.partitions.split(",")],
            [int(n) for n in args.processes.split(",")],
            args.tenants,
            profile=args.profile,
        )
    elif args.bench == "partitioned-scale":
        result = partitioned_scale.run(
            args.size,
            args.partitions,
            args.tenants,
            args.due,
            args.repeats,
            args.kills,
            keep=args.keep,
        )
    elif args.bench == "fire-lag":
        result = fire_lag.run(
            args.count, args.spread, args.tenants, admission=not args.no_admission
        )
    else:
        # every benchmark at a small size, each timed: CI runs this (tests/bench)
        from devstack.pgbouncer import unavailable as pgbouncer_unavailable

        small = {
            "schedule_math": lambda: schedule_math.run(number=2000, repeats=1),
            "leader_cost": lambda: leader_cost.run(
                [1000, 5000], due=200, tenant_count=4, repeats=3
            ),
            "fire_lag": lambda: fire_lag.run(2000, 2, tenant_count=4, lead_seconds=5, lookahead=10),
            "partitioned_fire": lambda: partitioned_fire.run(1000, [2], [2], 4, lookahead=3),
            "partitioned_scale": lambda: partitioned_scale.run(
                20_000, partitions=2, tenant_count=8, due=200, repeats=1, kills=1
            ),
            "many_tenants": lambda: many_tenants.run(
                50, 12, jobs=2, interval=5, modes=("bounded",), failover=True, lead_in=8
            ),
            "provisioning": lambda: provisioning.run(10, (1, 2), samples=1),
            "tenant_upgrade": lambda: tenant_upgrade.run(20, processes=2),
            "schema_statements": lambda: _schema_statements(schemas=2, repeats=1, tenants=6),
            "metrics_scrape": lambda: metrics_scrape.run(50, repeats=2),
            "portal_pages": lambda: portal_pages.run(2000, 20_000, repeats=3),
            "dag": lambda: dag.run(30, repeats=1, timeout=120),
            "fair_share": lambda: fair_share.run(300, workers=2, timeout=300),
            "api_latency": lambda: api_latency.run(requests=50, bulk_jobs=2000, batch=1000),
            "http_inflight": lambda: http_inflight.run(300, processes=2, hold=30),
            "retention": lambda: retention.run(20_000, jobs=5, seconds=10, max_prune_seconds=120),
            "throughput": lambda: throughput.run(
                200, repeats=1, pgbouncer_pool=0 if pgbouncer_unavailable() else 2
            ),
        }
        result, seconds = {}, {}
        for name, bench in small.items():
            started = time.perf_counter()
            result[name] = bench()
            seconds[name] = round(time.perf_counter() - started, 1)
        result["seconds"] = seconds
    if args.json:
        print(json.dumps(result, default=str))
    return 0


def _schema_statements(**options) -> dict:
    from . import schema_statements

    return schema_statements.run(**options)


if __name__ == "__main__":
    sys.exit(main())
