"""`sitlpool run -- CMD` where CMD is a wrapper (`sh -c '... &'`, a script): killing
`sitlpool run`, SIGKILL included, leaves nothing running and the lease free; if its guardian
is killed with it, what is left is recorded and `sitlpool reap` / `sitlpool kill N` kill it."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import wait_for
from sitlpool import procinfo
from sitlpool.leases import LeasePool

SIM = f"{sys.executable} -m sitlpool.sim -I {{instance}} --model quad --serial0 tcp:0"


def cli(*args, env):
    return subprocess.run(
        [sys.executable, "-m", "sitlpool", *args], env=env, capture_output=True, text=True, timeout=120
    )


def start_run(procs, env, instance, cwd, wrapper, tmp_path, setsid=False, binary=None):
    vehicle = SIM if binary is None else f"{binary} -I {{instance}} --model quad"
    sim = ("setsid " if setsid else "") + vehicle
    body = f"{sim} >/dev/null 2>&1 &\necho $! \nsleep 3600\n"
    if wrapper == "sh -c":
        cmd = ["sh", "-c", body]
    else:
        script = tmp_path / "start-sitl.sh"
        script.write_text("#!/bin/sh\n" + body)
        script.chmod(0o755)
        cmd = [str(script)]
    run = procs.popen(
        [sys.executable, "-m", "sitlpool", "run", "--instance", str(instance), "--cwd", str(cwd), "--", *cmd],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = run.stdout.readline()
    assert line.strip().isdigit(), (line, run.stderr.read() if run.poll() is not None else "")
    return run, int(line)


def kill_pid(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.parametrize("wrapper", ["sh -c", "script"])
def test_sigkill_of_run_leaves_nothing(procs, env, data_dir, lock_dir, instances, tmp_path, wrapper, vehicle_binary):
    n = instances[0]
    cwd = data_dir / "w"
    cwd.mkdir()
    run, bg = start_run(procs, env, n, cwd, wrapper, tmp_path, binary=vehicle_binary)
    try:
        assert procinfo.is_alive(bg)
        pool = LeasePool(lock_dir, [n], check=False)
        assert pool.holder(n) is not None
        os.kill(run.pid, signal.SIGKILL)
        run.wait(10)
        wait_for(lambda: not procinfo.is_alive(bg), timeout=15, what="the wrapped SITL to die with `sitlpool run`")
        wait_for(lambda: pool.holder(n) is None, timeout=10, what="the lease to be free")
        assert not (data_dir / "sessions" / str(n) / "run.json").exists()
    finally:
        kill_pid(bg)


@pytest.mark.parametrize("how", ["reap", "kill"])
def test_leftovers_of_a_killed_run_and_guardian_are_reaped(procs, env, data_dir, lock_dir, instances, tmp_path, how):
    """Both `sitlpool run` and its guardian SIGKILLed, the SITL in a session of its own (setsid):
    it keeps the lease through the fd it inherited; the run record proves it is the command's."""
    n = instances[1]
    cwd = data_dir / "w"
    cwd.mkdir()
    run, bg = start_run(procs, env, n, cwd, "sh -c", tmp_path, setsid=True)
    try:
        rec = json.loads((data_dir / "sessions" / str(n) / "run.json").read_text())
        assert rec["run_pid"] == run.pid and procinfo.is_alive(rec["guardian_pid"])
        os.kill(rec["guardian_pid"], signal.SIGKILL)
        os.kill(run.pid, signal.SIGKILL)
        run.wait(10)
        time.sleep(0.5)
        assert procinfo.is_alive(bg), "the setsid'd SITL should outlive a guardian killed with run"
        pool = LeasePool(lock_dir, [n], check=False)
        assert pool.holder(n) is not None  # it holds the lease through its inherited fd
        r = cli("reap", env=env) if how == "reap" else cli("kill", str(n), env=env)
        assert r.returncode == 0, r.stderr
        assert f"instance {n}: killed" in r.stdout and str(bg) in r.stdout, r.stdout
        wait_for(lambda: not procinfo.is_alive(bg), timeout=10, what="the leftover SITL to be killed")
        wait_for(lambda: pool.holder(n) is None, timeout=10, what="the lease to be free")
        assert not (data_dir / "sessions" / str(n) / "run.json").exists()
    finally:
        kill_pid(bg)


def test_run_record_never_kills_what_lacks_its_token(procs, env, data_dir, instances, tmp_path):
    """A record whose run and guardian are dead names only the processes carrying its token:
    an unrelated process of the same user is left alone, and the record is dropped."""
    from sitlpool import pidfiles
    from sitlpool.process import runwrap

    n = instances[2]
    other = procs.popen(["sleep", "60"])
    dead = subprocess.Popen(["true"])
    dead.wait()
    pidfiles.write_run(
        data_dir,
        pidfiles.RunRecord(n, "a" * 32, dead.pid, 1, dead.pid, 1, ["sh"], "someone"),
    )
    got = runwrap.reap_run(data_dir, n, grace=0.5)
    assert got is not None and got.pids == []
    assert procinfo.is_alive(other.pid)
    assert pidfiles.load_run(data_dir, n) is None
