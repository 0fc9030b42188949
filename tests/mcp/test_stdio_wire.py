"""The MCP server's stdio wire: ``initialize`` answered before the SDK is loaded, exactly
once, the same as the SDK's answer; everything else reaches the SDK unchanged."""

import json
import logging
import os
import select
import subprocess
import sys

import pytest

pytestmark = pytest.mark.anyio

from sitlpool.server import early, wire

SERVE = [sys.executable, "-m", "sitlpool", "serve"]


def init(rid=1, version="2025-11-25", **extra):
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
            **extra,
        },
    }


def talk(procs, env, *msgs, raw: bytes = b"", expect=()):
    """Start ``sitlpool serve``, send ``msgs`` (and ``raw`` first), read until a response
    for every id in ``expect`` came (the SDK drops requests still in flight at EOF), close
    stdin, return (responses, stderr)."""
    # unbuffered: select() sees every line not yet read (readline reads byte by byte)
    p = procs.popen(SERVE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, bufsize=0)
    p.stdin.write(raw + b"".join(json.dumps(m).encode() + b"\n" for m in msgs))
    p.stdin.flush()
    resp = []
    while not set(expect) <= {r.get("id") for r in resp}:
        if not select.select([p.stdout], [], [], 60)[0]:
            raise AssertionError(f"no answer within 60 s; got {resp}")
        line = p.stdout.readline()
        assert line, f"the server closed its stdout; got {resp}"
        resp.append(json.loads(line))
    out, err = p.communicate(b"", timeout=60)
    assert p.returncode == 0, err.decode()
    resp += [json.loads(line) for line in out.splitlines()]
    return resp, err.decode()


def by_id(responses, rid):
    return [r for r in responses if r.get("id") == rid]


@pytest.mark.parametrize("version", ["2025-11-25", "2024-11-05", "1999-01-01"])
def test_initialize_is_answered_once_and_as_the_sdk_answers_it(procs, env, version):
    listed = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    resp, err = talk(
        procs, env, init(1, version), {"jsonrpc": "2.0", "method": "notifications/initialized"}, listed, expect=(1, 2)
    )
    [first] = by_id(resp, 1)  # one answer: the SDK's own was swallowed ...
    assert "differs" not in err, err  # ... and it said the same as ours (the server compares them)
    r = first["result"]
    assert r["protocolVersion"] == (version if version != "1999-01-01" else early.protocol_versions()[0][-1])
    assert r["serverInfo"]["name"] == "sitlpool" and r["serverInfo"]["version"] == early.version() != ""
    assert r["capabilities"]["tools"] == {"listChanged": False}
    [tools] = by_id(resp, 2)  # the SDK, now loaded, has the session initialized
    names = {t["name"] for t in tools["result"]["tools"]}
    assert {"open_sitl", "snapshot", "wait_until", "close_sitl"} <= names


def meta(**kw):
    return {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {},
            **kw,
        }
    }


def test_server_discover_is_answered_early_too(procs, env):
    """The 2026-07-28 protocol opens with ``server/discover`` instead of ``initialize``."""
    modern = early.protocol_versions()[1]
    if not modern:
        pytest.skip("this MCP SDK has no per-request protocol")
    resp, err = talk(
        procs,
        env,
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": meta()},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": meta()},
        expect=(1, 2),
    )
    [first] = by_id(resp, 1)
    assert "differs" not in err, err
    assert first["result"]["supportedVersions"] == list(modern)
    assert by_id(resp, 2)[0]["result"]["tools"]


async def test_the_sdks_own_client_in_both_modes(env, tmp_path):
    """``mcp.Client`` as agents' code uses it: ``auto`` (discover, then per-request) and
    ``legacy`` (initialize): both connect, list and call, and the SDK agreed with our answer."""
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from mcp import Client

    for mode in ("auto", "legacy"):
        errlog = tmp_path / f"{mode}.log"
        with open(errlog, "w") as log:
            params = StdioServerParameters(command=SERVE[0], args=SERVE[1:], env=env)
            async with Client(stdio_client(params, errlog=log), mode=mode) as c:
                assert "open_sitl" in {t.name for t in (await c.list_tools()).tools}
                r = await c.call_tool("server_info", {})
                assert not r.is_error and "server_id" in r.content[0].text
        assert "differs" not in errlog.read_text(), errlog.read_text()


def test_a_first_message_that_is_not_initialize_goes_to_the_sdk(procs, env):
    ping = {"jsonrpc": "2.0", "id": 7, "method": "ping"}
    resp, _ = talk(
        procs,
        env,
        ping,
        init(8),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 9, "method": "tools/list"},
        expect=(7, 8, 9),
    )
    assert len(by_id(resp, 7)) == 1 and len(by_id(resp, 8)) == 1
    assert by_id(resp, 8)[0]["result"]["serverInfo"]["name"] == "sitlpool"
    assert by_id(resp, 9)[0]["result"]["tools"]
    # a line that is not JSON first: the SDK's parse error, then a normal session
    resp, _ = talk(
        procs,
        env,
        init(3),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/list"},
        raw=b"this is not json\n",
        expect=(3, 4),
    )
    assert len(by_id(resp, 3)) == 1 and by_id(resp, 4)[0]["result"]["tools"]


def test_a_malformed_initialize_gets_the_sdks_error_not_an_early_answer(procs, env):
    bad = {"jsonrpc": "2.0", "id": 5, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}
    resp, _ = talk(procs, env, bad, expect=(5,))
    [r] = by_id(resp, 5)
    assert "error" in r and "result" not in r


def test_a_client_that_leaves_at_once_ends_the_server(procs, env):
    resp, err = talk(procs, env)
    assert resp == [] and "Traceback" not in err


def test_children_and_stray_prints_cannot_reach_the_wire(procs, env):
    """fd 1 of the serving process is its stderr and fd 0 is /dev/null: a SITL or a print
    never writes into the JSON-RPC stream and never reads it."""
    p = procs.popen(SERVE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    p.stdin.write(json.dumps(init()).encode() + b"\n")
    p.stdin.flush()
    assert json.loads(p.stdout.readline())["id"] == 1
    p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n{"jsonrpc":"2.0","id":2,"method":"ping"}\n')
    p.stdin.flush()
    assert json.loads(p.stdout.readline())["id"] == 2  # the SDK is serving
    fd = f"/proc/{p.pid}/fd"
    assert os.readlink(f"{fd}/0") == "/dev/null"
    assert os.readlink(f"{fd}/1") == os.readlink(f"{fd}/2")
    p.stdin.close()
    assert p.wait(30) == 0


def test_a_difference_from_the_sdk_is_logged(caplog):
    """If a new SDK answers differently, the server says so (the test above would fail too)."""
    w = wire.Wire(fd=-1, out=None)
    w.pending[early.id_key(1)] = {"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-11-25"}}
    with caplog.at_level(logging.WARNING, logger="sitlpool.server"):
        assert w.seen_sdk_answer(json.dumps({"jsonrpc": "2.0", "id": 2, "result": {}})) is False  # not that request
        assert w.seen_sdk_answer(json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2026-07-28"}}))
        assert w.seen_sdk_answer(json.dumps({"jsonrpc": "2.0", "id": 1, "result": {}})) is False  # only once
    assert "differs" in caplog.text and "2026-07-28" in caplog.text


def test_a_server_that_cannot_start_says_why_to_every_request(procs, env, tmp_path):
    """Bad settings are found after ``initialize`` was answered: every request then gets
    the reason as its error (what an agent reads), and the server ends with the client."""
    bad = dict(env, SITLPOOL_POOL="forty", XDG_CACHE_HOME=str(tmp_path / "no-cache"))  # tools/list waits for the SDK
    p = procs.popen(SERVE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=bad)
    out, err = p.communicate(
        b"".join(
            json.dumps(m).encode() + b"\n"
            for m in (
                init(1),
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "open_sitl", "arguments": {}}},
            )
        ),
        timeout=60,
    )
    resp = [json.loads(line) for line in out.splitlines()]
    assert [r["id"] for r in resp] == [1, 2, 3] and "result" in resp[0]
    for r in resp[1:]:
        assert "SITLPOOL_POOL" in r["error"]["message"] and "forty" in r["error"]["message"]
    assert p.returncode == 1 and "SITLPOOL_POOL" in err.decode() and "Traceback" not in err.decode()
    assert not os.path.exists(os.path.join(env["SITLPOOL_DATA_DIR"], "leases")) or not os.listdir(
        os.path.join(env["SITLPOOL_DATA_DIR"], "leases")
    )


@pytest.fixture
def anyio_backend():
    return "asyncio"
