"""Managed SITLs with the built-in vehicle and real processes."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pymavlink import mavutil

from conftest import start_sim, wait_for
from sitlpool import pidfiles, procinfo
from sitlpool.config import load_settings
from sitlpool.errors import KillRefused, ProcessError, SitlpoolError
from sitlpool.instances import ports
from sitlpool.leases import LeasePool
from sitlpool.ports import probe
from sitlpool.process import ManagedManager, ManagedSitl, Status, kill_instance, reap_orphans


@pytest.fixture
def settings(env):
    return load_settings()


@pytest.fixture(autouse=True)
def reap_after(request, env):
    """Launchers killed by a test leave orphans by design: reap them when the test ends."""
    yield  # torn down after procs, so the launchers are dead by now
    reap_orphans(load_settings())


@pytest.fixture
def manager(settings):
    m = ManagedManager(settings)
    yield m
    m.close_all()


def test_launch_ready_and_kill(manager, settings, instances):
    unspawned = ManagedSitl(None, "not yet", settings=settings)
    with pytest.raises(Exception, match="not running"):
        unspawned.endpoint("serial0")
    assert unspawned.status is None and unspawned.pid is None and not unspawned.ready
    h = manager.start("hop", speedup=5)
    assert h.ready and h.alive and h.running and not h.dead and h.status is None
    assert h.instance == instances[0] and h.ports == ports(instances[0])
    assert h.on_localhost and h.host_id == "localhost"
    assert h.endpoint("serial1") == f"tcp:127.0.0.1:{ports(instances[0]).serial1}"
    with pytest.raises(KeyError) as e:  # a KeyError, and a SitlpoolError with a readable message
        h.endpoint("serial9")
    assert str(e.value) == "unknown endpoint 'serial9': use one of serial0, serial1, serial2"
    rec = pidfiles.read(settings.data_dir, h.instance)
    assert (rec.pid, rec.pgid, rec.holder_pid) == (h.pid, h.pid, os.getpid())
    assert rec.start_ticks == procinfo.start_ticks(h.pid)
    assert os.getpgid(h.pid) == h.pid, "own process group"
    assert procinfo.ppid(h.pid) == os.getpid(), "the launcher stays the parent"
    assert h.lease and LeasePool.from_settings(settings).holder(h.instance).pid == os.getpid()
    assert (settings.data_dir / "sessions" / str(h.instance) / "eeprom.bin").exists()
    import json
    import subprocess
    import sys

    doc = json.loads(
        subprocess.run(
            [sys.executable, "-m", "sitlpool", "status", "--json"], capture_output=True, text=True, check=True
        ).stdout
    )
    [held] = doc["held"]
    assert held["sitl"] == {"pid": h.pid, "binary": sys.executable, "alive": True}
    h.kill(wait=True)
    assert h.dead and h.status.success and "stopped by request" in h.status.reason
    assert not procinfo.is_alive(h.pid)
    assert pidfiles.read(settings.data_dir, h.instance) is None
    assert LeasePool.from_settings(settings).holder(h.instance) is None
    with pytest.raises(Exception, match="not running"):
        h.endpoint("serial0")


def test_early_exit_reports_code_and_stderr(manager, settings, instances):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # the probe would skip a taken instance, so take the port only once the lease is held
    orig = ManagedSitl._check

    def check_then_steal(self, n):
        why = orig(self, n)
        s.bind(("0.0.0.0", ports(n).serial0))
        s.listen()
        return why

    ManagedSitl._check = check_then_steal
    try:
        with pytest.raises(ProcessError) as e:
            manager.start("doomed", instance=instances[0])
    finally:
        ManagedSitl._check = orig
        s.close()
    msg = str(e.value)
    assert "exited with code 1 before it was ready" in msg
    assert f"bind failed on port {ports(instances[0]).serial0}" in msg
    assert LeasePool.from_settings(settings).holder(instances[0]) is None
    assert pidfiles.read(settings.data_dir, instances[0]) is None
    assert manager.processes == {}


def mute_sitl(tmp_path) -> Path:
    """A "SITL" that listens on SERIAL0, accepts its client and never speaks MAVLink."""
    fake = tmp_path / "mute-sitl"
    fake.write_text(
        f"#!{sys.executable}\nimport socket, sys, time\n"
        "n = int(sys.argv[sys.argv.index('-I') + 1]); s = socket.socket()\n"
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('0.0.0.0', 5760 + 10 * n)); s.listen(); c = s.accept(); time.sleep(3600)\n"
    )
    fake.chmod(0o755)
    return fake


@pytest.mark.below_256  # a configured binary, even a fake one, runs only below 256
def test_ready_timeout_leaves_nothing(manager, settings, instances, tmp_path, monkeypatch):
    settings.sitl_binary = mute_sitl(tmp_path)
    with pytest.raises(ProcessError, match="no HEARTBEAT .* within 1s; it was killed and its lease released"):
        manager.start("mute", ready_timeout=1)
    assert LeasePool.from_settings(settings).holder(instances[0]) is None
    assert pidfiles.instances_with_records(settings.data_dir) == []
    assert not any("mute-sitl" in " ".join(procinfo.cmdline(p)) for p in procinfo.group_members(os.getpgrp()))


def test_unwritable_data_dir_is_a_clear_error(manager, settings, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    settings.data_dir = blocker  # sessions/<n>/ cannot be made below a file
    with pytest.raises(ProcessError, match="cannot create the SITL's directory .*SITLPOOL_DATA_DIR"):
        manager.start("x")
    assert LeasePool.from_settings(settings).status() == []


def test_bad_binary_is_a_clear_error(manager, settings, instances):
    settings.sitl_binary = Path("/nonexistent/arducopter")
    with pytest.raises(ProcessError, match="not an executable file; fix SITLPOOL_SITL_BINARY"):
        manager.start("x")
    assert LeasePool.from_settings(settings).status() == []


def test_tree_defaults_for_a_real_binary(tmp_path, settings):
    from sitlpool.process.binaries import tree_defaults

    tree = tmp_path / "ardupilot"
    b = tree / "build" / "sitl" / "bin" / "arducopter"
    b.parent.mkdir(parents=True)
    b.write_text("")
    parm = tree / "Tools" / "autotest" / "default_params" / "copter.parm"
    parm.parent.mkdir(parents=True)
    parm.write_text("FRAME_CLASS 1\n")
    assert tree_defaults(b, "quad") == [parm]
    settings.sitl_binary = b
    h = ManagedSitl(None, "x", settings=settings)
    assert h._command(44)[-3:] == ["--defaults", str(parm), "-w"]
    settings.sitl_defaults = "/a.parm,/b.parm"
    assert "/a.parm,/b.parm" in ManagedSitl(None, "y", settings=settings)._command(44)


def test_death_is_seen_and_reported_once(manager, settings):
    a = manager.start("a", speedup=5)
    b = manager.start("b", speedup=5)
    dead_seen = []
    manager._on_dead = dead_seen.append
    os.kill(a.pid, signal.SIGKILL)
    got = manager.wait_termination(10)
    assert list(got) == [a]
    st = got[a]
    assert isinstance(st, Status) and st.signalled and st.signal == signal.SIGKILL and not st.success
    assert a.dead and a.status == st and dead_seen == [a]
    assert manager.wait_termination(0) == {}, "reported once"
    assert "a" not in manager.processes and "b" in manager.processes
    assert LeasePool.from_settings(settings).holder(a.instance) is None
    b.kill(wait=True)
    assert list(manager.wait_termination(5)) == [b]


LAUNCHER = """
import sys, time
from sitlpool.process import ManagedSitl
h = ManagedSitl(None, "orphan-maker", speedup=5)
h.spawn()   # not waited for: the SITL sits in accept(), where real SITL never checks its parent
print(h.instance, h.pid, flush=True)
time.sleep(3600)
"""

# A launcher without a parent-death signal (an older sitlpool, or another tool writing our
# pid files): its SITL, waiting for its first client, outlives it. The reaper's case.
OLD_LAUNCHER = """
import os, subprocess, sys, time
from sitlpool import pidfiles, procinfo
from sitlpool.config import load_settings
from sitlpool.leases import LeasePool
from sitlpool.process.binaries import builtin_command
s = load_settings()
lease = LeasePool.from_settings(s).acquire("old launcher")
n = lease.instance
cwd = pidfiles.session_dir(s.data_dir, n); cwd.mkdir(parents=True, exist_ok=True)
argv = (sys.argv[1:] or builtin_command()) + ["-I", str(n), "--model", "quad", "--speedup", "5"]
p = subprocess.Popen(argv, cwd=cwd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
pidfiles.write(s.data_dir, pidfiles.PidRecord(instance=n, pid=p.pid, pgid=p.pid, start_ticks=procinfo.start_ticks(p.pid),
               binary=argv[0], argv=argv, owner="old launcher", holder_pid=os.getpid(), exe=procinfo.exe(p.pid)))
print(n, p.pid, flush=True)
time.sleep(3600)
"""


def launch_waiting_sitl(procs, script: str, env, *args) -> tuple[subprocess.Popen, int, int]:
    """Run a launcher ``script`` until its SITL waits for its first client: the launcher, the
    SITL's instance and pid."""
    launcher = procs.python(script, *args, stdout=subprocess.PIPE, text=True, env=env)
    n, sitl_pid = map(int, launcher.stdout.readline().split())
    wait_for(lambda: probe(ports(n)), what="the SITL to wait for its first client")
    return launcher, n, sitl_pid


def sigkill(p: subprocess.Popen) -> None:
    os.kill(p.pid, signal.SIGKILL)
    p.wait()


def kill_launcher_of_a_waiting_sitl(procs, script: str, env, *args) -> tuple[int, int]:
    """``launch_waiting_sitl``, then SIGKILL the launcher: the SITL's instance and pid."""
    launcher, n, sitl_pid = launch_waiting_sitl(procs, script, env, *args)
    sigkill(launcher)
    return n, sitl_pid


def test_sitl_dies_with_its_killed_launcher(procs, env, settings):
    n, sitl_pid = kill_launcher_of_a_waiting_sitl(procs, LAUNCHER, env)
    wait_for(lambda: not procinfo.is_alive(sitl_pid), what="the SITL to die with its launcher")
    assert [(r.instance, r.action, r.pid) for r in reap_orphans(settings)] == [(n, "gone", sitl_pid)]
    assert reap_orphans(settings) == []


def test_orphan_of_a_killed_launcher_is_reaped(procs, env, settings):
    n, sitl_pid = kill_launcher_of_a_waiting_sitl(procs, OLD_LAUNCHER, env)
    time.sleep(0.2)
    assert procinfo.is_alive(sitl_pid), "a SITL waiting for its first client outlives its launcher"
    reports = reap_orphans(settings)
    assert [(r.instance, r.action, r.pid, r.signalled) for r in reports] == [(n, "terminated", sitl_pid, [sitl_pid])]
    assert "orphan" in reports[0].reason
    wait_for(lambda: not procinfo.is_alive(sitl_pid), what="orphan gone")
    assert pidfiles.read(settings.data_dir, n) is None
    assert reap_orphans(settings) == []


def test_live_holders_sitl_is_never_reaped(procs, env, settings):
    launcher = procs.python(LAUNCHER, stdout=subprocess.PIPE, text=True, env=env)
    n, sitl_pid = map(int, launcher.stdout.readline().split())
    reports = reap_orphans(settings)
    assert [(r.instance, r.action) for r in reports] == [(n, "left alone")]
    assert f"pid {launcher.pid}" in reports[0].reason
    assert procinfo.is_alive(sitl_pid)
    assert pidfiles.read(settings.data_dir, n).pid == sitl_pid
    with pytest.raises(KillRefused, match=f"leased to sitlpool orphan-maker pid {launcher.pid}"):
        kill_instance(n, settings=settings)
    assert procinfo.is_alive(sitl_pid)


def test_recycled_pid_is_left_alone(procs, settings, instances):
    bystander = procs.python("import time; time.sleep(3600)")
    pidfiles.write(
        settings.data_dir,
        pidfiles.PidRecord(
            instance=instances[0],
            pid=bystander.pid,
            pgid=bystander.pid,
            start_ticks=procinfo.start_ticks(bystander.pid) + 1,
            binary="arducopter",
        ),
    )
    [r] = reap_orphans(settings)
    assert r.action == "recycled pid" and "left it alone" in r.reason
    time.sleep(0.1)
    assert bystander.poll() is None


def test_crashed_launcher_never_strands_the_instance(procs, env, settings, instances):
    """An acquire that finds the ports held by the SITL of its own pid file reaps it at once."""
    n, sitl_pid = kill_launcher_of_a_waiting_sitl(procs, OLD_LAUNCHER, env)
    m = ManagedManager(settings)
    try:
        h = m.start("next", instance=n, speedup=5)
        assert h.instance == n and h.pid != sitl_pid
        assert not procinfo.is_alive(sitl_pid)
    finally:
        m.close_all()


def test_kill_instance(procs, settings, instances, tmp_path):
    n = instances[2]
    stray = start_sim(procs, tmp_path / "stray", n)  # a SITL someone started with no lease or pid file
    wait_for(
        lambda: (
            ports(n).serial0
            in [s.local_port for s in __import__("sitlpool.ports", fromlist=["x"]).read_sockets(("tcp",))]
        )
    )
    other = socket.socket()
    other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    other.bind(("0.0.0.0", ports(n).serial2))  # not a SITL: reported, never killed
    other.listen()
    seen_busy = []

    def try_lease_during_kill():
        # while kill_instance runs, nobody else may lease the instance
        try:
            LeasePool.from_settings(settings, check=False).acquire("intruder", instance=n)
            seen_busy.append(False)
        except Exception:
            seen_busy.append(True)

    import threading

    orig = procinfo.terminate

    def slow_terminate(*a, **kw):
        t = threading.Thread(target=try_lease_during_kill)
        t.start()
        t.join()
        return orig(*a, **kw)

    procinfo.terminate = slow_terminate
    try:
        report = kill_instance(n, settings=settings)
    finally:
        procinfo.terminate = orig
    assert seen_busy == [True]
    assert stray.wait(10) is not None
    assert any(f"pid {stray.pid}" in k and "its group" in k for k in report.killed), report
    assert report.signalled == [stray.pid]
    assert any(f"tcp:{ports(n).serial2}" in s for s in report.still_busy)
    assert any(f"pid {os.getpid()}" in s for s in report.left_alone)
    other.close()
    with pytest.raises(KillRefused, match="reserved"):
        kill_instance(0, settings=settings)
    with pytest.raises(KillRefused, match="outside the pool"):
        kill_instance(instances[-1] + 100, settings=settings)


def test_real_binary_refuses_instances_above_255(env, data_dir, instances):
    """ArduPilot SITL keeps -I in 8 bits (`-I 300` binds instance 44's ports): a real binary
    is never launched above 255, asked for by number or met in a pool scan; nothing is left."""
    high = [n for n in instances if n > 255]
    assert high, "this test needs the ordinary (1000+) test instances"
    s = load_settings(sitl_binary="/bin/true")
    m = ManagedManager(s, LeasePool(s.lock_dir, high, check=False))
    with pytest.raises(ProcessError, match=rf"instance {high[0]} is above 255: .*instance {high[0] % 256}'s ports"):
        m.start("explicit", instance=high[0])
    # a pool with no instance below 256 is refused at once, naming the setting (it used to
    # say "no free instance: N with ports taken", pointing at free ports)
    with pytest.raises(ProcessError, match="has no instance below 256.*set SITLPOOL_POOL"):
        m.start("scan")
    assert LeasePool(s.lock_dir, high, check=False).status() == []
    assert not (data_dir / "sessions").exists() or not any((data_dir / "sessions").iterdir())


def test_a_model_runs_the_binary_that_flies_it(real_plane, env, instances, monkeypatch, data_dir):
    """``start(model="plane")`` with ArduCopter configured launches the arduplane beside it
    (as open_sitl does); the built-in vehicle refuses a plane before any lease is taken."""
    monkeypatch.setenv("SITLPOOL_SITL_BINARY", str(real_plane.parent / "arducopter"))
    m = ManagedManager(load_settings())
    try:
        h = m.start("plane", model="plane", speedup=5)
        assert Path(h.argv[0]).name == "arduplane" and h.model == "plane"
        hb = h.link.vehicle
        assert hb.vehicle_type == mavutil.mavlink.MAV_TYPE_FIXED_WING
    finally:
        m.close_all()
    monkeypatch.delenv("SITLPOOL_SITL_BINARY")
    builtin = ManagedManager(load_settings())
    with pytest.raises(SitlpoolError, match="copter only.*SITLPOOL_SITL_BINARY"):
        builtin.start("plane", model="plane")
    assert LeasePool.from_settings(load_settings()).status() == []
