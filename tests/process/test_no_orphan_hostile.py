"""A hostile pass over the hardening of issue 12: each test reproduces a way sitlpool still
broke a promise (no orphan, no wrongful kill, no hang, one bad file blocks no one, one-line
errors) after that hardening, found by attacking it as a co-user of a shared data dir would."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import hold_lease, listening, start_sim, wait_for
from sitlpool import pidfiles, procinfo
from sitlpool.config import load_settings
from sitlpool.instances import ports
from sitlpool.process import reap_orphans

CLI = [sys.executable, "-m", "sitlpool.cli"]


@pytest.fixture
def settings(env):
    return load_settings()


REAP = """
import json
from sitlpool.process import reap_orphans
print(json.dumps([r.as_dict() for r in reap_orphans()]))
"""


def run_reaper(procs, env) -> list[dict]:
    """Reap from a process of its own (a regression must fail the test, not kill the runner)."""
    reaper = procs.python(REAP, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out, errtext = reaper.communicate(timeout=60)
    assert reaper.returncode == 0, f"the reaper failed (exit {reaper.returncode}): {errtext.strip()[-500:]}"
    return json.loads(out)


# ---- a pid file of instance n naming the SITL of another instance ----------------------------


def test_record_naming_another_instances_sitl_is_dropped(procs, env, settings, instances, lock_dir, tmp_path):
    """sessions/<n>/sitl.pid forged by a co-user with every field of a live SITL that runs on
    instance m (held by its owner): pid, own group, start ticks, executable. The reaper took
    n's lease (nobody holds n) and killed m's SITL: a leased SITL killed by anyone's reap."""
    n, m = instances[0], instances[1]
    hold_lease(procs, lock_dir, m, "alice (victim)")
    victim = start_sim(procs, tmp_path / "victim", m)
    wait_for(lambda: listening(ports(m).serial0), what="the victim SITL")
    pidfiles.write(
        settings.data_dir,
        pidfiles.PidRecord(
            instance=n,
            pid=victim.pid,
            pgid=victim.pid,
            start_ticks=procinfo.start_ticks(victim.pid),
            binary=sys.executable,
            argv=procinfo.cmdline(victim.pid),
            owner="mallory",
            exe=procinfo.exe(victim.pid),
        ),
    )
    reports = run_reaper(procs, env)
    time.sleep(0.2)
    assert victim.poll() is None, f"the SITL of instance {m} was killed through a record of instance {n}: {reports}"
    (r,) = reports
    assert r["instance"] == n and r["action"] == "dropped" and r["signalled"] == [], r
    assert f"instance {m}" in r["reason"] or "not on instance" in r["reason"], r


# ---- numbers JSON allows and int() refuses ---------------------------------------------------


@pytest.mark.parametrize("field", ["pid", "instance", "holder_pid", "start_ticks"])
def test_pid_file_with_infinite_number_blocks_nothing(procs, env, settings, instances, field):
    """JSON's ``Infinity`` (or 1e400) in a pid file: ``int()`` raises OverflowError, not
    ValueError, which escaped every handler: reap crashed, and every launch whose pool scan
    reached that instance failed with 'cannot convert float infinity to integer'."""
    n = instances[0]
    d = pidfiles.session_dir(settings.data_dir, n)
    d.mkdir(parents=True)
    rec = {"instance": n, "pid": 123456, "pgid": 123456, "start_ticks": 1, "binary": "x"}
    rec[field] = 1e400
    (d / "sitl.pid").write_text(json.dumps(rec))  # json.dumps writes Infinity
    assert pidfiles.read(settings.data_dir, n) is None
    with pytest.raises(pidfiles.BadEntry):
        pidfiles.load(settings.data_dir, n)
    reports = reap_orphans()
    assert [r.action for r in reports] in (["removed"], ["skipped"]), reports


def test_record_written_by_another_user_is_dropped(procs, env, settings, instances, tmp_path):
    """A co-user of a group-shared data dir writes a perfect record for a SITL of ours that
    runs on instance n without a lease: our reaper (root, or us) killed it on their word. A
    launcher writes its SITL's pid file as the SITL's user: a record from another user is dropped."""
    n = instances[0]
    victim = start_sim(procs, tmp_path / "victim", n)
    wait_for(lambda: listening(ports(n).serial0), what="the victim SITL")
    pidfiles.write(
        settings.data_dir,
        pidfiles.PidRecord(
            instance=n,
            pid=victim.pid,
            pgid=victim.pid,
            start_ticks=procinfo.start_ticks(victim.pid),
            binary=sys.executable,
            argv=procinfo.cmdline(victim.pid),
            owner="mallory",
            exe=procinfo.exe(victim.pid),
        ),
    )
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    os.chown(pidfiles.session_dir(settings.data_dir, n) / "sitl.pid", 4242, 4242)
    reports = run_reaper(procs, env)
    time.sleep(0.2)
    assert victim.poll() is None, f"a record written by uid 4242 had our SITL killed: {reports}"
    (r,) = reports
    assert r["action"] == "dropped" and "uid 4242" in r["reason"], r


# ---- what others wrote, shown by `sitlpool status` --------------------------------------------


def test_status_shows_others_text_literally(procs, env, settings, instances, lock_dir):
    """Rich reads a str cell as markup: a co-user's lease owner "[/]" made `sitlpool status`
    exit 1 with a traceback for everyone (MarkupError), "[link=...]" forged links; and a
    pid file's binary reached the terminal with its escape sequences."""
    n = instances[0]
    hold_lease(procs, lock_dir, n, "alice [/] [blink]x")
    pidfiles.write(
        settings.data_dir,
        pidfiles.PidRecord(
            instance=n, pid=999999, pgid=999999, start_ticks=1, binary="/x/\x1b]0;pwned\x07arducopter\x1b[2J"
        ),
    )
    r = subprocess.run(CLI + ["status"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "alice [/] [blink]x" in r.stdout
    assert "arducopter" in r.stdout and "\x1b" not in r.stdout and "\x07" not in r.stdout


# ---- settings from the environment -----------------------------------------------------------


def test_non_finite_settings_are_refused(env, monkeypatch):
    """``inf`` passed ``gt=0``: SITLPOOL_READY_TIMEOUT_S=inf made a launch wait forever for a
    vehicle that never answers, SITLPOOL_SPEEDUP=inf went to the SITL as ``--speedup inf``."""
    from sitlpool.errors import ConfigError

    for name in ("SITLPOOL_SPEEDUP", "SITLPOOL_READY_TIMEOUT_S", "SITLPOOL_IDLE_TIMEOUT_S"):
        for value in ("inf", "-inf", "1e400", "nan", "Infinity"):
            monkeypatch.setenv(name, value)
            with pytest.raises(ConfigError, match=f"^{name}: "):
                load_settings()
        monkeypatch.delenv(name)
    r = subprocess.run(
        CLI + ["status", "--json"],
        env=dict(env, SITLPOOL_READY_TIMEOUT_S="inf"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and r.stderr.startswith("sitlpool: SITLPOOL_READY_TIMEOUT_S: "), r.stderr
    assert len(r.stderr.splitlines()) == 1, r.stderr


# ---- sitlpool run ------------------------------------------------------------------------------


def test_run_stops_what_its_command_left_in_the_background(procs, env, instances, tmp_path):
    """`sitlpool run -- sh -c 'sitlpool-sim -I {instance} ... &'`: the shell exits at once,
    run released the lease and returned, and the SITL kept running on an instance nobody
    held (an orphan no pid file names: `reap` never finds it)."""
    w = tmp_path / "w"
    w.mkdir()
    script = f"{sys.executable} -m sitlpool.sim -I {{instance}} --model quad >/dev/null 2>&1 & echo $!"
    run = procs.popen(
        CLI + ["run", "--instance", str(instances[0]), "--cwd", str(w), "--", "sh", "-c", script],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, errtext = run.communicate(timeout=60)
    bg = int(out.split()[-1])
    assert run.returncode == 0, errtext
    assert not procinfo.is_alive(bg), "the background SITL outlived `sitlpool run` and its lease"
    assert f"stopped them before releasing instance {instances[0]}" in errtext


# ---- a reaper that cannot signal the process a record names ----------------------------------

OTHER_UID = 4243


def test_reaper_of_another_user_leaves_the_record_alone(procs, instances, tmp_path):
    """In a group-shared data dir, bob's `sitlpool reap` met alice's orphan: it could not read
    the process's executable (another user's /proc/<pid>/exe) so it *dropped* alice's record
    (nothing signalled, but her own reap could then never find her orphan); had it read it,
    its SIGTERM would have failed with EPERM and it would have waited 8 s and reported
    "killed". A reaper leaves what it cannot signal to its user, record kept."""
    if os.geteuid() != 0 or not os.path.exists("/usr/bin/python3.11"):
        pytest.skip("needs root (to run the reaper as another user) and a system python3.11")
    import tempfile

    shared = tempfile.mkdtemp(prefix="sitlpool-shared-", dir="/tmp")
    try:
        os.chmod(shared, 0o777)
        n = instances[0]
        victim = start_sim(procs, tmp_path / "alice", n)  # alice's orphan (this test's user)
        wait_for(lambda: listening(ports(n).serial0), what="alice's SITL")
        pidfiles.write(
            shared,
            pidfiles.PidRecord(
                instance=n,
                pid=victim.pid,
                pgid=victim.pid,
                start_ticks=procinfo.start_ticks(victim.pid),
                binary=sys.executable,
                argv=procinfo.cmdline(victim.pid),
                owner="alice",
                exe=procinfo.exe(victim.pid),
            ),
        )
        for d in (pidfiles.session_dir(shared, n), pidfiles.session_dir(shared, n).parent):
            os.chmod(d, 0o777)  # group-shared: bob may remove what is in it
        import sitlpool

        site = [p for p in sys.path if p.endswith("site-packages")][0]
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": "/tmp",
            "SITLPOOL_DATA_DIR": shared,
            "SITLPOOL_POOL": f"{instances[0]}-{instances[-1]}",
            "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.dirname(sitlpool.__file__)), site]),
        }

        def as_bob():
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)

        bob = procs.popen(
            ["/usr/bin/python3.11", "-c", REAP],
            env=env,
            cwd="/tmp",
            preexec_fn=as_bob,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out, errtext = bob.communicate(timeout=60)
        assert bob.returncode == 0, errtext[-800:]
        (r,) = json.loads(out)
        assert victim.poll() is None
        assert r["action"] == "left alone" and r["signalled"] == [] and "uid 0" in r["reason"], r
        assert pidfiles.read(shared, n) is not None, "bob's reap removed alice's record"
    finally:
        import shutil

        shutil.rmtree(shared, ignore_errors=True)


def test_reap_report_never_drives_the_terminal(procs, env, settings, instances):
    """`sitlpool reap` printed pid-file fields (owner, binary) and names of entries in
    sessions/ as they were: a co-user's escape sequences reached whoever read the report."""
    n = instances[0]
    pidfiles.write(
        settings.data_dir,
        pidfiles.PidRecord(
            instance=n,
            pid=999999,
            pgid=4,
            start_ticks=1,
            binary="/x/\x1b[2Jarducopter",
            owner="\x1b]0;pwned\x07mallory",
        ),
    )
    (settings.data_dir / "sessions" / "\x1b[31mred").mkdir()
    r = subprocess.run(CLI + ["reap"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "mallory" in r.stdout and "red" in r.stdout, r.stdout
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout, repr(r.stdout)


def test_sighup_to_run_reaches_its_command(procs, env, instances, tmp_path):
    """SIGHUP (a closed terminal or ssh session) killed `sitlpool run` outright: its lease
    went, and a command that ignores the parent-death SIGTERM kept the instance's ports
    without a lease. run forwards SIGHUP like SIGINT/SIGTERM and stops what is left."""
    code = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('up', flush=True); time.sleep(60)"
    )
    run = procs.popen(
        CLI + ["run", "--instance", str(instances[0]), "--cwd", str(tmp_path), "--", sys.executable, "-c", code],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert run.stdout.readline() == "up\n"
    child = procinfo.children(run.pid)
    os.kill(run.pid, signal.SIGHUP)
    assert run.wait(30) == 128 + signal.SIGHUP
    assert child and not any(procinfo.is_alive(c) for c in child), "run's command outlived it"


# ---- one bad entry of sessions/ blocks no launch ---------------------------------------------


@pytest.mark.parametrize("kind", ["symlink", "file"])
def test_bad_session_dir_is_skipped_by_a_pool_scan(settings, instances, tmp_path, kind):
    """A co-user makes sessions/<first free instance> a symlink (or a file): every launch
    that did not name an instance leased it, then failed ("cannot use instance n's
    directory") instead of taking the next free one. Asking for it by number still fails."""
    from sitlpool.errors import SitlpoolError
    from sitlpool.process import ManagedManager

    n = instances[0]
    bad = pidfiles.session_dir(settings.data_dir, n)
    bad.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        (tmp_path / "elsewhere").mkdir()
        bad.symlink_to(tmp_path / "elsewhere")
    else:
        bad.write_text("")
    m = ManagedManager(settings)
    try:
        h = m.start("next", speedup=5)
        assert h.instance == instances[1]
        with pytest.raises(SitlpoolError, match=f"{n}"):
            m.start("that one", instance=n)
    finally:
        m.close_all()
    assert not list((tmp_path / "elsewhere").iterdir()) if kind == "symlink" else True


def test_launch_never_writes_through_a_planted_symlink(settings, instances, tmp_path):
    """In a group-shared data dir a co-user plants symlinks where a launch writes
    (sessions/<n>/stdout, stderr, and the pid file's temp name, which is predictable): the
    launch truncated and overwrote whatever they pointed to, with the launcher's rights."""
    from sitlpool.process import ManagedManager

    n = instances[0]
    d = pidfiles.session_dir(settings.data_dir, n)
    d.mkdir(parents=True)
    precious = {}
    for name in ("stdout", "stderr", f".sitl.pid.{os.getpid()}.tmp"):
        target = tmp_path / f"precious-{name}"
        target.write_text("keep me\n")
        (d / name).symlink_to(target)
        precious[name] = target
    m = ManagedManager(settings)
    try:
        h = m.start("victim", instance=n, speedup=5)
        assert pidfiles.read(settings.data_dir, n).pid == h.pid
    finally:
        m.close_all()
    for name, target in precious.items():
        assert target.read_text() == "keep me\n", f"the launch wrote through the symlink {name}"


def test_session_dirs_of_a_group_shared_data_dir_are_group_writable(settings, instances):
    """With the usual umask 022, the first member to launch created sessions/ and
    sessions/<n> 0755: every other member's launch then failed ("cannot create the SITL's
    output files", or its directory) instead of working: the group-shared data dir the
    README describes worked for one user only."""
    from sitlpool.process import ManagedManager

    os.chmod(settings.data_dir, 0o2775)
    old = os.umask(0o022)
    m = ManagedManager(settings)
    try:
        h = m.start("first", speedup=5)
        for d in (settings.data_dir / "sessions", pidfiles.session_dir(settings.data_dir, h.instance)):
            mode = os.stat(d).st_mode
            assert mode & 0o070 == 0o070 and mode & 0o2000, f"{d} is {oct(mode)}: other members cannot launch there"
    finally:
        os.umask(old)
        m.close_all()


def test_default_lock_dir_of_a_group_shared_data_dir_is_group_writable(settings, instances):
    """The default lock dir (<data_dir>/leases) of a group-shared data dir was made 0755 by
    its first user (umask 022): every other member then failed to create lock files."""
    from sitlpool.leases import LeasePool

    os.chmod(settings.data_dir, 0o2775)
    old = os.umask(0o022)
    try:
        LeasePool.from_settings(settings, check=False).acquire("first", instance=instances[0]).release()
    finally:
        os.umask(old)
    mode = os.stat(settings.lock_dir).st_mode
    assert mode & 0o070 == 0o070 and mode & 0o2000, oct(mode)


def test_second_sigterm_to_run_ends_a_command_that_ignores_the_first(procs, env, instances, tmp_path):
    """`sitlpool run` forwarded SIGTERM to a command that ignores it and then waited forever:
    no signal but SIGKILL could end it (and free the lease). A second request ends the command."""
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    run = procs.popen(
        CLI + ["run", "--instance", str(instances[0]), "--cwd", str(tmp_path), "--", sys.executable, "-c", code],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert run.stdout.readline() == "up\n"
    os.kill(run.pid, signal.SIGTERM)
    time.sleep(0.3)
    assert run.poll() is None, "the first SIGTERM is only forwarded"
    os.kill(run.pid, signal.SIGTERM)
    try:
        code = run.wait(20)
    except subprocess.TimeoutExpired:
        pytest.fail("`sitlpool run` could not be stopped: its command ignores SIGTERM")
    assert code == 128 + signal.SIGKILL


def test_sitl_never_writes_through_what_a_member_planted_in_a_shared_session_dir(
    settings, instances, tmp_path, real_copter
):
    """In a group-shared data dir any member may write into sessions/<n>: a symlink planted
    as eeprom.bin made the next member's SITL write its parameters into the file it points
    to (with that member's rights). There, each user's SITL runs in a directory of its own
    (sessions/<n>/uid-<uid>, entered by fd: renaming it away changes nothing)."""
    from sitlpool.process import ManagedManager

    n = instances[0]
    settings.sitl_binary = real_copter  # real SITL opens eeprom.bin in place (the built-in one renames a temp file)
    os.chmod(settings.data_dir, 0o2775)
    d = pidfiles.ensure_dir(settings.data_dir, n)
    precious = tmp_path / "precious"
    precious.write_bytes(b"keep me\n")
    (d / "eeprom.bin").symlink_to(precious)
    m = ManagedManager(settings)
    try:
        h = m.start("victim", instance=n, speedup=5)
        wait_for(lambda: (h.cwd / "eeprom.bin").exists(), what="the vehicle's eeprom.bin")
    finally:
        m.close_all()
    assert precious.read_bytes() == b"keep me\n", "the SITL wrote through a planted eeprom.bin symlink"
    assert h.cwd == d / f"uid-{os.geteuid()}"


def test_status_survives_a_junk_state_file(env, settings, instances):
    """A state file with JSON Infinity made `sitlpool status` exit 1 with an OverflowError
    traceback, for every user of the data dir."""
    d = pidfiles.ensure_dir(settings.data_dir, instances[0])
    (d / "state.json").write_text('{"schema": 1, "writer_pid": Infinity, "writer_start_ticks": 1, "time": 1}')
    r = subprocess.run(CLI + ["status"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("junk", ["fifo", "symlink", "deep", "wrong types", "huge"])
def test_status_never_hangs_or_fails_on_a_planted_state_file(env, settings, instances, tmp_path, junk):
    """Anyone sharing the data dir can put anything at sessions/<n>/state.json: a FIFO made
    `sitlpool status` hang forever; junk is shown as no live state, never a traceback."""
    d = pidfiles.ensure_dir(settings.data_dir, instances[0])
    path = d / "state.json"
    if junk == "fifo":
        os.mkfifo(path)
    elif junk == "symlink":
        secret = tmp_path / "secret.json"
        secret.write_text('{"schema": 1, "writer_pid": 1, "writer_start_ticks": 0, "time": 1, "mode": "SECRET"}')
        path.symlink_to(secret)
    elif junk == "deep":
        path.write_text("[" * 100000 + "]" * 100000)
    elif junk == "wrong types":
        path.write_text(
            json.dumps(
                {
                    "schema": 1,
                    "writer_pid": os.getpid(),
                    "writer_start_ticks": 0,
                    "time": 1,
                    "relative_alt_m": "high",
                    "battery_pct": "[/]",
                }
            )
        )
    else:
        path.write_text(
            json.dumps(
                {"schema": 1, "writer_pid": 1, "writer_start_ticks": 0, "time": 1, "last_text": "x" * (200 * 1024)}
            )
        )
    r = subprocess.run(CLI + ["status", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert json.loads(r.stdout)["live"] == []
