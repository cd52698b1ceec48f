"""A real RabbitMQ cluster for the tests: three nodes of this machine's `rabbitmq-server`
(`tw1@localhost` …), each with its own AMQP and distribution ports and its data, logs and
config in a folder of its own, joined with `rabbitmqctl join_cluster`. The system node
(`rabbit@<hostname>` on 5672) is not touched: the extra nodes only share the machine's
epmd (which lists nodes by name) and the Erlang cookie `rabbitmqctl` reads.

Run as root, the nodes and `rabbitmqctl` run as the `rabbitmq` user with its HOME, as the
Debian wrapper in /usr/sbin runs `rabbitmqctl` (so both read /var/lib/rabbitmq/.erlang.cookie);
as anyone else they run as that user with that user's HOME (and cookie). Skipped, saying
why, where `rabbitmq-server` or `rabbitmqctl` is missing."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

NODES = 3
# The Debian package's real scripts; /usr/sbin holds wrappers that switch to the rabbitmq
# user and send the server's output to /var/log/rabbitmq.
_PACKAGE_SCRIPTS = Path("/usr/lib/rabbitmq/bin")


def missing_tools() -> str | None:
    for tool in ("rabbitmq-server", "rabbitmqctl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed: the RabbitMQ cluster tests need it"
    return None


def base_port() -> int:
    """The first of this session's ports: two test sessions with different TEST_REDIS_DB
    values run clusters side by side. AMQP on base+0.., distribution on base+10..; the
    CLI takes the distribution port + 10,000 (RABBITMQ_CTL_DIST_PORT_MIN's default)."""
    db = int(os.environ.get("TEST_REDIS_DB", "15"))
    return 30000 + (db % 100) * 20


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        # as the nodes bind (a listener, not a closed connection's TIME_WAIT, blocks it)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _script(name: str) -> str:
    packaged = _PACKAGE_SCRIPTS / name
    return str(packaged) if packaged.exists() else shutil.which(name) or name


class LocalRabbitCluster:
    def __init__(self, workdir: Path | None = None, nodes: int = NODES, base: int | None = None):
        """`workdir`: where the nodes keep their data and logs; by default a new folder in
        the system temp directory (the nodes' user must reach it: pytest's own temp folders
        are root's alone), removed by `stop`."""
        self.own_workdir = workdir is None
        if workdir is None:
            workdir = Path(tempfile.mkdtemp(prefix="tickwork-rabbitmq-"))
        self.workdir = workdir
        self.count = nodes
        self.base = base_port() if base is None else base
        self.names = [f"tw{i + 1}_{self.base}@localhost" for i in range(nodes)]
        self.amqp_ports = [self.base + i for i in range(nodes)]
        self.dist_ports = [self.base + 10 + i for i in range(nodes)]
        self.servers: dict[int, subprocess.Popen] = {}
        self.startup_seconds: float | None = None
        self._user: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            with contextlib.suppress(KeyError):
                self._user = pwd.getpwnam("rabbitmq")

    # --- addresses -----------------------------------------------------------------------
    def node_url(self, index: int, vhost: str = "") -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.amqp_ports[index]}/{vhost}"

    def url(self, vhost: str = "", order: list[int] | None = None) -> str:
        """CELERY_BROKER_URL naming every node (kombu's failover syntax), in `order`."""
        order = list(range(self.count)) if order is None else order
        return ";".join(self.node_url(i, vhost) for i in order)

    # --- processes -----------------------------------------------------------------------
    def _env(self, index: int) -> dict[str, str]:
        folder = self.workdir / f"node{index + 1}"
        env = dict(os.environ)
        if self._user is not None:
            env.update(HOME=self._user.pw_dir, USER="rabbitmq", LOGNAME="rabbitmq")
        env.update(
            RABBITMQ_NODENAME=self.names[index],
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(self.amqp_ports[index]),
            RABBITMQ_DIST_PORT=str(self.dist_ports[index]),
            RABBITMQ_MNESIA_BASE=str(folder / "mnesia"),
            RABBITMQ_MNESIA_DIR=str(folder / "mnesia" / self.names[index]),
            RABBITMQ_LOG_BASE=str(folder / "log"),
            RABBITMQ_PID_FILE=str(folder / "beam.pid"),
            RABBITMQ_CONFIG_FILE=str(self.workdir / "rabbitmq.conf"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(self.workdir / "advanced.config"),
            RABBITMQ_CONF_ENV_FILE=str(self.workdir / "rabbitmq-env.conf"),
            # no management (or any other) plugin
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.workdir / "enabled_plugins"),
            RABBITMQ_PLUGINS_EXPAND_DIR=str(folder / "plugins-expand"),
        )
        env.pop("RABBITMQ_ENABLED_PLUGINS", None)
        return env

    def _as_user(self, argv: list[str]) -> list[str]:
        if self._user is None:
            return argv
        return ["runuser", "-u", "rabbitmq", "--", *argv]

    def ctl(self, index: int, *args: str, timeout: float = 60) -> str:
        """`rabbitmqctl -n <node> …`, raising with its output when it fails."""
        done = subprocess.run(
            self._as_user([_script("rabbitmqctl"), "-q", "-n", self.names[index], *args]),
            env=self._env(index),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.workdir,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"rabbitmqctl -n {self.names[index]} {' '.join(args)}: {done.returncode}"
                f" {done.stdout.strip()} {done.stderr.strip()}"
            )
        return done.stdout

    def _write_config(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "rabbitmq.conf").write_text(
            "loopback_users = none\n"
            # a node's loss is seen by the others at once when its process dies (the
            # distribution connection closes); the tick bounds the silent cases
            "net_ticktime = 10\n"
            "cluster_partition_handling = ignore\n"
            "disk_free_limit.absolute = 50MB\n"
            "log.console = false\n"
            "log.file.level = info\n"
        )
        (self.workdir / "advanced.config").write_text("[].\n")
        (self.workdir / "rabbitmq-env.conf").write_text("")
        (self.workdir / "enabled_plugins").write_text("[].\n")
        for index in range(self.count):
            (self.workdir / f"node{index + 1}").mkdir(exist_ok=True)
        if self._user is not None:
            for path in [self.workdir, *self.workdir.rglob("*")]:
                os.chown(path, self._user.pw_uid, self._user.pw_gid)

    def start(self) -> LocalRabbitCluster:
        started = time.monotonic()
        busy = [p for p in self.amqp_ports + self.dist_ports if not _port_free(p)]
        if busy:
            raise RuntimeError(f"ports {busy} are taken: another cluster of this TEST_REDIS_DB?")
        self._write_config()
        for index in range(self.count):
            self._start_node(index)
        for index in range(self.count):
            self.wait_node(index)
        for index in range(1, self.count):
            self.ctl(index, "stop_app")
            self.ctl(index, "join_cluster", self.names[0])
            self.ctl(index, "start_app")
        self.wait_cluster()
        self.startup_seconds = time.monotonic() - started
        return self

    def _start_node(self, index: int) -> None:
        folder = self.workdir / f"node{index + 1}"
        pid_file = folder / "beam.pid"
        with contextlib.suppress(FileNotFoundError):
            pid_file.unlink()
        log = (folder / "server.out").open("a")
        self.servers[index] = subprocess.Popen(
            self._as_user([_script("rabbitmq-server")]),
            env=self._env(index),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.workdir,
            start_new_session=True,  # its own process group: the stop kills the whole tree
        )
        log.close()

    def beam_pid(self, index: int, timeout: float = 30) -> int:
        """The node's Erlang VM (beam.smp), from the pid file the node writes at boot."""
        pid_file = self.workdir / f"node{index + 1}" / "beam.pid"

        def read() -> int | None:
            self._check_running(index)
            text = pid_file.read_text().strip() if pid_file.exists() else ""
            return int(text) if text else None

        return self._wait(read, timeout, f"{self.names[index]} wrote no pid file")

    def wait_node(self, index: int, timeout: float = 60) -> None:
        """The node's AMQP listener answers (the app is booted)."""
        self.beam_pid(index, timeout)

        def listening() -> bool:
            self._check_running(index)
            with socket.create_connection(("127.0.0.1", self.amqp_ports[index]), timeout=1):
                return True

        self._wait(listening, timeout, f"{self.names[index]} does not listen")

    def _check_running(self, index: int) -> None:
        if self.servers[index].poll() is not None:
            log = self.workdir / f"node{index + 1}" / "server.out"
            raise RuntimeError(f"{self.names[index]} exited: {log.read_text()[-2000:]}")

    def running_nodes(self, via: int) -> set[str]:
        out = self.ctl(via, "eval", "rabbit_nodes:all_running().", timeout=20)
        return {name for name in self.names if name in out}

    def wait_cluster(self, timeout: float = 60) -> None:
        """Every live node sees every live node running."""
        live = set(self.live())

        def joined() -> bool:
            want = {self.names[i] for i in live}
            return all(self.running_nodes(i) == want for i in live)

        self._wait(joined, timeout, "the nodes did not form one cluster")

    def live(self) -> list[int]:
        return [i for i, server in self.servers.items() if server.poll() is None]

    def kill(self, index: int) -> None:
        """SIGKILL the node's Erlang VM, as a crash would (no goodbye to its peers)."""
        pid = self.beam_pid(index, timeout=5)
        os.kill(pid, signal.SIGKILL)
        self._reap(self.servers[index])

    def restart(self, index: int) -> None:
        """Start a killed node again; it rejoins from its own data (still a member)."""
        if self.servers[index].poll() is None:
            raise RuntimeError(f"{self.names[index]} is running")
        self._start_node(index)
        self.wait_node(index)
        self.wait_cluster()

    def restart_dead(self) -> None:
        for index in range(self.count):
            if self.servers[index].poll() is not None:
                self.restart(index)

    def add_vhost(self, vhost: str) -> str:
        with contextlib.suppress(RuntimeError):  # "already exists"
            self.ctl(0, "add_vhost", vhost)
        self.ctl(0, "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        return vhost

    def stop(self) -> None:
        """Kill every node and its process tree, then check that none is left."""
        pids = []
        for index in self.servers:
            with contextlib.suppress(Exception):
                pids.append(self.beam_pid(index, timeout=0))
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for server in self.servers.values():
            self._reap(server)
        left = [pid for pid in pids if _alive(pid)]
        if self.own_workdir and not left:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if left:
            raise RuntimeError(f"RabbitMQ test nodes still running: pids {left}")

    @staticmethod
    def _reap(server: subprocess.Popen) -> None:
        """The wrapper shell reaps the killed VM and exits (no zombie is left to init); its
        process group is killed if it does not within a few seconds."""
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)

    @staticmethod
    def _wait(predicate, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while True:
            try:
                value = predicate()
                if value:
                    return value
            except (OSError, RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
                if isinstance(exc, RuntimeError) and "exited" in str(exc):
                    raise
                last = exc
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{what} within {timeout} s ({last!r})")
            time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    return True
