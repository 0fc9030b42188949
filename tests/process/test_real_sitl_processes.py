"""The process layer on real ArduPilot SITL (skipped without one): the quirks sitlpool must
handle, managed start/stop, exit with the launcher, pid files, reaping and unmanaged attach."""

import os
import signal
import subprocess
import time

import pytest
from test_managed import LAUNCHER, OLD_LAUNCHER, launch_waiting_sitl, sigkill

from conftest import Gcs, listening, processes_under, wait_for
from sitlpool import pidfiles, procinfo
from sitlpool.config import load_settings
from sitlpool.errors import ProcessError, ResolveError
from sitlpool.instances import ports
from sitlpool.leases import LeasePool
from sitlpool.ports import bound
from sitlpool.process import ManagedManager, ManagedSitl, UnmanagedManager, reap_orphans
from sitlpool.process.binaries import tree_defaults

SPEEDUP = 5


@pytest.fixture
def settings(env, real_copter):
    s = load_settings()
    s.sitl_binary = real_copter
    return s


def test_only_serial0_listens_before_the_first_client(settings, instances):
    h = ManagedSitl(None, "quirk", speedup=SPEEDUP, settings=settings)
    h.spawn()  # no client yet
    try:
        p = ports(h.instance)
        wait_for(lambda: listening(p.serial0), what="SERIAL0 to listen")
        time.sleep(0.5)  # time enough to open the others, if it did
        assert not listening(p.serial1) and not listening(p.serial2)
        assert not bound({("udp", p.rc_in)}), "the RC input is bound only after the first client"
        rec = pidfiles.read(settings.data_dir, h.instance)
        assert (rec.pid, rec.pgid, rec.exe) == (h.pid, h.pid, str(settings.sitl_binary))
        assert procinfo.ppid(h.pid) == os.getpid() and os.getpgid(h.pid) == h.pid
        assert h.wait_running(30)  # our link is its first client: now it boots
        wait_for(lambda: listening(p.serial1) and listening(p.serial2), what="SERIAL1/2 after the first client")
    finally:
        h.kill(wait=True)
    assert h.status.success and pidfiles.read(settings.data_dir, h.instance) is None
    assert LeasePool.from_settings(settings).holder(h.instance) is None


def test_sigterm_before_setup_kills_it_after_setup_it_exits_0(settings, instances):
    early = ManagedSitl(None, "early", speedup=SPEEDUP, settings=settings)
    early.spawn()
    wait_for(lambda: listening(ports(early.instance).serial0), what="the SITL to wait for its first client")
    early.kill(wait=True)  # before its setup: SIGTERM kills it outright (143)
    assert early.status.signalled and early.status.signal == signal.SIGTERM
    assert early.status.success and "stopped by request" in early.status.reason
    m = ManagedManager(settings)
    try:
        late = m.start("late", speedup=SPEEDUP, ready_timeout=30)
        time.sleep(4)  # setup ends ~2.5 s after the first client; the HEARTBEAT came ~1 s after it
        late.kill(wait=True)
        assert late.status.exited and late.status.exit_code == 0 and late.status.success, late.status
    finally:
        m.close_all()
    for h in (early, late):
        assert pidfiles.read(settings.data_dir, h.instance) is None
        assert LeasePool.from_settings(settings).holder(h.instance) is None


def test_a_launchers_death_while_waiting_for_the_first_client(procs, env, settings, real_copter):
    """Real SITL checks its parent only from its physics loop: waiting for its first client it
    outlives a launcher without a parent-death signal (the reaper's case), never ours."""
    old, n_old, orphan = launch_waiting_sitl(procs, OLD_LAUNCHER, env, real_copter)
    ours, n_ours, tied = launch_waiting_sitl(procs, LAUNCHER, dict(env, SITLPOOL_SITL_BINARY=str(real_copter)))
    sigkill(old)  # both killed only now: a launch on the old one's freed instance would reap its orphan
    sigkill(ours)
    wait_for(lambda: not procinfo.is_alive(tied), what="the SITL of a sitlpool launcher to die with it")
    time.sleep(1)
    assert procinfo.is_alive(orphan), "real SITL waiting for its first client outlives a plain launcher"
    reports = {r.instance: r for r in reap_orphans(settings)}
    assert (reports[n_old].action, reports[n_old].pid) == ("terminated", orphan)  # SIGTERM kills it before setup
    assert reports[n_ours].action == "gone"
    assert not procinfo.is_alive(orphan)
    assert reap_orphans(settings) == []


@pytest.mark.parametrize("how", ["argument", "setting"])
def test_a_missing_defaults_file_is_refused_before_launch(vehicle_binary, env, data_dir, instances, tmp_path, how):
    s = load_settings()
    s.sitl_binary = vehicle_binary
    good = tmp_path / "good.parm"
    good.write_text("RTL_ALT 1500\n")
    missing = tmp_path / "missing.parm"
    kw = {}
    if how == "argument":
        kw["defaults"] = [str(good), str(missing)]
    else:
        s.sitl_defaults = f"{good},{missing}"
    m = ManagedManager(s)
    with pytest.raises(ProcessError, match=f"defaults file {missing} does not exist"):
        m.start("x", **kw)
    assert LeasePool.from_settings(s).status() == [] and not processes_under(data_dir)


def test_tree_defaults_of_the_real_binary_exist(real_copter):
    [parm] = tree_defaults(real_copter, "quad")
    assert parm.is_file() and parm.name == "copter.parm"


def test_attach_to_real_sitl_someone_else_runs(procs, env, settings, instances, tmp_path, real_copter):
    n = instances[0]
    cwd = tmp_path / "theirs"
    cwd.mkdir()
    [parm] = tree_defaults(real_copter, "quad")
    theirs = procs.popen(
        [str(real_copter), "-I", str(n), "--model", "quad", "--speedup", str(SPEEDUP), "--defaults", str(parm), "-w"],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: listening(ports(n).serial0), what="their SITL to wait for its first client")
    m = UnmanagedManager()
    with pytest.raises(
        ResolveError, match=f"waiting for its first client on SERIAL0 \\(tcp:127.0.0.1:{ports(n).serial0}\\)"
    ):
        m.start("early", instance=n, timeout=0.5)
    owner = Gcs(ports(n).serial0)  # its owner's GCS connects: it boots and opens SERIAL1/2
    try:
        assert owner.heartbeat(30)
        h = m.start("watch", instance=n, timeout=20)
        assert h.ready and h.pid == theirs.pid and h.link.endpoint == f"tcp:127.0.0.1:{ports(n).serial1}"
        h.kill(wait=True)
        assert h.dead and h.status.success
        time.sleep(0.3)
        assert theirs.poll() is None, "detaching never signals someone else's SITL"
    finally:
        owner.close()
        m.close_all()
