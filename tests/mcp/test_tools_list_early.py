"""Issue 19: ``tools/list`` is answered before the MCP SDK is loaded, from the tool list the
server rendered from its own definitions at a previous start (``server.toolcache``), and
that answer is the SDK's own, to the byte of JSON."""

import json
import os
import shutil
import subprocess
import time

import pytest
from test_stdio_wire import SERVE, by_id, init, talk
from test_stdio_wire_hostile import INITED, line

from sitlpool.server import early, toolcache

LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
META = {
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
}


def without_sdk(env, tmp_path) -> dict:
    """``env`` where the MCP SDK cannot load (an ``mcp`` package that raises, shadowing the
    real one; ``mcp_types`` stays): whatever is answered with a result came from the wire."""
    shadow = tmp_path / "shadow" / "mcp"
    shadow.mkdir(parents=True, exist_ok=True)
    (shadow / "__init__.py").write_text('raise ImportError("no MCP SDK in this test")\n')
    return dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(shadow.parent), env.get("PYTHONPATH")])))


def listed(resp) -> bool:
    return any("tools" in (r.get("result") or {}) for r in resp)


def ask(env, *msgs):
    """Send ``msgs`` to a server that may fail to load; every response it wrote."""
    p = subprocess.run(SERVE, input=b"".join(line(m) for m in msgs), env=env, capture_output=True, timeout=60)
    return [json.loads(x) for x in p.stdout.splitlines()], p.stderr.decode()


def test_tools_list_is_the_sdks_answer_given_before_the_sdk_loads(procs, env, tmp_path):
    env = dict(env, XDG_CACHE_HOME=str(tmp_path / "cache"))
    # a first start: nothing cached, the SDK answers (and the server caches its tool list)
    resp, err = talk(procs, env, init(1), INITED, LIST, expect=(1, 2))
    sdk_legacy = by_id(resp, 2)[0]["result"]
    resp, err = talk(
        procs,
        env,
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": META},
        {**LIST, "params": META},
        expect=(1, 2),
    )
    sdk_modern = by_id(resp, 2)[0]["result"]
    [entry] = (tmp_path / "cache" / "sitlpool").glob("mcp-tools-*.json")
    assert entry.stat().st_mode & 0o777 == 0o600
    # the next start answers from the cache: with no SDK at all, the answers are the same
    broken = without_sdk(env, tmp_path)
    resp, err = ask(broken, init(1), INITED, LIST, {"jsonrpc": "2.0", "id": 3, "method": "ping"})
    assert by_id(resp, 2)[0]["result"] == sdk_legacy
    assert "no MCP SDK in this test" in by_id(resp, 3)[0]["error"]["message"]  # the SDK really was absent
    resp, err = ask(
        broken, {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": META}, {**LIST, "params": META}
    )
    assert by_id(resp, 2)[0]["result"] == sdk_modern
    # with the SDK: answered once, and the SDK's own answer, compared by the server, is the same
    for version in ("2025-11-25", "2024-11-05"):
        resp, err = talk(procs, env, init(1, version), INITED, LIST, expect=(1, 2))
        assert len(by_id(resp, 2)) == 1 and by_id(resp, 2)[0]["result"] == sdk_legacy
        assert "differs" not in err and "did not answer" not in err, err


def test_what_is_not_answered_early(procs, env, tmp_path):
    """Before notifications/initialized, with a cursor, with an id already used, or without a
    trustworthy cache entry: the SDK answers (here: it cannot, so the request is refused)."""
    env = dict(env, XDG_CACHE_HOME=str(tmp_path / "cache"))
    talk(procs, env, init(1), INITED, LIST, expect=(1, 2))  # cache it
    broken = without_sdk(env, tmp_path)
    for msgs in (
        [init(1), LIST, INITED],
        [init(1), INITED, {**LIST, "params": {"cursor": "x"}}],
        [init(2), INITED, LIST],
        [{"jsonrpc": "2.0", "id": 9, "method": "ping"}, init(1), INITED, LIST],
    ):
        resp, _ = ask(broken, *msgs)
        assert not listed(resp), msgs
    [entry] = (tmp_path / "cache" / "sitlpool").glob("mcp-tools-*.json")
    for mode in (0o620, 0o602):  # writable by others: a planted list is never read
        entry.chmod(mode)
        resp, _ = ask(broken, init(1), INITED, LIST)
        assert not listed(resp) and "error" in by_id(resp, 2)[0]
    entry.chmod(0o600)
    assert listed(ask(broken, init(1), INITED, LIST)[0])


def test_a_client_slower_than_the_failing_sdk_is_still_answered_from_the_cache(procs, env, tmp_path):
    """The SDK fails in milliseconds; a client (descheduled under load) sends its first bytes
    after that, then each message only once the last was answered, as MCP clients do:
    initialize and tools/list still come from the cache, the rest is refused naming why."""
    env = dict(env, XDG_CACHE_HOME=str(tmp_path / "cache"))
    talk(procs, env, init(1), INITED, LIST, expect=(1, 2))  # cache it
    p = procs.popen(
        SERVE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=without_sdk(env, tmp_path)
    )
    time.sleep(0.5)  # the client's scheduling delay, not a wait for the server: any value up to ~1 s
    got = []
    for msg, answer in ((init(1), 1), (INITED, None), (LIST, 2), ({"jsonrpc": "2.0", "id": 3, "method": "ping"}, 3)):
        p.stdin.write(line(msg))
        p.stdin.flush()
        if answer is not None:
            got.append(json.loads(p.stdout.readline()))
            assert got[-1]["id"] == answer, got
    p.stdin.close()
    assert p.wait(30) == 1
    assert "protocolVersion" in got[0]["result"] and listed([got[1]])
    assert "cannot serve" in got[2]["error"]["message"] and "no MCP SDK in this test" in got[2]["error"]["message"]


def test_the_key_follows_the_tool_definitions(tmp_path, monkeypatch):
    """An edited tool (any source of sitlpool.server) or another version is another key."""
    copy = tmp_path / "server"
    shutil.copytree(toolcache.HERE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(toolcache, "HERE", copy)
    k = toolcache.key(early.version())
    assert toolcache.key(early.version()) == k
    assert toolcache.key(early.version() + ".dev1") != k
    tools = copy / "tools" / "flight.py"
    tools.write_text(tools.read_text().replace("Return to launch and land.", "Return to launch."))
    assert toolcache.key(early.version()) != k


@pytest.fixture
def anyio_backend():
    return "asyncio"
