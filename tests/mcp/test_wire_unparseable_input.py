"""Issue 20, item 10 and its siblings: nothing a client sends raises out of the stdio wire.
A deeply nested first line killed ``sitlpool serve`` (RecursionError, no answer); now every
line that is no JSON-RPC message gets its JSON-RPC error and the server keeps serving."""

import json
import subprocess

from test_stdio_wire import SERVE, init
from test_stdio_wire_hostile import INITED, end, line, read, serve
from test_tools_list_early import without_sdk

DEEP = b"[" * 100_000 + b"]" * 100_000
DEEP_REQUEST = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":' + b"[" * 5000 + b"]" * 5000 + b"}"
PARSE_ERROR = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}


def test_a_deeply_nested_first_line_gets_a_parse_error_and_the_server_serves_on(procs, env):
    for first in (DEEP, DEEP_REQUEST, b'{"a":' * 50_000 + b"1" + b"}" * 50_000):
        p = serve(procs, env)
        p.stdin.write(
            first + b"\n" + line(init(1)) + line(INITED) + line({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        )
        got = read(p, 3)
        assert got[0] == PARSE_ERROR
        assert got[1]["id"] == 1 and got[1]["result"]["serverInfo"]["name"] == "sitlpool"
        assert got[2]["id"] == 2 and got[2]["result"]["tools"]
        rc, rest, err = end(p)
        assert rc == 0 and rest == [] and "Traceback" not in err and "RecursionError" not in err


def test_bad_lines_once_the_sdk_serves(procs, env):
    """After the hand-over: parse errors, an invalid request answered with its id, and the
    session goes on (the SDK itself drops such lines without a word)."""
    p = serve(procs, env)
    p.stdin.write(line(init(1)) + line(INITED) + line({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
    assert [r["id"] for r in read(p, 2)] == [1, 2]
    p.stdin.write(DEEP + b"\n" + b"not json\n" + b"\n")
    p.stdin.write(line({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": 5}))
    p.stdin.write(line([1, 2]) + line({"jsonrpc": "2.0", "id": 8, "method": "ping"}))
    got = read(p, 5)
    assert got[:2] == [PARSE_ERROR, PARSE_ERROR]
    assert got[2] == {"jsonrpc": "2.0", "id": 7, "error": {"code": -32600, "message": "Invalid Request"}}
    assert got[3]["id"] is None and got[3]["error"]["code"] == -32600
    assert got[4] == {"jsonrpc": "2.0", "id": 8, "result": {}}
    rc, rest, err = end(p)
    assert rc == 0 and rest == [] and "Traceback" not in err


def test_a_server_that_cannot_start_answers_bad_lines_too(env, tmp_path):
    broken = dict(without_sdk(env, tmp_path), XDG_CACHE_HOME=str(tmp_path / "no-cache"))
    p = subprocess.run(
        SERVE,
        input=line(init(1)) + DEEP + b"\n" + line({"jsonrpc": "2.0", "id": 3, "method": "ping"}),
        env=broken,
        capture_output=True,
        timeout=60,
    )
    resp = [json.loads(x) for x in p.stdout.splitlines()]
    assert [r["id"] for r in resp] == [1, None, 3] and resp[1] == PARSE_ERROR
    assert p.returncode == 1 and "Traceback" not in p.stderr.decode()
