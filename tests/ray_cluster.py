"""A real multi-node Ray cluster on this machine, for the fleet tests and bench/fleet.py.

Each node is ``ray start --block`` as a child process in its own process group (head
with ``--port``, workers with ``--address``), on 127.0.0.1, with its own RAY_TMPDIR, its
own SITLPOOL_POOL and SITLPOOL_DATA_DIR, and ``--resources '{"sitl": N}'``. Nodes are
stopped by process group (SIGTERM, then SIGKILL): never ``ray stop``, which stops every
Ray on the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# ``ray start`` with --node-ip-address 127.0.0.1 kept as given: Ray's CLI otherwise swaps a
# loopback address for the machine's routable one, and the cluster's traffic must stay on
# loopback. The same patch the fleet applies (sitlpool.fleet._ray_loopback), which fails
# loudly if Ray renamed the function it replaces
RAY_START = [
    sys.executable,
    "-c",
    "import sys; from sitlpool.fleet import _ray_loopback; _ray_loopback.apply(); "
    "from ray.scripts.scripts import main; sys.argv[0] = 'ray'; sys.exit(main())",
]


_given: set[int] = set()  # never the same port twice in one process


def free_port() -> int:
    """A port for one of Ray's fixed listeners, outside the ephemeral range that gRPC servers
    (which bind with SO_REUSEPORT, so a bind test cannot see them) pick from, and above the
    test SITLs' ports."""
    import random

    while True:
        port = random.randrange(23000, 32000)
        if port in _given:
            continue
        _given.add(port)
        try:
            with socket.socket() as s:
                s.bind(("0.0.0.0", port))
            return port
        except OSError:
            continue


def node_env(pool: list[int], data_dir: Path, tmpdir: Path, extra: dict | None = None) -> dict:
    env = dict(os.environ)
    for k in [k for k in env if k.startswith("SITLPOOL_") or k.startswith("RAY_")]:
        del env[k]
    env.update(
        SITLPOOL_POOL=f"{pool[0]}-{pool[-1]}",
        SITLPOOL_DATA_DIR=str(data_dir),
        RAY_TMPDIR=str(tmpdir),
        RAY_USAGE_STATS_ENABLED="0",
        # a HOME of its own: no ~/.ray/auth_token of another Ray on this machine applies
        HOME=str(tmpdir.parent),
        # worker ports from the OS (Ray's default 10002-19999 overlaps SITL instances 425-1423)
        RAY_USE_RANDOM_PORTS="1",
        # node death seen in ~8 s instead of ~15 s, so the node-loss test stays short (shorter
        # declares busy nodes dead on a loaded machine)
        RAY_health_check_period_ms="1000",
        RAY_health_check_failure_threshold="8",
    )
    env.update(extra or {})
    return env


def session_pids(sid: int) -> list[int]:
    """Every live process of the session ``sid`` (started with start_new_session)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[3]) == sid and stat[0] != "Z":
                out.append(int(d))
    return out


@dataclass
class Node:
    name: str
    pool: list[int]
    data_dir: Path
    tmpdir: Path
    proc: subprocess.Popen | None = None
    log: Path | None = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal_group(self, sig: int) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """SIGKILL the node's whole process group (raylet, workers, ...): a machine lost."""
        self.signal_group(signal.SIGKILL)
        self.proc.wait(10)

    def session_pids(self) -> list[int]:
        """Every process of the node's session: Ray's workers get process groups of their own."""
        return session_pids(self.proc.pid)

    def stop(self, grace: float = 5.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.signal_group(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        # whatever of the group, and of the session, outlived the leader
        self.signal_group(signal.SIGKILL)
        for pid in self.session_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass


@dataclass
class RayCluster:
    """``nodes[0]`` is the head. ``address`` is ``127.0.0.1:<port>``."""

    root: Path
    nodes: list[Node] = field(default_factory=list)
    address: str = ""
    num_cpus: int = 1
    env_extra: dict | None = None
    timeout: float = 90.0

    @classmethod
    def start(
        cls,
        pools: list[list[int]],
        sitl_per_node: int | None = None,
        num_cpus: int = 1,
        root: Path | None = None,
        timeout: float = 90.0,
        env_extra: dict | None = None,
        sitl_counts: list[int] | None = None,
    ) -> RayCluster:
        """``sitl_counts``: each node's ``sitl`` resource (default ``sitl_per_node``, else its pool's size)."""
        # short root: Ray's unix socket paths must fit in 107 bytes
        root = Path(root or tempfile.mkdtemp(prefix="rc-", dir="/tmp"))
        c = cls(root)
        c.address = f"127.0.0.1:{free_port()}"
        c.num_cpus, c.env_extra, c.timeout = num_cpus, env_extra, timeout
        try:
            for i, pool in enumerate(pools):
                n = sitl_per_node if sitl_per_node is not None else len(pool)
                if sitl_counts is not None:
                    n = sitl_counts[i]
                c.add_node(pool, n)
        except BaseException:
            c.stop()
            raise
        return c

    def add_node(self, pool: list[int], sitl: int) -> Node:
        """Start one more node (the head first) with its own pool, data dir and ``sitl`` slots."""
        i = len(self.nodes)
        name = "head" if i == 0 else f"w{i}"
        node = Node(name, pool, self.root / name / "data", self.root / name / "t")
        node.data_dir.mkdir(parents=True)
        node.tmpdir.mkdir(parents=True)
        node.log = self.root / name / "ray.log"
        args = [
            *RAY_START,
            "start",
            "--block",
            "--node-ip-address",
            "127.0.0.1",
            "--num-cpus",
            str(self.num_cpus),
            "--resources",
            json.dumps({"sitl": sitl}),
            "--object-store-memory",
            str(80 * 1024 * 1024),
            "--dashboard-agent-listen-port",
            str(free_port()),
            "--include-log-monitor",
            "false",
            "--disable-usage-stats",
            # Ray's workers listen on 10002-19999 unless told: the range of the tests'
            # instance ports (15501-21993), so a worker could take a port a test binds;
            # 61000-64999 is above the ephemeral range and free_port's 23000-32000
            "--min-worker-port",
            "61000",
            "--max-worker-port",
            "64999",
            "--ray-client-server-port",
            str(free_port()),
        ]
        if i == 0:
            args += [
                "--head",
                "--port",
                self.address.rsplit(":", 1)[1],
                "--include-dashboard",
                "false",
                "--dashboard-port",
                str(free_port()),
                "--temp-dir",
                str(node.tmpdir),
            ]
        else:
            args += ["--address", self.address]
        self.nodes.append(node)
        # one at a time, and again if Ray's own 30 s registration limit ran out on busy cores
        for attempt in range(3):
            offset = node.log.stat().st_size if node.log.exists() else 0
            with open(node.log, "ab") as log:
                node.proc = subprocess.Popen(
                    args,
                    env=node_env(pool, node.data_dir, node.tmpdir, self.env_extra),
                    cwd=self.root / name,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            try:
                self._wait_started(node, self.timeout, offset)
                break
            except RuntimeError:
                node.stop()
                if attempt == 2:
                    raise
        return node

    def _wait_started(self, node: Node, timeout: float, offset: int = 0) -> None:
        """Until ``ray start`` says the node runs (it registered with the GCS)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = node.log.read_bytes()[offset:].decode(errors="replace")
            if "Ray runtime started" in text and node.alive:
                return
            if not node.alive:
                raise RuntimeError(f"ray node {node.name} exited: {text[-2000:]}")
            time.sleep(0.2)
        raise RuntimeError(f"ray node {node.name} did not start within {timeout:g}s: {node.log.read_text()[-2000:]}")

    def stop(self) -> None:
        for n in reversed(self.nodes):  # workers first: the head outlives them
            n.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
