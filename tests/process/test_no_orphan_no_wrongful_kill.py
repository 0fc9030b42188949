"""Issue 12, the process layer: no orphan, no wrongful kill, no hang, one bad file blocks no one.

Every test here reproduces a failure seen by a hostile user on an earlier version."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from test_managed import mute_sitl

from conftest import listening, processes_under, start_sim, wait_for
from sitlpool import pidfiles, procinfo
from sitlpool.config import load_settings
from sitlpool.errors import ProcessError, ResolveError, SitlpoolError
from sitlpool.instances import ports
from sitlpool.leases import LeasePool
from sitlpool.ports import probe
from sitlpool.process import ManagedManager, UnmanagedManager, kill_instance, reap_orphans


@pytest.fixture
def settings(env):
    return load_settings()


def alive_under(root) -> list[int]:
    return [p for p in processes_under(root) if procinfo.is_alive(p)]


def send_mcp(p: subprocess.Popen, *calls: tuple[str, dict]) -> None:
    """Initialize an MCP stdio server and send tool calls without waiting for any answer."""
    msgs = [
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-03-26",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]
    msgs += [
        {"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": {"name": name, "arguments": args}}
        for i, (name, args) in enumerate(calls)
    ]
    p.stdin.write("".join(json.dumps(m) + "\n" for m in msgs))
    p.stdin.flush()


# ---- 1. a launcher's death never leaves an unrecorded SITL ---------------------------------

DIES_BEFORE_RECORD = """
import os, signal, sys, threading
from sitlpool import pidfiles
from sitlpool.process import ManagedSitl

def die(*a, **kw):  # the launcher is SIGKILLed right after fork/exec, before the pid file is written
    print("forked", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

pidfiles.write = die
h = ManagedSitl(None, "doomed", speedup=5)
t = threading.Thread(target=h.spawn)  # a short-lived worker thread, as anyio's are
t.start(); t.join()
"""


def test_launcher_killed_before_the_pid_file_leaves_no_sitl(procs, env, data_dir, instances, settings):
    launcher = procs.python(DIES_BEFORE_RECORD, stdout=subprocess.PIPE, text=True, env=env)
    assert launcher.stdout.readline() == "forked\n"
    assert launcher.wait(10) == -signal.SIGKILL
    wait_for(lambda: not alive_under(data_dir), what="the unrecorded SITL to die with its launcher")
    assert pidfiles.read(settings.data_dir, instances[0]) is None
    with LeasePool.from_settings(settings).acquire("next", instance=instances[0]) as lease:  # ports probed
        assert lease.instance == instances[0]


SPAWNS_IN_A_THREAD = """
import sys, threading, time
from sitlpool.process import ManagedSitl
h = ManagedSitl(None, "orphan-maker", speedup=5)
t = threading.Thread(target=h.spawn)  # the thread that asked for the launch ends at once
t.start(); t.join()
print(h.instance, h.pid, flush=True)
time.sleep(3600)
"""


def test_sitl_outlives_the_asking_thread_and_dies_with_the_launcher(procs, env, data_dir, settings):
    launcher = procs.python(SPAWNS_IN_A_THREAD, stdout=subprocess.PIPE, text=True, env=env)
    n, sitl_pid = map(int, launcher.stdout.readline().split())
    wait_for(lambda: probe(ports(n)), what="the SITL to wait for its first client")
    time.sleep(0.3)
    assert procinfo.is_alive(sitl_pid), "the SITL must not die with the (finished) thread that asked for it"
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait()
    wait_for(
        lambda: not procinfo.is_alive(sitl_pid), what="the SITL (waiting for its first client) to die with its launcher"
    )
    reports = reap_orphans(settings)
    assert [(r.instance, r.action) for r in reports] == [(n, "gone")]
    assert not probe(ports(n))


# ---- 2. SIGTERM/SIGINT to `sitlpool serve` during an in-flight open_sitl ------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.below_256  # a configured binary, even a fake one, runs only below 256
def test_signal_to_serve_during_open_sitl_kills_that_sitl(procs, env, data_dir, tmp_path, sig):
    e = dict(env, SITLPOOL_SITL_BINARY=str(mute_sitl(tmp_path)), SITLPOOL_READY_TIMEOUT_S="50")
    srv = procs.popen(
        [sys.executable, "-m", "sitlpool", "serve"],
        env=e,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    send_mcp(srv, ("open_sitl", {}))
    sitl = wait_for(lambda: alive_under(data_dir), timeout=20, what="the SITL of the in-flight open_sitl")
    os.kill(srv.pid, sig)
    assert srv.wait(20) == 128 + sig
    wait_for(lambda: not alive_under(data_dir), what=f"the in-flight SITL {sitl} to die with its server")
    assert LeasePool.from_settings(load_settings()).status() == []


@pytest.mark.below_256  # a configured binary, even a fake one, runs only below 256
def test_close_all_kills_in_flight_launches(settings, tmp_path, data_dir):
    settings.sitl_binary = mute_sitl(tmp_path)
    m = ManagedManager(settings)
    errors = []

    def start():
        try:
            m.start("in-flight", ready_timeout=50)
        except SitlpoolError as e:
            errors.append(str(e))

    t = threading.Thread(target=start)
    t.start()
    wait_for(lambda: alive_under(data_dir), what="the launch in flight")
    m.close_all()
    t.join(10)
    assert not t.is_alive() and len(errors) == 1
    assert not alive_under(data_dir)
    assert LeasePool.from_settings(settings).status() == []
    with pytest.raises(ProcessError, match="closed"):
        m.start("after close")


# ---- 3. kill_instance signals only SITL processes -----------------------------------------

SCRIPT = """
import subprocess, sys, time
# a script that starts a SITL without a new session, plus an unrelated server in the same group
sim = subprocess.Popen([sys.executable, "-m", "sitlpool.sim", "-I", sys.argv[1], "--model", "quad"], cwd=sys.argv[2],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
web = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "0"], cwd=sys.argv[2],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(sim.pid, web.pid, flush=True)
time.sleep(3600)
"""


def test_kill_instance_spares_unrelated_members_of_the_group(procs, settings, instances, tmp_path):
    n = instances[1]
    work = tmp_path / "script"
    work.mkdir()
    script = procs.python(SCRIPT, n, work, stdout=subprocess.PIPE, text=True)
    sim_pid, web_pid = map(int, script.stdout.readline().split())
    wait_for(lambda: listening(ports(n).serial0), what="the script's SITL to listen")
    assert os.getpgid(sim_pid) == os.getpgid(web_pid) == script.pid
    report = kill_instance(n, settings=settings)
    wait_for(lambda: not procinfo.is_alive(sim_pid), what="the SITL to die")
    time.sleep(0.2)
    assert procinfo.is_alive(web_pid), "an unrelated process of the SITL's group was killed"
    assert script.poll() is None, "the script that started the SITL was killed"
    assert report.signalled == [sim_pid]
    assert f"pid {sim_pid}" in report.describe()


# ---- 4. the reaper never trusts a pid file's group ----------------------------------------


def forge(settings, n, pid, pgid, binary=sys.executable, ticks=None):
    pidfiles.write(
        settings.data_dir,
        pidfiles.PidRecord(
            instance=n,
            pid=pid,
            pgid=pgid,
            start_ticks=procinfo.start_ticks(pid) if ticks is None else ticks,
            binary=binary,
            argv=[binary],
            owner="forger",
        ),
    )


REAP = """
import json
from sitlpool.process import reap_orphans
print(json.dumps([r.as_dict() for r in reap_orphans()]))
"""


def test_forged_pid_files_are_dropped_not_obeyed(procs, env, settings, instances, tmp_path):
    sim = start_sim(procs, tmp_path / "victim", instances[5])  # a SITL leading its own group
    wait_for(lambda: listening(ports(instances[5]).serial0), what="the victim SITL")
    bystander = procs.python("import time; time.sleep(3600)")
    cases = {
        instances[0]: (sim.pid, 0, sys.executable),  # pgid 0: killpg(0) is the reaper's own group
        instances[1]: (1, 1, procinfo.exe(1) or "/sbin/init"),  # pid 1, with its real start time
        instances[2]: (sim.pid, -sim.pid, sys.executable),  # a negative group
        instances[3]: (sim.pid, bystander.pid, sys.executable),  # someone else's group
        instances[4]: (sim.pid, sim.pid, "/usr/bin/arducopter"),  # the executable differs from the record
    }
    for n, (pid, pgid, binary) in cases.items():
        forge(settings, n, pid, pgid, binary)
    # reaped from a process of its own: a reaper obeying "pgid 0" would kill its own group
    reaper = procs.python(REAP, stdout=subprocess.PIPE, text=True, env=env)
    out = reaper.stdout.read()
    assert reaper.wait(30) == 0, f"the reaper died (exit {reaper.returncode}): it signalled its own group"
    reports = {r["instance"]: r for r in json.loads(out)}
    assert set(reports) == set(cases)
    for n, r in reports.items():
        assert r["action"] == "dropped" and r["signalled"] == [], r
        assert pidfiles.read(settings.data_dir, n) is None
    assert "pid 1" in reports[instances[1]]["reason"]
    assert "executable" in reports[instances[4]]["reason"]
    time.sleep(0.2)
    assert sim.poll() is None and bystander.poll() is None, "a forged record was obeyed"


OWN_GROUP = """
import json, subprocess, sys, time
from sitlpool import pidfiles, procinfo
from sitlpool.process import reap_orphans
# a SITL in this process's group, and a record naming this group as the SITL's
sim = subprocess.Popen([sys.executable, "-m", "sitlpool.sim", "-I", sys.argv[1], "--model", "quad"], cwd=sys.argv[2],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(0.5)
pidfiles.write(sys.argv[3], pidfiles.PidRecord(instance=int(sys.argv[1]), pid=sim.pid, pgid=procinfo.pgid(sim.pid),
               start_ticks=procinfo.start_ticks(sim.pid), binary=sys.executable, argv=[sys.executable]))
r = reap_orphans()
print(json.dumps([x.as_dict() for x in r]), sim.poll(), flush=True)
sim.kill(); sim.wait()
"""


def test_a_record_naming_the_reapers_own_group_is_dropped(procs, env, settings, instances, tmp_path):
    (tmp_path / "w").mkdir()
    p = procs.python(
        OWN_GROUP, instances[0], tmp_path / "w", settings.data_dir, stdout=subprocess.PIPE, text=True, env=env
    )
    out = p.stdout.readline()
    assert out, f"the reaper killed its own group (exit {p.wait()})"
    reports, sim_code = out.rsplit(" ", 1)
    [r] = json.loads(reports)
    assert r["action"] == "dropped" and sim_code.strip() == "None"


# ---- 5. garbage in sessions/ never aborts reaping -----------------------------------------


def test_garbage_in_sessions_is_skipped_and_reported(procs, settings, instances, tmp_path):
    root = settings.data_dir / "sessions"
    # a real orphan: a SITL waiting for its first client, whose launcher is gone
    n = instances[5]
    orphan = start_sim(procs, pidfiles.session_dir(settings.data_dir, n), n)
    wait_for(lambda: listening(ports(n).serial0), what="the orphan")
    forge(settings, n, orphan.pid, orphan.pid)
    (root / str(instances[0]) / "sitl.pid").mkdir(parents=True)  # a directory
    (root / "99999").mkdir()
    (root / "99999" / "sitl.pid").write_text("{}")
    (root / "not-a-number").mkdir()
    (root / str(instances[1])).mkdir()
    os.mkfifo(root / str(instances[1]) / "sitl.pid")  # reading it would block forever
    (root / str(instances[2])).mkdir()
    (root / str(instances[2]) / "sitl.pid").write_bytes(b"\xff\x00garbage")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    bystander = procs.python("import time; time.sleep(3600)")
    pidfiles.write(
        elsewhere.parent,
        pidfiles.PidRecord(  # a valid-looking record behind a symlinked session dir
            instance=instances[3],
            pid=bystander.pid,
            pgid=bystander.pid,
            start_ticks=procinfo.start_ticks(bystander.pid),
            binary=sys.executable,
            argv=[sys.executable],
        ),
    )
    os.replace(pidfiles.session_dir(elsewhere.parent, instances[3]) / "sitl.pid", elsewhere / "sitl.pid")
    (root / str(instances[3])).symlink_to(elsewhere)
    (root / str(instances[4])).mkdir()
    (root / str(instances[4]) / "sitl.pid").symlink_to("/etc/hostname")
    done = []
    t = threading.Thread(target=lambda: done.append(reap_orphans(settings)), daemon=True)
    t.start()
    t.join(20)
    assert done, "reaping hung"
    reports = done[0]
    by = {r.instance: r for r in reports if r.instance is not None}
    assert by[n].action in ("terminated", "killed") and by[n].pid == orphan.pid
    assert orphan.wait(10) is not None
    skipped = " | ".join(r.reason for r in reports if r.action == "skipped")
    for bad in (
        f"{instances[0]}/sitl.pid",
        "99999",
        "not-a-number",
        f"{instances[1]}/sitl.pid",
        f"sessions/{instances[3]}",
        f"{instances[4]}/sitl.pid",
    ):
        assert bad in skipped, (bad, skipped)
    assert by[instances[2]].action in ("removed", "skipped")
    assert (root / str(instances[3])).is_symlink() and (elsewhere / "sitl.pid").exists(), "a symlink is never followed"
    assert bystander.poll() is None
    assert os.path.exists("/etc/hostname")


def test_launch_never_goes_through_a_symlinked_session_dir(settings, instances, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = settings.data_dir / "sessions"
    root.mkdir()
    (root / str(instances[0])).symlink_to(elsewhere)
    with pytest.raises(SitlpoolError, match=f"cannot use instance {instances[0]}'s directory: .* is a symlink"):
        ManagedManager(settings).start("x", instance=instances[0])
    assert list(elsewhere.iterdir()) == []
    assert LeasePool.from_settings(settings).status() == []


# ---- 6. ManagedManager.start never hangs when something fails after Popen -----------------


def start_in_thread(m, *a, **kw):
    out = []

    def run():
        try:
            out.append(m.start(*a, **kw))
        except BaseException as e:  # noqa: BLE001 - reported below
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(15)
    assert not t.is_alive(), "ManagedManager.start hung"
    return out[0]


@pytest.mark.parametrize("how", ["pid file is a directory", "disk full"])
def test_failure_after_popen_is_one_line_and_leaves_nothing(settings, instances, data_dir, how):
    n = instances[0]
    d = pidfiles.session_dir(settings.data_dir, n)
    d.mkdir(parents=True)
    orig_open_new = pidfiles.open_new
    if how == "disk full":
        # the temp record is written to /dev/full, where every write fails with ENOSPC (a
        # symlink to it no longer works: a launch never writes through a symlink)
        def open_full(path, dir_fd=None):
            fd = orig_open_new(path, dir_fd=dir_fd)
            if str(path).endswith(".tmp"):
                full = os.open("/dev/full", os.O_WRONLY | os.O_CLOEXEC)
                os.dup2(full, fd)
                os.close(full)
            return fd

        pidfiles.open_new = open_full
    else:
        (d / "sitl.pid").mkdir()
    m = ManagedManager(settings)
    signalled = []
    orig = procinfo.signal_group
    procinfo.signal_group = lambda pg, sig: signalled.append((pg, procinfo.is_alive(pg))) or orig(pg, sig)
    try:
        e = start_in_thread(m, "x", instance=n)
    finally:
        procinfo.signal_group = orig
        pidfiles.open_new = orig_open_new
    assert isinstance(e, ProcessError), e
    msg = str(e)
    assert "\n" not in msg and "pid file" in msg and str(d) in msg
    assert all(alive for _, alive in signalled), f"a reaped pid was signalled: {signalled}"
    assert not alive_under(data_dir)
    assert [p.name for p in d.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()] == []
    assert LeasePool.from_settings(settings).status() == []
    assert m.processes == {}


# ---- 11. stderr and attach arguments ------------------------------------------------------


@pytest.mark.below_256  # a configured binary, even a fake one, runs only below 256
def test_stderr_control_bytes_never_reach_the_error(settings, instances, tmp_path):
    fake = tmp_path / "noisy-sitl"
    fake.write_text(
        f"#!{sys.executable}\nimport sys\n"
        "sys.stderr.buffer.write(b'\\x1b[31mred\\x1b[0m \\x07bell \\x1b]0;title\\x07 nul\\x00 c1\\xc2\\x9b2J\\r\\n"
        "bind failed\\n')\nsys.exit(1)\n"
    )
    fake.chmod(0o755)
    settings.sitl_binary = fake
    with pytest.raises(ProcessError) as e:
        ManagedManager(settings).start("noisy")
    msg = str(e.value)
    assert "red" in msg and "bind failed" in msg
    bad = [c for c in msg if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) < 0xA0]
    assert bad == [], repr(msg)
    assert "title" not in msg, "an OSC escape sequence's text is part of the sequence"


@pytest.mark.parametrize("n", [-3, 10**6])
def test_attach_out_of_range_instance_is_a_clear_error(env, n):
    m = UnmanagedManager()
    with pytest.raises(
        SitlpoolError, match=f"^instance {n} (is negative|would use port .*); attach to an instance from 0 to"
    ):
        m.start("x", instance=n, timeout=5)
    assert m.processes == {}


def test_attach_to_a_sitl_waiting_for_its_first_client_says_what_to_do(procs, env, instances, tmp_path):
    n = instances[0]
    start_sim(procs, tmp_path / "waiting", n)
    wait_for(lambda: listening(ports(n).serial0), what="the SITL to wait for its first client")
    with pytest.raises(ResolveError) as e:
        UnmanagedManager().start("x", instance=n, timeout=0.5)
    msg = str(e.value)
    assert "waiting for its first client on SERIAL0" in msg and f"tcp:127.0.0.1:{ports(n).serial0}" in msg
    assert "serial=" not in msg and "'serial0'" not in msg
