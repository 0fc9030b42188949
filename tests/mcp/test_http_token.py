"""Issue 20, item 2: ``sitlpool serve --http`` answers only requests carrying its bearer
token (written 0600 for its owner); everything else gets 401. Before, any local user could
drive the server as its owner."""

import http.client
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from conftest import wait_for
from mcp_client import Client

pytestmark = pytest.mark.anyio

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}


@pytest.fixture
def anyio_backend():
    return "asyncio"


def start(procs, env, port, **extra):
    p = procs.popen(
        [sys.executable, "-m", "sitlpool", "serve", "--http", str(port)],
        env=dict(env, **extra),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    token_file = Path(env["SITLPOOL_DATA_DIR"]) / "http" / f"serve-{port}.token"
    wait_for(lambda: token_file.exists() and listening(port), timeout=30, what="the server and its token")
    return p, token_file


def listening(port) -> bool:
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.connect()
        c.close()
        return True
    except OSError:
        return False


def post(port, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **(headers or {})}
    c.request("POST", "/mcp", body=json.dumps(INIT), headers=h)
    r = c.getresponse()
    out = r.status, dict(r.getheaders()), r.read()
    c.close()
    return out


async def test_only_the_bearer_token_gets_in(env, procs, instances):
    port = 21000 + instances[0] % 1000  # no other test uses it at the same time
    p, token_file = start(procs, env, port)
    st, dst = token_file.stat(), token_file.parent.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and stat.S_IMODE(dst.st_mode) == 0o700
    assert st.st_uid == os.geteuid()
    token = token_file.read_text().strip()
    assert len(token) >= 32
    for headers in (
        None,
        {"Authorization": "Bearer " + "x" * len(token)},
        {"Authorization": "Bearer " + token[:-1]},
        {"Authorization": "Basic " + token},
        {"Authorization": token},
        {"Authorization": "Bearer"},
    ):
        status, h, body = post(port, headers)
        assert status == 401, (headers, status, body)
        assert {k.lower(): v for k, v in h.items()}["www-authenticate"].startswith("Bearer")
        assert "error" in json.loads(body)
    status, _, body = post(port, {"Authorization": f"Bearer {token}"})
    assert status == 200, body  # the SDK itself answered
    # a real MCP client, configured with the header as agents' clients are
    client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
    async with client, streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=client) as (r, w):
        async with ClientSession(r, w) as session:
            await session.initialize()
            info = await Client(session)("server_info")
            assert info["pool"] == instances
    # and the same client without the header is refused
    with pytest.raises(Exception):  # noqa: B017  (the SDK's transport error for a 401)
        with anyio.fail_after(30):
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (r, w):
                async with ClientSession(r, w) as session:
                    await session.initialize()
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=20)
    assert f"http://127.0.0.1:{port}/mcp; token in {token_file}" in err and token not in err
    assert not token_file.exists(), "the token file outlives its server"


def test_a_given_token_is_used_and_a_weak_one_refused(env, procs, instances):
    port = 22000 + instances[0] % 1000
    given = "t" * 20 + "0123456789abcdefXYZ-_~"
    p, token_file = start(procs, env, port, SITLPOOL_HTTP_TOKEN=given)
    assert token_file.read_text().strip() == given
    assert post(port, {"Authorization": f"Bearer {given}"})[0] == 200
    assert post(port)[0] == 401
    p.send_signal(signal.SIGTERM)
    p.wait(20)
    for weak in ("short", "x" * 31, "with spaces " * 4, "é" * 40):
        r = subprocess.run(
            [sys.executable, "-m", "sitlpool", "serve", "--http", str(port)],
            env=dict(env, SITLPOOL_HTTP_TOKEN=weak),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode != 0 and "SITLPOOL_HTTP_TOKEN" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
