"""Every managed flight's logs are kept: when its handle is stopped, when its SITL dies, and
when an orphan is reaped, its DataFlash logs (and its .tlog) move whole into the log store
with a record of the session that flew them; a failure to move leaves them in place."""

import logging
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import wait_for
from sitlpool import pidfiles
from sitlpool.config import load_settings
from sitlpool.flight import Flight
from sitlpool.logs import LogReader, LogStore
from sitlpool.process import ManagedManager, reap_orphans

REAL_LOG = Path(__file__).resolve().parents[3] / "shared" / "logs" / "copter-hop.BIN"
OWNER = "sitlpool session f391b1 (hop-test)"


@pytest.fixture
def settings(env):
    return load_settings()


@pytest.fixture
def manager(settings):
    m = ManagedManager(settings)
    yield m
    m.close_all()


def logs_in(d: Path) -> list[str]:
    try:
        return sorted(n for n in os.listdir(d) if n.upper().endswith(".BIN") or n.endswith(".tlog"))
    except FileNotFoundError:
        return []


def check_record(r, h, settings, kind: str) -> None:
    assert r.kind == kind and r.managed and not r.pinned
    assert (r.session, r.label) == ("f391b1", "hop-test")
    assert r.holder == f"{OWNER} pid {os.getpid()}"
    assert (r.instance, r.model, r.binary) == (h.instance, "quad", "sitlpool.sim")
    assert r.binary_version == "4.7.0-dev (90700977)", "from the vehicle's AUTOPILOT_VERSION"
    assert h.started_at is not None and r.start == h.started_at <= r.end <= time.time()
    p = Path(r.path)
    assert p.is_file() and p.stat().st_size == r.size > 0
    assert p.is_relative_to(settings.data_dir / "logs" / "f391b1")
    assert LogStore(settings.data_dir).get(r.id).path == r.path


def test_a_flown_sessions_logs_are_kept_when_it_is_stopped(manager, settings):
    h = manager.start("hop", speedup=5, owner=OWNER, tlog=True)
    logs_dir = h.cwd / "logs"
    f = Flight(h.link)
    f.arm_when_ready(60)
    f.takeoff(3)
    wait_for(lambda: (h.link.vehicle.rel_alt or 0) > 2, 30, what="the climb")
    live = h.current_log()
    f.land()
    wait_for(lambda: not h.link.vehicle.armed, 60, what="landed and disarmed")
    h.kill(wait=True)
    kinds = {r.kind: r for r in h.kept_logs}
    assert set(kinds) <= {"bin", "tlog"} and "tlog" in kinds
    check_record(kinds["tlog"], h, settings, "tlog")
    assert logs_in(logs_dir) == [], "the source directory is left empty"
    listed = {r.id for r in LogStore(settings.data_dir).list(session="f391b1")}
    assert listed == {r.id for r in h.kept_logs}
    assert h.current_log() is None, "no live log once it ended"
    if "bin" not in kinds:
        pytest.skip("the built-in vehicle wrote no DataFlash log (not wired yet): the .tlog was kept")
    assert live is not None and live.name.endswith(".BIN"), "the live log, while it flew"
    check_record(kinds["bin"], h, settings, "bin")
    assert "CTUN" in LogReader(kinds["bin"].path).describe()["types"]


def test_the_logs_of_a_sitl_that_died_are_kept(manager, settings):
    h = manager.start("doomed", speedup=5, owner=OWNER, tlog=True)
    wait_for(lambda: h.link.autopilot_version is not None, 10, what="AUTOPILOT_VERSION")
    Flight(h.link).arm_when_ready(60)
    time.sleep(0.5)
    live = h.current_log()  # None while the built-in vehicle wrote no DataFlash log
    os.kill(h.pid, signal.SIGKILL)  # mid-write
    assert h.join(15)
    assert h.status.signalled and not h.status.success
    kinds = {r.kind: r for r in h.kept_logs}
    assert set(kinds) == ({"bin", "tlog"} if live else {"tlog"})
    for kind, r in kinds.items():
        check_record(r, h, settings, kind)
    assert logs_in(h.cwd / "logs") == []
    if live:
        assert LogReader(kinds["bin"].path).describe()["messages"] > 0, "a log cut by a SIGKILL reads up to the cut"


def test_a_log_not_moved_stays_in_place_with_one_line(manager, settings, caplog):
    (settings.data_dir / "logs").write_text("in the way")  # the store cannot be made: as a full disk, a failed move
    h = manager.start("stuck", speedup=5, owner=OWNER, tlog=True)
    with caplog.at_level(logging.WARNING, logger="sitlpool.logs"):
        h.kill(wait=True)
    assert h.kept_logs == []
    left = logs_in(h.cwd / "logs")
    assert len(left) == 1 and left[0].endswith(".tlog") and (h.cwd / "logs" / left[0]).stat().st_size > 0
    [line] = [r.getMessage() for r in caplog.records if r.name == "sitlpool.logs"]
    assert "\n" not in line and f"stays at {h.cwd / 'logs' / left[0]}" in line
    assert h.status.success, "a log not kept never fails the stop"
    # once the store can be written, the next SITL on that instance keeps what was left
    (settings.data_dir / "logs").unlink()
    h2 = manager.start("next", speedup=5, instance=h.instance)
    [r] = LogStore(settings.data_dir).list()
    assert r.instance == h.instance and r.kind == "tlog" and Path(r.path).stat().st_size > 0
    assert logs_in(h2.cwd / "logs") == [] or all(n != left[0] for n in logs_in(h2.cwd / "logs"))


LAUNCHER = """
import sys, time
from sitlpool.process import ManagedManager
h = ManagedManager().start("orphan-maker", speedup=5, owner=sys.argv[1], tlog=True)
h.link.wait(lambda v: v.mode is not None, 10)
print(h.instance, h.pid, h.cwd, flush=True)
time.sleep(3600)
"""


def test_the_logs_of_a_killed_launchers_sitl_are_kept_by_the_reaper(procs, env, settings):
    launcher = procs.python(LAUNCHER, OWNER, stdout=subprocess.PIPE, text=True, env=env)
    n, sitl_pid, cwd = launcher.stdout.readline().split()
    n, cwd = int(n), Path(cwd)
    shutil.copy(REAL_LOG, cwd / "logs" / "00000001.BIN")  # the log it was writing
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait()
    wait_for(lambda: not os.path.exists(f"/proc/{sitl_pid}/cwd"), what="the SITL to die with its launcher")
    assert LogStore(settings.data_dir).list() == [], "nothing kept by a dead launcher"
    reports = reap_orphans(settings)
    assert [(r.instance, r.action) for r in reports] == [(n, "gone")]
    recs = {r.kind: r for r in LogStore(settings.data_dir).list()}
    assert set(recs) == {"bin", "tlog"}
    b = recs["bin"]
    assert (b.session, b.label, b.instance, b.model, b.binary) == ("f391b1", "hop-test", n, "quad", "sitlpool.sim")
    assert b.size == REAL_LOG.stat().st_size and Path(b.path).read_bytes() == REAL_LOG.read_bytes()
    assert logs_in(cwd / "logs") == []


OLD_LAUNCHER = """
import os, subprocess, sys, time
from sitlpool import pidfiles, procinfo
from sitlpool.config import load_settings
from sitlpool.leases import LeasePool
from sitlpool.process.binaries import builtin_command
s = load_settings()
lease = LeasePool.from_settings(s).acquire("old launcher")
n = lease.instance
cwd = pidfiles.session_dir(s.data_dir, n); (cwd / "logs").mkdir(parents=True, exist_ok=True)
argv = builtin_command() + ["-I", str(n), "--model", "quad", "--speedup", "5"]
p = subprocess.Popen(argv, cwd=cwd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
pidfiles.write(s.data_dir, pidfiles.PidRecord(instance=n, pid=p.pid, pgid=p.pid, start_ticks=procinfo.start_ticks(p.pid),
               binary=argv[0], argv=argv, owner=sys.argv[1], holder_pid=os.getpid(), exe=procinfo.exe(p.pid)))
print(n, p.pid, cwd, flush=True)
time.sleep(3600)
"""


def test_a_reaped_orphans_log_is_kept_after_it_is_gone(procs, env, settings):
    launcher = procs.python(OLD_LAUNCHER, OWNER, stdout=subprocess.PIPE, text=True, env=env)
    n, sitl_pid, cwd = launcher.stdout.readline().split()
    n, sitl_pid, cwd = int(n), int(sitl_pid), Path(cwd)
    shutil.copy(REAL_LOG, cwd / "logs" / "00000003.BIN")
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait()
    assert os.path.exists(f"/proc/{sitl_pid}"), "an orphan, alive"
    launched = pidfiles.load(settings.data_dir, n).time
    [r] = reap_orphans(settings)
    assert (r.instance, r.action) == (n, "terminated")
    [b] = LogStore(settings.data_dir).list()
    assert (b.kind, b.session, b.label, b.instance, b.binary) == ("bin", "f391b1", "hop-test", n, "sitlpool.sim")
    assert b.binary_version == "sitlpool.sim", "no link heard its version: the binary's name"
    assert b.start == launched and launched <= b.end <= time.time()
    assert logs_in(cwd / "logs") == []


def test_a_real_arducopters_log_is_kept_with_its_version(real_copter, env, settings, monkeypatch):
    monkeypatch.setenv("SITLPOOL_SITL_BINARY", str(real_copter))
    m = ManagedManager(load_settings())
    try:
        h = m.start("real", owner=OWNER, params={"LOG_DISARMED": 1}, ready_timeout=60, tlog=True)
        wait_for(lambda: h.current_log() is not None, 30, what="real ArduCopter to open a log")
        wait_for(lambda: h.link.autopilot_version is not None, 10, what="AUTOPILOT_VERSION")
        time.sleep(2)
        h.kill(wait=True)
    finally:
        m.close_all()
    bins = [r for r in h.kept_logs if r.kind == "bin"]
    assert bins, f"no BIN kept: {h.kept_logs}"
    b = bins[-1]
    assert (b.session, b.label, b.binary, b.model) == ("f391b1", "hop-test", "arducopter", "quad")
    assert b.binary_version == h.link.autopilot_version and b.binary_version[0].isdigit()
    assert "PARM" in LogReader(b.path).describe()["types"]
    [t] = [r for r in h.kept_logs if r.kind == "tlog"]
    assert t.binary_version == b.binary_version and t.size > 0
    assert logs_in(h.cwd / "logs") == []


def test_a_full_disk_leaves_the_log_whole_in_place(manager, settings, caplog):
    store = settings.data_dir / "logs"
    store.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(store)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs as a full disk here: {r.stderr.strip()}")
    try:
        h = manager.start("full", speedup=5, owner=OWNER)
        src = h.cwd / "logs" / "00000001.BIN"
        src.parent.mkdir(exist_ok=True)
        shutil.copy(REAL_LOG, src)  # 2.4 MB: it does not fit
        with caplog.at_level(logging.WARNING, logger="sitlpool.logs"):
            h.kill(wait=True)
        assert h.kept_logs == []
        assert src.read_bytes() == REAL_LOG.read_bytes(), "whole, where it was"
        [line] = [x.getMessage() for x in caplog.records if x.name == "sitlpool.logs"]
        assert "no space left on device" in line and f"stays at {src}" in line and "\n" not in line
        assert not [p for p in store.rglob("*") if p.is_file()], "no partial copy, no record"
        assert LogStore(settings.data_dir).list() == []
    finally:
        subprocess.run(["umount", "-l", str(store)], check=False)
