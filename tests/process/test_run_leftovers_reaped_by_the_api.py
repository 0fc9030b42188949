"""What a dead `sitlpool run` left (its guardian killed with it, the SITL in a session of its
own keeping the lease through an inherited descriptor) is proven by the run record and
killed by the Python API's ``kill_instance`` and ``reap_orphans`` too (the MCP server and
the fleet call those), not only by the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import wait_for
from sitlpool import procinfo
from sitlpool.config import load_settings
from sitlpool.leases import LeasePool
from sitlpool.process import kill_instance, reap_orphans

SIM = f"setsid {sys.executable} -m sitlpool.sim -I {{instance}} --model quad --serial0 tcp:0"


def start_run(procs, env, instance, cwd):
    body = f"{SIM} >/dev/null 2>&1 &\necho $! \nsleep 3600\n"
    run = procs.popen(
        [
            sys.executable,
            "-m",
            "sitlpool",
            "run",
            "--instance",
            str(instance),
            "--cwd",
            str(cwd),
            "--",
            "sh",
            "-c",
            body,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = run.stdout.readline()
    assert line.strip().isdigit(), (line, run.stderr.read() if run.poll() is not None else "")
    return run, int(line)


@pytest.mark.parametrize("how", ["kill_instance", "reap_orphans"])
def test_leftovers_of_a_killed_run_are_killed_by_the_api(procs, env, data_dir, lock_dir, instances, how):
    n = instances[0]
    cwd = data_dir / "w"
    cwd.mkdir()
    run, bg = start_run(procs, env, n, cwd)
    try:
        rec = json.loads((data_dir / "sessions" / str(n) / "run.json").read_text())
        os.kill(rec["guardian_pid"], signal.SIGKILL)
        os.kill(run.pid, signal.SIGKILL)
        run.wait(10)
        time.sleep(0.5)
        assert procinfo.is_alive(bg)
        pool = LeasePool(lock_dir, [n], check=False)
        assert pool.holder(n) is not None  # held through the descriptor the leftover inherited
        settings = load_settings()
        if how == "kill_instance":
            report = kill_instance(n, settings=settings)
            assert bg in report.signalled and any(str(bg) in k and "sitlpool run" in k for k in report.killed), report
        else:
            reports = reap_orphans(settings)
            assert any(r.instance == n and r.action == "killed" and bg in r.signalled for r in reports), reports
        wait_for(lambda: not procinfo.is_alive(bg), timeout=10, what="the leftover SITL to be killed")
        wait_for(lambda: pool.holder(n) is None, timeout=10, what="the lease to be free")
    finally:
        try:
            os.kill(bg, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_live_runs_instance_is_left_alone_and_not_reported(procs, env, data_dir, instances):
    n = instances[1]
    cwd = data_dir / "w2"
    cwd.mkdir()
    run, bg = start_run(procs, env, n, cwd)
    try:
        reports = reap_orphans(load_settings())
        assert not [r for r in reports if r.instance == n], reports
        with pytest.raises(Exception, match="leased to"):
            kill_instance(n, settings=load_settings())
        assert procinfo.is_alive(bg)
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        try:
            os.kill(bg, signal.SIGKILL)
        except ProcessLookupError:
            pass
