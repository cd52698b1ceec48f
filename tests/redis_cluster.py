"""A real Redis Cluster for the tests: three primaries (and, asked for, a replica each) of
this machine's `redis-server`, on free ports in a folder of their own, made a cluster with
`redis-cli --cluster create`. Skipped, saying why, where either command is missing."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

NODE_TIMEOUT_MS = 1000  # how long a primary may be silent before its replica is promoted


def _free_port() -> int:
    """A port free for the node and for its cluster bus (the port + 10,000)."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port + 10000 > 65535:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


def missing_tools() -> str | None:
    for tool in ("redis-server", "redis-cli"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed: the Redis Cluster tests need it"
    return None


class LocalRedisCluster:
    def __init__(self, workdir: Path, primaries: int = 3, replicas: int = 0) -> None:
        self.workdir = workdir
        self.primaries = primaries
        self.replicas = replicas
        self.ports: list[int] = []
        self.nodes: dict[int, subprocess.Popen] = {}
        self.frozen: set[int] = set()  # SIGSTOPped by freeze()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    @property
    def nodes_setting(self) -> str:
        """REDIS_CLUSTER_NODES: every node, so a process finds the cluster with any away."""
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def start(self) -> LocalRedisCluster:
        count = self.primaries * (1 + self.replicas)
        while len(self.ports) < count:
            port = _free_port()
            if port not in self.ports:
                self.ports.append(port)
        for port in self.ports:
            self._start_node(port)
        for port in self.ports:
            self._wait(lambda p=port: redis.Redis(port=p, socket_timeout=1).ping(), 20)
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *[f"127.0.0.1:{p}" for p in self.ports],
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        self.wait_healthy()
        return self

    def _start_node(self, port: int) -> None:
        folder = self.workdir / str(port)
        folder.mkdir(parents=True, exist_ok=True)
        log = (folder / "redis.log").open("a")
        self.nodes[port] = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(folder / "nodes.conf"),
                "--cluster-node-timeout",
                str(NODE_TIMEOUT_MS),
                # the healthy primaries go on serving their slots while one is failed over
                # (docs/operations.md recommends the same)
                "--cluster-require-full-coverage",
                "no",
                # a replica syncs at once (the default waits 5 s for more replicas)
                "--repl-diskless-sync-delay",
                "0",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(folder),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def wait_healthy(self, timeout: float = 30) -> None:
        """Every live node says the cluster is ok and sees every slot served, and every
        replica has synced with its primary (a primary killed before that has no replica
        to be promoted in its place)."""

        def healthy() -> bool:
            for port in self.live_ports():
                node = redis.Redis(port=port, socket_timeout=1)
                info = node.cluster("info")
                if info.get("cluster_state") != "ok" or int(info["cluster_slots_ok"]) != 16384:
                    return False
                replication = node.info("replication")
                if replication["role"] == "slave" and replication["master_link_status"] != "up":
                    return False
            return True

        self._wait(healthy, timeout)

    def live_ports(self) -> list[int]:
        """The nodes running and not frozen (the ones that can be asked)."""
        return [
            port
            for port, node in self.nodes.items()
            if node.poll() is None and port not in self.frozen
        ]

    def primary_of(self, key: str) -> int:
        """The port of the primary that serves `key`'s slot now."""
        client = redis.Redis(port=self.live_ports()[0], socket_timeout=1)
        slot = client.cluster("keyslot", key)
        for start, end, primary, *_ in client.execute_command("CLUSTER SLOTS"):
            if start <= slot <= end:
                return int(primary[1])
        raise LookupError(f"no node serves slot {slot}")

    def primary_of_port(self, port: int) -> bool:
        """Whether the node on `port` is a primary now."""
        return redis.Redis(port=port, socket_timeout=1).info("replication")["role"] == "master"

    def flush_scripts(self) -> None:
        """Empty every node's Lua script cache, as a promoted replica's is."""
        for port in self.live_ports():
            redis.Redis(port=port, socket_timeout=1).script_flush()

    def kill(self, port: int) -> None:
        node = self.nodes[port]
        os.killpg(node.pid, signal.SIGKILL)
        node.wait(10)

    def freeze(self, port: int) -> None:
        """SIGSTOP the node: it keeps its connections open and answers nothing, as a node
        whose host hangs or whose process is paused."""
        os.killpg(self.nodes[port].pid, signal.SIGSTOP)
        self.frozen.add(port)

    def thaw(self, port: int) -> None:
        os.killpg(self.nodes[port].pid, signal.SIGCONT)
        self.frozen.discard(port)

    def restart(self, *ports: int) -> None:
        """Start killed nodes again with their cluster config: a primary whose replica was
        promoted meanwhile rejoins as that one's replica."""
        for port in ports:
            if self.nodes[port].poll() is None:
                raise RuntimeError(f"the node on {port} is running")
            self._start_node(port)
        for port in ports:
            self._wait(lambda p=port: redis.Redis(port=p, socket_timeout=1).ping(), 20)
        self.wait_healthy()

    def restart_dead(self) -> None:
        dead = [port for port in self.ports if self.nodes[port].poll() is not None]
        if dead:
            self.restart(*dead)

    def stop(self) -> None:
        for node in self.nodes.values():
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGKILL)
                node.wait(10)

    @staticmethod
    def _wait(predicate, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return
            except (redis.RedisError, OSError) as exc:
                last = exc
            time.sleep(0.05)
        raise TimeoutError(f"the Redis Cluster was not ready within {timeout} s ({last!r})")
