"""Findings of the hostile pass on the stdio wire and on ``sitlpool run``'s shared lease:
each test failed before its fix. Helpers come from tests/mcp/test_stdio_wire_hostile.py."""

import json
import os
import signal
import socket
import subprocess
import sys

import pytest
from test_stdio_wire_hostile import INITED, end, init, line, read, serve

from conftest import wait_for

TOOLS_1 = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


@pytest.mark.parametrize(
    "first",
    [
        b"\xef\xbb\xbf" + line(init(1)),  # a UTF-8 BOM: json.loads(bytes) skips it, the SDK's parser does not
        line(init(1)).replace(b'"name": "t"', b'"name": "\\ud800"'),  # a lone surrogate: json accepts it, the SDK not
    ],
    ids=["bom", "lone-surrogate"],
)
def test_an_initialize_the_sdk_cannot_parse_costs_no_later_answer(procs, env, first):
    """Whatever the early answer does with a line the SDK cannot parse, the answer to a
    later request that reuses the id (legal once the id was answered) reaches the client.
    Today: the early answer is sent, the SDK never answers the line, and the later
    answer is swallowed as "the SDK's duplicate" (and a false "differs" is logged): the
    client waits forever."""
    p = serve(procs, env)
    p.stdin.write(first)
    p.stdin.write(line(INITED) + line(TOOLS_1))
    got = []
    while not any("tools" in r.get("result", {}) for r in got):  # an early answer may come first
        assert len(got) < 2, f"tools/list (id 1) not answered; got {got}"
        got += read(p, 1)  # the liveness bound: today the answer never comes
    rc, rest, err = end(p)
    assert rc == 0 and "differs" not in err


M = "io.modelcontextprotocol/"
DISCOVER = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "server/discover",
    "params": {
        "_meta": {
            M + "protocolVersion": "2026-07-28",
            M + "clientInfo": {"name": "t", "version": "0"},
            M + "clientCapabilities": {},
        }
    },
}


@pytest.mark.parametrize(
    "method,where,params",
    [
        ("initialize", "params", {"_meta": [1]}),  # _meta must be an object
        ("initialize", "params", {"capabilities": {"roots": 5}}),  # a capability must be an object
        ("initialize", "params", {"clientInfo": {"name": "t", "version": "0", "icons": 5}}),  # icons: a list
        ("server/discover", "_meta", {M + "clientCapabilities": {"roots": 5}}),
        ("server/discover", "_meta", {M + "clientInfo": {"name": "t", "version": "0", "title": 5}}),
    ],
    ids=["meta-list", "capability-int", "icons-int", "discover-capability-int", "discover-title-int"],
)
def test_a_request_the_sdk_refuses_is_not_answered_early(procs, env, method, where, params):
    """The SDK answers these with -32602; the early answer must not claim success (today it
    does, and then logs that "the SDK's answer differs ... report this with your mcp version")."""
    msg = json.loads(json.dumps(init(1) if method == "initialize" else DISCOVER))
    (msg["params"] if where == "params" else msg["params"]["_meta"]).update(params)
    p = serve(procs, env)
    p.stdin.write(line(msg))
    [r] = read(p, 1)
    assert r["id"] == 1 and "error" in r and "result" not in r
    rc, rest, err = end(p)
    assert rc == 0 and "differs" not in err


def test_serve_ray_with_nothing_listening_answers_with_the_reason(procs, env, tmp_path):
    """``--ray 127.0.0.1:PORT`` where nothing listens (the head is not running): every
    request gets the reason. Today ray.init retries for ever (> 10 min measured): the
    client's tools/list is never answered."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: a connect is refused
    try:
        port = closed.getsockname()[1]
        p = procs.popen(
            [sys.executable, "-m", "sitlpool", "serve", "--ray", f"127.0.0.1:{port}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env, XDG_CACHE_HOME=str(tmp_path / "no-cache")),  # no cached tool list: the SDK answers tools/list
            bufsize=0,
        )
        p.stdin.write(line(init(1)) + line(INITED) + line({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        got = read(p, 2)  # read()'s liveness bound is 60 s
        assert got[1]["id"] == 2 and f"127.0.0.1:{port}" in got[1]["error"]["message"]
        rc, rest, err = end(p)
        assert rc == 1 and "Traceback" not in err
    finally:
        closed.close()


# A lease whose holder died while a child it forked keeps the flock (the child shares the open
# file description): what `sitlpool run`'s guardian prevents for its own commands, and what any
# other tool sharing the lock directory can still leave behind.
KEEPER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, f"someone else\\t{os.getpid()}\\t{time.time()}\\n".encode())
if os.fork() == 0:
    print(os.getpid(), flush=True)
    sys.stdin.read()
    os._exit(0)
time.sleep(3600)
"""


def test_kept_by_names_only_processes_that_hold_the_lock(env, instances, procs):
    """A process that merely has the lock file open (a ``run --wait`` waiting for it; the
    ``sitlpool kill`` asking, whose failed try_lock caches the fd) is not keeping the lease:
    only the child that inherited the dead holder's flock is named."""
    n = instances[0]
    lock = os.path.join(env["SITLPOOL_DATA_DIR"], "leases", f"instance-{n}.lock")
    os.makedirs(os.path.dirname(lock), exist_ok=True)
    run = procs.popen(
        [sys.executable, "-c", KEEPER, lock],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    cmd = int(run.stdout.readline())
    os.kill(run.pid, signal.SIGKILL)
    run.wait(10)
    waiter = procs.popen(
        [sys.executable, "-m", "sitlpool", "run", "--instance", str(n), "--wait", "60", "--", "true"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def waiter_has_it_open():
        try:
            return any(
                os.path.realpath(f"/proc/{waiter.pid}/fd/{fd}") == os.path.realpath(lock)
                for fd in os.listdir(f"/proc/{waiter.pid}/fd")
            )
        except OSError:
            return False

    try:
        wait_for(waiter_has_it_open, timeout=30, what="the waiter to open the lock file")
        [row] = json.loads(
            subprocess.run(
                [sys.executable, "-m", "sitlpool", "status", "--json"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout
        )["held"]
        assert row["kept_by"] == [cmd]
        k = procs.popen(
            [sys.executable, "-m", "sitlpool", "kill", str(n)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _, kerr = k.communicate(timeout=60)
        assert (
            k.returncode == 1 and f"pid {cmd} (" in kerr and f"kill {cmd} to free it" in kerr and str(k.pid) not in kerr
        )
    finally:
        run.stdin.close()
    assert waiter.wait(60) == 0  # it got the instance once the command ended


def test_an_sdk_that_fails_to_load_after_the_early_answer_says_why(procs, env, tmp_path):
    """A broken MCP SDK install (simulated: an ``mcp`` package that raises on import, shadowing
    the real one; ``mcp_types`` stays, so initialize is answered early): every request
    then gets the reason, like bad settings do, and no traceback. Today: a bare ImportError
    traceback on stderr and a closed pipe after a successful initialize."""
    shadow = tmp_path / "shadow" / "mcp"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("simulated broken MCP SDK install")\n')
    broken = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path / "shadow"), env.get("PYTHONPATH")])))
    broken["XDG_CACHE_HOME"] = str(tmp_path / "no-cache")  # no tool list cached: tools/list waits for the SDK
    p = procs.popen(
        [sys.executable, "-m", "sitlpool", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=broken,
    )
    out, err = p.communicate(
        line(init(1)) + line(INITED) + line({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}), timeout=60
    )
    resp = [json.loads(x) for x in out.splitlines()]
    assert [r["id"] for r in resp] == [1, 2] and "simulated broken MCP SDK install" in resp[1]["error"]["message"]
    assert p.returncode == 1 and "Traceback" not in err.decode()
