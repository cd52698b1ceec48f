"""Raw Redis clients for the engine (never the Django cache: its keys are schema-prefixed).

With `REDIS_CLUSTER` the client is redis-py's `RedisCluster`, which routes each command to
the node holding its key's slot: every script and transaction of the engine touches the
keys of one partition only, which share a hash tag (`core/keys.py`), so they stay valid on
a cluster; pipelines without a transaction may span slots (the client splits them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import redis
from django.conf import settings
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import NoScriptError, RedisClusterException

# Anything the Redis client raises. A cluster client's own errors are not `RedisError`s,
# and they include outages: "Redis Cluster cannot be connected" (no node answers, raised
# by the slot map's refresh inside any command) and a slot not served while a replica is
# promoted. The leader steps down on all of them (always safe: it leads again when Redis
# answers); a command the client cannot route at all would be a bug, which the tests
# against a real cluster are there to catch.
REDIS_ERRORS: tuple[type[Exception], ...] = (redis.RedisError, RedisClusterException)

# Bounded waits: a node that does not accept or answer fails the command instead of
# wedging the caller (the leader's renewal, a worker's report).
CONNECT_TIMEOUT_SECONDS = 2


def _make(url: str, cluster: bool, **options) -> redis.Redis | RedisCluster:
    """A cluster client finds the cluster through REDIS_URL's node or any of
    REDIS_CLUSTER_NODES: with only one node to ask, a process started while that node is
    away could not start at all, even with its slots served by a promoted replica."""
    if cluster:
        nodes = [ClusterNode(host, int(port)) for host, port in settings.REDIS_CLUSTER_NODES]
        return RedisCluster.from_url(url, startup_nodes=nodes, **options)
    return redis.Redis.from_url(url, **options)


@lru_cache(maxsize=4)
def _client(url: str, cluster: bool) -> redis.Redis | RedisCluster:
    return _make(
        url,
        cluster,
        socket_connect_timeout=CONNECT_TIMEOUT_SECONDS,
        socket_timeout=settings.REDIS_SOCKET_TIMEOUT_SECONDS,
        health_check_interval=30,
    )


def get_redis() -> redis.Redis | RedisCluster:
    return _client(settings.REDIS_URL, settings.REDIS_CLUSTER)


def new_redis(url: str | None = None, **options) -> redis.Redis | RedisCluster:
    """A client of its own (closed by the caller), for REDIS_URL unless `url` is given: a
    Redis Cluster client when the deployment runs on one."""
    return _make(settings.REDIS_URL if url is None else url, settings.REDIS_CLUSTER, **options)


class KeyedScript:
    """A Lua script run on the node that holds its keys: EVALSHA, then EVAL (which caches
    it on that node) where the node does not know it yet.

    redis-py's `Script` loads a missing script with SCRIPT LOAD, which a cluster client
    sends to every primary: with one primary away (failing over), the scripts of the
    partitions on all the others failed too. A promoted replica does not have the
    scripts its primary had loaded, so this happens at every failover."""

    def __init__(self, script: str | bytes) -> None:
        self.script = script
        raw = script if isinstance(script, bytes) else script.encode()
        self.sha = hashlib.sha1(raw).hexdigest()

    def __call__(self, keys: Sequence = (), args: Sequence = (), client: Any = None) -> Any:
        if isinstance(client, redis.client.Pipeline | redis.cluster.ClusterPipeline):
            # queued, a missing script would surface only at execute(), past the fallback
            raise TypeError("KeyedScript runs at once: pipeline the script's EVAL instead")
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return client.eval(self.script, len(keys), *keys, *args)


def pipeline_eval(client: Any, pipe: Any, script: str, keys: Sequence, args: Sequence) -> None:
    """Queue EVAL of `script` on `pipe` (of `client`). On a cluster it is aimed at its
    keys' node: a cluster pipeline cannot send EVALSHA, and for an EVAL with no node given
    it asks the client's default node for the command's keys first (COMMAND GETKEYS): a
    round trip per command, and a failure whenever that node is away."""
    if isinstance(client, RedisCluster):
        node = client.get_node_from_key(keys[0])
        pipe.execute_command("EVAL", script, len(keys), *keys, *args, target_nodes=node)
    else:
        pipe.eval(script, len(keys), *keys, *args)


def redis_key(*parts: object) -> str:
    """A key under the deployment's prefix, e.g. `tw:index`."""
    return ":".join([settings.SCHEDULER_REDIS_PREFIX, *map(str, parts)])
