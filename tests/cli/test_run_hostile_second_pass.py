"""`sitlpool run` attacked a second time (issue 20, follow-up): signals a terminal or a job
runner sends to the whole process group, and run records a careless or hostile hand wrote.
Nothing a run started may outlive it, and `reap` / `kill N` never touch a live run's command."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import wait_for
from sitlpool import pidfiles, procinfo
from sitlpool.leases import LeasePool

# a shell's background job ignores SIGINT and SIGQUIT (POSIX): only the guardian can stop it
WRAPPER = ["sh", "-c", "sleep 1234 & echo $!; wait"]


def cli(*args, env):
    return subprocess.run(
        [sys.executable, "-m", "sitlpool", *map(str, args)], env=env, capture_output=True, text=True, timeout=120
    )


def start_run(procs, env, instance, cwd, cmd=WRAPPER):
    run = procs.popen(
        [sys.executable, "-m", "sitlpool", "run", "--instance", str(instance), "--", *cmd],
        env=env,
        cwd=cwd,
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


def test_ctrl_backslash_to_the_group_leaves_nothing(procs, env, instances, tmp_path):
    """Ctrl-\\ at a terminal: SIGQUIT to run, guardian and command at once. Run and guardian
    died of it (no handler), and the shell's background job, which ignores SIGQUIT, kept
    running with the lease."""
    n = instances[0]
    run, bg = start_run(procs, env, n, tmp_path)
    try:
        time.sleep(0.3)
        os.killpg(run.pid, signal.SIGQUIT)
        run.wait(20)
        wait_for(lambda: not procinfo.is_alive(bg), timeout=15, what="the background job to die with run")
        wait_for(lambda: LeasePool(env_lock_dir(env), [n], check=False).holder(n) is None, what="a free lease")
    finally:
        kill_pid(bg)


TRAPS_TERM = ["sh", "-c", "trap 'sleep 0.5; echo cleaned-up >&2; exit 0' TERM; echo $$; while :; do sleep 0.05; done"]


def test_sigterm_to_the_group_is_one_request_not_two(procs, env, data_dir, instances, tmp_path):
    """`kill -TERM -PGID` (a CI runner, `timeout`): the guardian gets SIGTERM from the kernel
    and again forwarded by run (as here: to each, a moment apart, as they land when the two do
    not merge). Counted as two requests, the second became SIGKILL at once: the command never
    got to clean up."""
    n = instances[0]
    run, cmd = start_run(procs, env, n, tmp_path, TRAPS_TERM)
    try:
        guardian = json.loads((data_dir / "sessions" / str(n) / "run.json").read_text())["guardian_pid"]
        time.sleep(0.3)
        os.kill(guardian, signal.SIGTERM)
        time.sleep(0.05)
        os.kill(run.pid, signal.SIGTERM)
        _, err = run.communicate(timeout=20)
        assert "cleaned-up" in err and run.returncode == 0, (run.returncode, err)
    finally:
        kill_pid(cmd)


def env_lock_dir(env):
    return os.path.join(env["SITLPOOL_DATA_DIR"], "leases")


def forge(data_dir, instance, rec, **changes):
    dead = subprocess.Popen(["true"])
    dead.wait()
    fields = dict(rec, instance=instance, guardian_pid=dead.pid, run_pid=dead.pid)
    fields.update(changes)
    pidfiles.write_run(data_dir, pidfiles.RunRecord(**{k: v for k, v in fields.items() if k != "time"}))


def test_forged_record_with_a_live_runs_token_kills_nothing(procs, env, data_dir, instances, tmp_path):
    """A run record that names a live run's token but a dead guardian (written over the live
    run's record, or into another instance's directory; start ticks 0): `reap` and `kill N`
    killed the live run's command and its background job."""
    n, m = instances[0], instances[1]
    run, bg = start_run(procs, env, n, tmp_path)
    try:
        rec = json.loads((data_dir / "sessions" / str(n) / "run.json").read_text())
        forge(data_dir, m, rec, guardian_start_ticks=0, run_start_ticks=0)
        r = cli("reap", env=env)
        assert r.returncode == 0, r.stderr
        forge(data_dir, m, rec, guardian_start_ticks=0, run_start_ticks=0)
        r = cli("kill", m, env=env)
        forge(data_dir, n, rec, guardian_start_ticks=0, run_start_ticks=0)  # over the live run's own record
        r = cli("reap", env=env)
        assert r.returncode == 0, r.stderr
        time.sleep(0.3)
        assert procinfo.is_alive(bg) and run.poll() is None, r.stdout
        assert LeasePool(env_lock_dir(env), [n], check=False).holder(n) is not None
    finally:
        kill_pid(bg)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")


@pytest.fixture
def shared_data_dir():
    """A data dir shared with group nobody (2775, as installed before the sticky bit), reachable by it."""
    import pwd
    import shutil
    import tempfile

    nobody = pwd.getpwnam("nobody")
    top = Path(tempfile.mkdtemp(prefix="sitlpool-h1-"))
    os.chmod(top, 0o755)
    d = top / "data"
    d.mkdir()
    os.chown(d, 0, nobody.pw_gid)
    os.chmod(d, 0o2775)
    yield d
    shutil.rmtree(top, ignore_errors=True)


def as_nobody(fn):
    """``fn()`` in a forked child that became user nobody; what it returned, or what it raised as text."""
    import pickle
    import pwd

    nobody = pwd.getpwnam("nobody")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            try:
                out = fn()
            except Exception as e:
                out = f"{type(e).__name__}: {e}"
            os.write(w, pickle.dumps(out))
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return pickle.loads(data)


@needs_root
def test_another_users_reap_leaves_my_run_record_alone(procs, shared_data_dir, instances):
    """In a group-shared data dir, a member's `sitlpool reap` cannot see my processes'
    environments, so it found "nothing left" of my dead run and removed my run record:
    my own reap could then never prove (and kill) what that run left."""
    from sitlpool.process import runwrap

    n = instances[0]
    dead = subprocess.Popen(["true"])  # the run's guardian and run, dead
    dead.wait()
    token = "b" * 32
    left = procs.popen(["sleep", "60"], env={"PATH": os.environ["PATH"], runwrap.TOKEN_ENV: token})
    pidfiles.write_run(
        shared_data_dir,
        pidfiles.RunRecord(n, token, dead.pid, procinfo.start_ticks(os.getpid()) + 1, dead.pid, 0, ["sh"], "root's"),
    )
    for d in (shared_data_dir / "sessions", shared_data_dir / "sessions" / str(n)):
        os.chmod(d, 0o2775)  # a directory made before the sticky bit
    out = as_nobody(lambda: [x.record.instance for x in runwrap.reap_runs(shared_data_dir, grace=0.2)])
    assert out == [], out
    assert pidfiles.load_run(shared_data_dir, n) is not None, "nobody's reap removed root's run record"
    got = runwrap.reap_run(shared_data_dir, n, grace=0.5)  # and mine still kills what the run left
    assert got is not None and got.pids == [left.pid]
    wait_for(lambda: left.poll() is not None, what="the leftover to be killed")


def test_a_leftover_that_dropped_the_token_is_still_reaped(procs, env, data_dir, instances, tmp_path):
    """Run and guardian SIGKILLed together (`kill -9 -PGID`), the command's SITL started with
    `env -i` in a session of its own: it kept the lease through its inherited fd, but no token
    in its environment, so `reap` found nothing and `kill N` refused: the instance was stuck."""
    n = instances[0]
    body = "env -i setsid sleep 1234 & echo $!; sleep 3600"
    run, bg = start_run(procs, env, n, tmp_path, ["sh", "-c", body])
    try:
        wait_for(lambda: procinfo.cmdline(bg)[:1] == ["sleep"], what="the env -i'd sleep to start")
        session = data_dir / "sessions" / str(n)
        rec = json.loads((session / "run.json").read_text())
        wait_for(lambda: f"\n{bg} " in _read(session / "run.pids"), timeout=5, what="the guardian to list it")
        os.kill(rec["guardian_pid"], signal.SIGKILL)
        os.kill(run.pid, signal.SIGKILL)
        run.wait(10)
        time.sleep(0.5)
        assert procinfo.is_alive(bg)
        pool = LeasePool(env_lock_dir(env), [n], check=False)
        assert pool.holder(n) is not None  # through the fd it inherited
        r = cli("reap", env=env)
        assert r.returncode == 0 and f"instance {n}: killed" in r.stdout and str(bg) in r.stdout, (r.stdout, r.stderr)
        wait_for(lambda: not procinfo.is_alive(bg), what="the leftover to be killed")
        wait_for(lambda: pool.holder(n) is None, what="the lease to be free")
        assert not (session / "run.json").exists() and not (session / "run.pids").exists()
    finally:
        kill_pid(bg)


def _read(path):
    try:
        return path.read_text()
    except OSError:
        return ""
