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

from conftest import hold_lease, listening, processes_under, start_sim, wait_for
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
    pidfiles.write(settings.data_dir, pidfiles.PidRecord(
        instance=n, pid=victim.pid, pgid=victim.pid, start_ticks=procinfo.start_ticks(victim.pid),
        binary=sys.executable, argv=procinfo.cmdline(victim.pid), owner="mallory", exe=procinfo.exe(victim.pid)))
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
    pidfiles.write(settings.data_dir, pidfiles.PidRecord(
        instance=n, pid=victim.pid, pgid=victim.pid, start_ticks=procinfo.start_ticks(victim.pid),
        binary=sys.executable, argv=procinfo.cmdline(victim.pid), owner="mallory", exe=procinfo.exe(victim.pid)))
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
    pidfiles.write(settings.data_dir, pidfiles.PidRecord(
        instance=n, pid=999999, pgid=999999, start_ticks=1, binary="/x/\x1b]0;pwned\x07arducopter\x1b[2J"))
    r = subprocess.run(CLI + ["status"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "alice [/] [blink]x" in r.stdout
    assert "arducopter" in r.stdout and "\x1b" not in r.stdout and "\x07" not in r.stdout


# ---- settings from the environment -----------------------------------------------------------


@pytest.mark.parametrize("name", ["SITLPOOL_SPEEDUP", "SITLPOOL_READY_TIMEOUT_S", "SITLPOOL_IDLE_TIMEOUT_S"])
def test_non_finite_settings_are_refused(env, name, monkeypatch):
    """``inf`` passed ``gt=0``: SITLPOOL_READY_TIMEOUT_S=inf made a launch wait forever for a
    vehicle that never answers, SITLPOOL_SPEEDUP=inf went to the SITL as ``--speedup inf``."""
    from sitlpool.errors import ConfigError

    for value in ("inf", "-inf", "1e400", "nan", "Infinity"):
        monkeypatch.setenv(name, value)
        with pytest.raises(ConfigError, match=f"^{name}: "):
            load_settings()
    r = subprocess.run(CLI + ["status", "--json"], env=dict(env, **{name: "inf"}), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and r.stderr.startswith(f"sitlpool: {name}: ") and len(r.stderr.splitlines()) == 1, r.stderr


# ---- sitlpool run ------------------------------------------------------------------------------


def test_run_stops_what_its_command_left_in_the_background(procs, env, instances, tmp_path):
    """`sitlpool run -- sh -c 'sitlpool-sim -I {instance} ... &'`: the shell exits at once,
    run released the lease and returned, and the SITL kept running on an instance nobody
    held (an orphan no pid file names: `reap` never finds it)."""
    w = tmp_path / "w"
    w.mkdir()
    script = f"{sys.executable} -m sitlpool.sim -I {{instance}} --model quad >/dev/null 2>&1 & echo $!"
    run = procs.popen(CLI + ["run", "--instance", str(instances[0]), "--cwd", str(w), "--", "sh", "-c", script],
                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, errtext = run.communicate(timeout=60)
    bg = int(out.split()[-1])
    assert run.returncode == 0, errtext
    assert not procinfo.is_alive(bg), "the background SITL outlived `sitlpool run` and its lease"
    assert f"stopped them before releasing instance {instances[0]}" in errtext
