"""Hostile clients on ``sitlpool serve``'s stdio wire, and hostile commands under
``sitlpool run``: regression guards for behaviour checked correct (hostile2's pass)."""

import json
import os
import select
import signal
import subprocess
import sys
import time

from test_stdio_wire import SERVE, init  # noqa: F401  (init: also for test_hostile_wire_found)

from conftest import wait_for
from sitlpool import procinfo
from sitlpool.leases import LeasePool

INITED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def line(msg) -> bytes:
    return json.dumps(msg).encode() + b"\n"


def ping(rid):
    return {"jsonrpc": "2.0", "id": rid, "method": "ping"}


def serve(procs, env):
    # unbuffered: select() sees every line not yet read
    return procs.popen(SERVE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, bufsize=0)


def read(p, count):
    """``count`` JSON-RPC lines from the server (a liveness bound, not a timing claim)."""
    out = []
    while len(out) < count:
        if not select.select([p.stdout], [], [], 60)[0]:
            raise AssertionError(f"no answer within 60 s; got {out}")
        raw = p.stdout.readline()
        assert raw, f"the server closed its stdout; got {out}"
        out.append(json.loads(raw))
    return out


def end(p):
    """Close stdin; the server's exit code, anything it still wrote, its stderr."""
    out, err = p.communicate(b"", timeout=60)
    return p.returncode, [json.loads(x) for x in out.splitlines()], err.decode()


def test_junk_and_a_huge_first_line_then_a_normal_session(procs, env):
    """A first line of 4 MB, then binary junk and invalid UTF-8: no early answer for them,
    no crash, a JSON-RPC parse error for each; the initialize after them is answered once,
    and the session works."""
    p = serve(procs, env)
    p.stdin.write(
        b"x" * (4 << 20)
        + b"\n"
        + bytes(range(1, 256)).replace(b"\n", b"")
        + b"\n\xff\xfe{\n"
        + line(init(1))
        + line(INITED)
        + line({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    )
    got = read(p, 6)  # the junk's \r splits it in two lines, as the SDK's reader splits it
    assert [r["id"] for r in got] == [None, None, None, None, 1, 2]
    assert all(r["error"]["code"] == -32700 for r in got[:4])
    assert got[4]["result"]["serverInfo"]["name"] == "sitlpool" and got[5]["result"]["tools"]
    rc, rest, err = end(p)
    assert rc == 0 and rest == [] and "Traceback" not in err and "differs" not in err


def test_initialize_dribbled_in_small_writes_is_answered_once(procs, env):
    p = serve(procs, env)
    data = line(init(1))
    for i in range(0, len(data), 9):  # a slow pipe: partial lines must be joined, not parsed
        p.stdin.write(data[i : i + 9])
        time.sleep(0.01)
    [first] = read(p, 1)
    assert first["id"] == 1 and "result" in first
    p.stdin.write(line(INITED) + line(ping(2)))
    assert read(p, 1)[0]["id"] == 2
    rc, rest, err = end(p)
    assert rc == 0 and rest == [] and "differs" not in err


def test_a_flood_before_the_sdk_is_loaded_loses_nothing(procs, env):
    """Requests queued while the SDK imports are each answered once, after initialize."""
    n = 150
    p = serve(procs, env)
    p.stdin.write(line(init(1)) + line(INITED) + b"".join(line(ping(i)) for i in range(2, n + 2)))
    got = read(p, n + 1)
    ids = [r["id"] for r in got]
    assert ids[0] == 1 and sorted(ids) == list(range(1, n + 2))
    rc, rest, err = end(p)
    assert rc == 0 and rest == [] and "differs" not in err


def test_a_reused_id_and_a_second_initialize_are_each_answered(procs, env):
    """The SDK's duplicate answer to the early-answered initialize is dropped once, never
    the answer to a later request that reuses its id."""
    p = serve(procs, env)
    p.stdin.write(line(init(1)) + line(ping(1)) + line(init("two")) + line(INITED) + line(ping(3)))
    got = read(p, 4)
    assert [r["id"] for r in got] == [1, 1, "two", 3]
    assert "serverInfo" in got[0]["result"] and got[1]["result"] == {}
    assert got[2]["result"]["serverInfo"]["name"] == "sitlpool"
    rc, rest, err = end(p)
    assert rc == 0 and rest == [] and "differs" not in err


def test_ids_the_early_answer_leaves_to_the_sdk(procs, env):
    """A float, null or bool id is not answered early (the SDK does not answer it either):
    nothing is sent twice, the session goes on."""
    p = serve(procs, env)
    for rid in (1.5, None, True):
        p.stdin.write(line(init(rid)))
    p.stdin.write(line(init("s")) + line(INITED) + line(ping(3)))
    got = read(p, 2)
    assert [r["id"] for r in got] == ["s", 3]
    rc, rest, err = end(p)
    assert rc == 0 and rest == [] and "differs" not in err


def test_initialize_without_newline_then_eof(procs, env):
    p = serve(procs, env)
    p.stdin.write(json.dumps(init(1)).encode())
    rc, got, err = end(p)
    assert rc == 0 and [r["id"] for r in got] == [1] and "Traceback" not in err


def test_a_signal_while_the_sdk_loads_ends_the_server_cleanly(procs, env):
    """Right after the early answer (the SDK most likely still importing): SIGINT and
    SIGTERM end the process, without a traceback, leaving nothing in its group."""
    for sig, codes in ((signal.SIGINT, (130,)), (signal.SIGTERM, (-signal.SIGTERM, 128 + signal.SIGTERM))):
        p = serve(procs, env)
        p.stdin.write(line(init(1)))
        assert read(p, 1)[0]["id"] == 1
        p.send_signal(sig)
        assert p.wait(30) in codes
        assert "Traceback" not in p.stderr.read().decode()
        wait_for(lambda: not procinfo.group_members(p.pid), what=f"nothing left in the server's group after {sig.name}")


# ---- sitlpool run: the command shares the lease -----------------------------------------

DAEMON = """
import os, signal, sys, time
if os.fork():
    sys.exit(0)  # the command itself ends at once
os.setsid()
if os.fork():
    os._exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # and the daemon it left ignores SIGTERM
print(os.getpid(), flush=True)
time.sleep(3600)
"""


def test_a_daemon_left_by_the_command_is_stopped_and_the_lease_freed(env, instances, procs, data_dir):
    """The command double-forks a daemon (new session, inherits the lock fd, ignores
    SIGTERM) and exits 0: run stops the daemon (SIGKILL after the grace), then the
    instance is free for the next taker."""
    n = instances[0]
    # cwd in the data dir: should run miss the daemon (its own session), the fixture kills it and says so
    run = procs.popen(
        [
            sys.executable,
            "-m",
            "sitlpool",
            "run",
            "--instance",
            str(n),
            "--cwd",
            str(data_dir),
            "--",
            sys.executable,
            "-c",
            DAEMON,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    daemon = int(run.stdout.readline())
    out, err = run.communicate(timeout=60)
    assert run.returncode == 0
    assert f"left 1 process(es) running (pid {daemon})" in err
    assert not procinfo.is_alive(daemon)
    assert LeasePool.from_env().holder(n) is None
    r = subprocess.run(
        [sys.executable, "-m", "sitlpool", "run", "--instance", str(n), "--", "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0


KEEPER = """
import os, signal, subprocess, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)
kid = subprocess.Popen(["sleep", "3600"], close_fds=False)  # a child: it inherits the lock fd too
print(os.getpid(), kid.pid, flush=True)
sys.stdin.read()
kid.kill()
"""


def test_kill_and_reap_leave_an_instance_its_command_keeps(env, instances, procs, data_dir):
    """run SIGKILLed; its SIGTERM-ignoring command and that command's child keep the
    lease: status names both, kill (even --force) refuses, reap touches nothing; when they
    end, the instance is free."""
    n = instances[0]
    run = procs.popen(
        [
            sys.executable,
            "-m",
            "sitlpool",
            "run",
            "--instance",
            str(n),
            "--cwd",
            str(data_dir),
            "--",
            sys.executable,
            "-c",
            KEEPER,
        ],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    cmd, kid = map(int, run.stdout.readline().split())
    os.kill(run.pid, signal.SIGKILL)
    run.wait(10)
    try:
        h = LeasePool.from_env().holder(n)
        assert h is not None and h.pid == run.pid and {cmd, kid} <= set(h.kept_by)
        for args in (("kill", str(n)), ("kill", "--force", str(n))):
            r = subprocess.run(
                [sys.executable, "-m", "sitlpool", *args], env=env, capture_output=True, text=True, timeout=60
            )
            assert r.returncode == 1 and "refusing to kill" in r.stderr and f"{cmd}" in r.stderr
        r = subprocess.run(
            [sys.executable, "-m", "sitlpool", "reap"], env=env, capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0 and "nothing to reap" in r.stdout
        assert procinfo.is_alive(cmd) and procinfo.is_alive(kid)
    finally:
        run.stdin.close()  # the command kills its child and ends
    wait_for(lambda: LeasePool.from_env().holder(n) is None, what="the lease to go with the command and its child")
