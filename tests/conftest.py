"""Shared test fixtures: every test gets its own data dir and a pool of instances no
other concurrently running test uses (xdist workers get disjoint ranges), and every
process a test starts is killed by pid or process group when it ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

# ../shared beside the checkout (real ArduPilot binaries and logs), on developer machines and in CI
SHARED = Path(__file__).resolve().parents[1].parent / "shared"

# instances 1000-1299: ports 15760-21993, below the ephemeral range and away from
# anything a person runs (the default pool is 40-59); 300 wide so that no instance's
# serial ports meet another's physics ports (those are 324 instances apart)
FIRST, WIDTH = 1000, 300
BLOCK = 6
# Blocks are handed out through flock leases of their own (one lock file per block in a
# per-user temp dir), so any number of xdist workers and of whole suites running at the
# same time on this machine never share an instance; the kernel drops a block's lease
# when its test process dies.
BLOCK_LOCK_DIR = Path(os.environ.get("SITLPOOL_TEST_BLOCK_DIR", f"/tmp/sitlpool-test-blocks-{os.getuid()}"))
_held_blocks: dict[int, int] = {}  # block start -> fd, held by this process until released
# Real ArduPilot SITL keeps -I in a uint8 (`-I 1174` binds instance 150's ports), so
# tests that run a real binary take their instances from blocks below 256: 200-253
# (ports 7760-8293, 7501-8031, 11002-11532), away from the default pool 40-59.
REAL_FIRST, REAL_WIDTH = 200, 54


def reserve_blocks(count: int = 1, wait: float = 120.0, real: bool = False) -> list[int]:
    """``count`` adjacent blocks of BLOCK instances that no other test on this machine holds
    (blocking up to ``wait`` s); ``real``: below 256, for real ArduPilot SITL. Released
    with ``release_blocks``."""
    import fcntl
    import random

    BLOCK_LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
    first_inst, width, prefix = (REAL_FIRST, REAL_WIDTH, "real-block") if real else (FIRST, WIDTH, "block")
    nblocks = width // BLOCK
    deadline = time.monotonic() + wait
    while True:
        offset = random.randrange(nblocks)
        for i in range(nblocks):
            first = (offset + i) % nblocks
            if first + count > nblocks:
                continue
            fds = []
            for b in range(first, first + count):
                fd = os.open(
                    BLOCK_LOCK_DIR / f"{prefix}-{first_inst + b * BLOCK}.lock",
                    os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                    0o600,
                )
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    break
                fds.append(fd)
            if len(fds) == count:
                start = first_inst + first * BLOCK
                for i, fd in enumerate(fds):
                    _held_blocks[start + i * BLOCK] = fd
                return list(range(start, start + count * BLOCK))
            for fd in fds:
                os.close(fd)
        if time.monotonic() > deadline:
            raise RuntimeError(f"no free block of {count * BLOCK} test instances in {BLOCK_LOCK_DIR} after {wait:g}s")
        time.sleep(0.2)


def release_blocks(instances: list[int]) -> None:
    for start in range(instances[0], instances[-1] + 1, BLOCK):
        fd = _held_blocks.pop(start, None)
        if fd is not None:
            os.close(fd)


REAL_FIXTURES = {"real_copter", "real_plane"}


def _wants_real(request) -> bool:
    """Instances below 256 for tests of real SITL and for those marked ``below_256`` (a
    configured binary, even a fake one, is never launched above 255)."""
    if request.node.get_closest_marker("below_256") or REAL_FIXTURES & set(request.fixturenames):
        return True
    callspec = getattr(request.node, "callspec", None)
    return bool(callspec and callspec.params.get("vehicle_binary") == "arducopter")


@pytest.fixture
def instances(request) -> list[int]:
    """A block of instance numbers that no other test on this machine uses meanwhile
    (below 256 when the test runs real SITL)."""
    got = reserve_blocks(1, real=_wants_real(request))
    yield got
    release_blocks(got)


# ---- real ArduPilot SITL -------------------------------------------------------------------
# A real ArduCopter binary comes from --sitl-binary (the plugin's option) or
# SITLPOOL_TEST_SITL_BINARY; ArduPlane is the `arduplane` beside it. Without one, the
# real-SITL cases skip with a one-line reason (an outside user has no ../shared).


def _real_binary(config, name: str) -> Path | None:
    given = config.getoption("sitl_binary", default=None) or os.environ.get("SITLPOOL_TEST_SITL_BINARY")
    if not given:
        return None
    p = Path(given).resolve()
    p = p if p.name == name else p.parent / name
    return p if p.is_file() and os.access(p, os.X_OK) else None


@pytest.fixture
def real_copter(pytestconfig) -> Path:
    p = _real_binary(pytestconfig, "arducopter")
    if p is None:
        pytest.skip("real ArduCopter not given (--sitl-binary PATH or SITLPOOL_TEST_SITL_BINARY)")
    return p


@pytest.fixture
def real_plane(pytestconfig) -> Path:
    p = _real_binary(pytestconfig, "arduplane")
    if p is None:
        pytest.skip("real ArduPlane not given (arduplane beside --sitl-binary / SITLPOOL_TEST_SITL_BINARY)")
    return p


@pytest.fixture(params=["builtin", "arducopter"])
def vehicle_binary(request) -> Path | None:
    """Runs a test twice: on the built-in vehicle (None) and on real ArduCopter (skipped
    when none is given). Set SITLPOOL_SITL_BINARY from it for sitlpool subprocesses."""
    if request.param == "builtin":
        return None
    return request.getfixturevalue("real_copter")


def processes_under(root: Path) -> list[int]:
    """Pids whose cwd lies inside ``root`` (every SITL runs in its instance's session dir)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cwd = os.readlink(f"/proc/{d}/cwd")
            except OSError:
                continue
            if cwd == str(root) or cwd.startswith(str(root) + "/"):
                out.append(int(d))
    return out


@pytest.fixture
def data_dir(tmp_path) -> Path:
    """This test's data dir. At teardown, any process still running inside it is a leak:
    it is killed (by pid) and the test errors, naming it."""
    d = tmp_path / "data"
    d.mkdir()
    yield d
    deadline = time.monotonic() + 5  # a kill in flight (grace period) may still be finishing
    left = processes_under(d)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in processes_under(d) if open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]
    if left:
        names = [" ".join(open(f"/proc/{p}/cmdline").read().split("\0")) for p in left]
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        raise AssertionError(f"test left processes running in its data dir: {names}")


@pytest.fixture
def lock_dir(data_dir) -> Path:
    return data_dir / "leases"


@pytest.fixture
def env(data_dir, instances, monkeypatch) -> dict[str, str]:
    """The environment for sitlpool subprocesses of this test (also set in this process)."""
    pool = f"{instances[0]}-{instances[-1]}"
    monkeypatch.setenv("SITLPOOL_DATA_DIR", str(data_dir))
    monkeypatch.delenv("SITLPOOL_LOCK_DIR", raising=False)
    monkeypatch.delenv("SITLPOOL_SITL_BINARY", raising=False)
    monkeypatch.setenv("SITLPOOL_POOL", pool)
    return dict(os.environ)


class Procs:
    """Processes a test started; all killed (group first, then pid) at teardown."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []

    def add(self, p: subprocess.Popen) -> subprocess.Popen:
        self.procs.append(p)
        return p

    def popen(self, args, **kw) -> subprocess.Popen:
        kw.setdefault("start_new_session", True)
        return self.add(subprocess.Popen(args, **kw))

    def python(self, code: str, *args, **kw) -> subprocess.Popen:
        """Run a Python snippet in a child process (in its own session)."""
        return self.popen([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], **kw)

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                try:
                    p.kill()
                except ProcessLookupError:
                    pass
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass
            for s in (p.stdout, p.stderr, p.stdin):
                if s:
                    s.close()


@pytest.fixture
def procs():
    p = Procs()
    yield p
    p.cleanup()


def wait_for(pred, timeout=10.0, interval=0.01, what="condition"):
    """Poll ``pred`` until it is truthy; fail the test naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


HOLDER = """
import sys, time
from sitlpool.leases import LeasePool
pool = LeasePool(sys.argv[1], [int(sys.argv[2])], check=False)
lease = pool.acquire(sys.argv[3])
print("held", lease.instance, flush=True)
sys.stdin.read() if len(sys.argv) > 4 else time.sleep(3600)
"""


def hold_lease(procs: Procs, lock_dir, instance: int, owner: str, until_stdin_closes=False, **kw) -> subprocess.Popen:
    """A child process holding ``instance``'s lease (returns once it holds it)."""
    extra = ["stdin"] if until_stdin_closes else []
    p = procs.python(
        HOLDER,
        lock_dir,
        instance,
        owner,
        *extra,
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE if until_stdin_closes else subprocess.DEVNULL,
        text=True,
        **kw,
    )
    line = p.stdout.readline()
    assert line.startswith("held"), f"holder failed to lease {instance}: {line!r}"
    return p


# ---- the built-in vehicle, driven as any GCS would --------------------------------------

os.environ.setdefault("MAVLINK20", "1")


def start_sim(procs: Procs, cwd: Path, instance: int, *args, parent_code: str | None = None, **kw) -> subprocess.Popen:
    """Start ``python -m sitlpool.sim -I instance --model quad ARGS`` in ``cwd``, in its own group."""
    cwd.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "sitlpool.sim", "-I", str(instance), *map(str, args)]
    if not any(a == "--model" for a in cmd):
        cmd += ["--model", "quad"]
    p = procs.popen(cmd, cwd=cwd, stdout=open(cwd / "stdout", "ab"), stderr=open(cwd / "stderr", "ab"), **kw)
    return p


def listening(port: int) -> bool:
    from sitlpool.ports import read_sockets

    return any(s.local_port == port for s in read_sockets(("tcp",)))


class Gcs:
    """A pymavlink GCS connection with the few helpers the tests need."""

    def __init__(self, port: int, timeout: float = 10):
        from pymavlink import mavutil

        wait_for(lambda: listening(port), timeout, what=f"port {port} to listen")
        self.m = mavutil.mavlink_connection(f"tcp:127.0.0.1:{port}", source_system=255, autoreconnect=False)
        self.m.mav.srcSystem = 255
        self.seen_texts: list[str] = []

    def heartbeat(self, timeout=10):
        hb = self.m.wait_heartbeat(timeout=timeout)
        assert hb is not None, "no HEARTBEAT"
        return hb

    def recv(self, type, timeout=10, cond=None):
        """The next ``type`` message (or one of a tuple of types) meeting ``cond``; every
        STATUSTEXT seen is kept in ``seen_texts``."""
        types = (type,) if isinstance(type, str) else tuple(type)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self.m.recv_match(blocking=True, timeout=max(0.01, deadline - time.monotonic()))
            if msg is None:
                continue
            if msg.get_type() == "STATUSTEXT":
                self.seen_texts.append(msg.text)
            if msg.get_type() in types and (cond is None or cond(msg)):
                return msg
        return None

    def command(self, cmd, *params, timeout=10):
        p = list(params) + [0] * (7 - len(params))
        self.m.mav.command_long_send(self.m.target_system or 1, 1, cmd, 0, *p)
        ack = self.recv("COMMAND_ACK", timeout, lambda a: a.command == cmd)
        assert ack is not None, f"no COMMAND_ACK for {cmd}"
        return ack.result

    def close(self):
        self.m.close()


@pytest.fixture(scope="session")
def fleet_cluster():
    """One real 3-node loopback Ray cluster (2 sitl slots per node, each node its own pool and
    data dir) per test process, for the fleet modules: the xdist groups "fleet" and "fleet_b"
    each go to one worker (a process joins one cluster), two halves in parallel.
    test_fleet_node_loss.py adds a fourth node and kills that one."""
    ray = pytest.importorskip("ray")
    from ray_cluster import RayCluster
    from sitlpool.fleet import Fleet

    blocks = reserve_blocks(3)
    pools = [blocks[0:2], blocks[6:8], blocks[12:14]]
    c = RayCluster.start(pools, sitl_per_node=2, timeout=120)
    try:
        c.fleet = Fleet(c.address)
        yield c
    finally:
        try:
            if ray.is_initialized():
                c.fleet.close()
                ray.shutdown()
        finally:
            c.stop()
            release_blocks(blocks)


@pytest.fixture
def by_value(request):
    """The requesting test module pickled by value: the nodes need not import it."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(request.module)
    yield
    cloudpickle.unregister_pickle_by_value(request.module)


# ---- the quick subset: `./dev test -m quick` while you work ---------------------------------
# Everything but the slow subjects: real ArduPilot SITL (tens of seconds of boot each), the Ray
# clusters, the ground-station differentials and the chaos rounds.
SLOW_SUBJECTS = ("fleet", "gcs")
SLOW_MODULES = ("test_chaos_killed_servers.py", "test_docs_fleet_commands.py")


def _keep_xdist_groups(config, items) -> None:
    """``--dist loadgroup`` sends each ``xdist_group`` to one worker by a "@group" suffix that
    xdist (3.8) puts on ``item._nodeid``; pytest 9.2 keeps node ids in ``item._id`` instead, so
    the suffix never reaches the scheduler and a group's tests spread over every worker (each
    then starts its own module vehicles and cluster: pytest-dev/pytest-xdist#1386). The suffix
    is put where pytest 9.2 reads it; older pytest (no ``coerce_node_id``) needs nothing."""
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodes import coerce_node_id
    except ImportError:
        return
    for item in items:
        names = sorted(
            {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
        )
        if names and not item.nodeid.endswith("@" + "_".join(names)):
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(names)}")


def pytest_collection_modifyitems(config, items):
    _keep_xdist_groups(config, items)
    for item in items:
        path = Path(str(item.fspath))
        callspec = getattr(item, "callspec", None)
        real = REAL_FIXTURES & set(getattr(item, "fixturenames", ())) or (
            callspec is not None and "arducopter" in callspec.params.values()
        )
        if path.parent.name in SLOW_SUBJECTS or path.name in SLOW_MODULES or real:
            continue
        item.add_marker(pytest.mark.quick)
