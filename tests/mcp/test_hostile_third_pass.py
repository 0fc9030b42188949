"""A hostile third pass over the MCP tools added by issues 20-25, through the real MCP client
over stdio: what an agent can make the server do with the log tools and a log store another
member of a shared group writes into."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import anyio
import pytest

from mcp_client import ToolFailed, server
from sitlpool.logs import LogReader, LogStore

pytestmark = pytest.mark.anyio

HOP = Path(__file__).resolve().parents[2].parent / "shared" / "logs" / "copter-hop.BIN"


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def kept(env, data_dir, tmp_path) -> str:
    if not HOP.is_file():
        pytest.skip(f"no real log at {HOP} (../shared beside the checkout)")
    src = tmp_path / "sitl" / "00000001.BIN"
    src.parent.mkdir(parents=True)
    shutil.copyfile(HOP, src)
    return LogStore(data_dir).keep(src, {"session": "s1"}).id


async def test_log_fields_of_every_field_at_most_points_is_refused_not_megabytes(env, kept):
    """Every field of a log at 10000 points each: megabytes for a short hop (hundreds for a
    long flight) into an agent's context. One line instead, saying how to ask."""
    d = LogReader(HOP).describe()
    names = [f"{t}.{c}" for t, v in d["types"].items() if v["count"] for c in v["fields"]]
    async with server(env) as call:
        try:
            got = await call("log_fields", log_id=kept, fields=names, max_points=10000)
        except ToolFailed as e:
            assert "fewer fields" in str(e) and len(str(e)) < 300
        else:
            pytest.fail(f"answered {len(json.dumps(got)) / 1e6:.1f} MB of series")
        few = await call("log_fields", log_id=kept, fields=["CTUN.Alt", "BAT.Volt"], max_points=10000)
        assert few["fields"]["CTUN.Alt"]["count"] > 0


async def test_list_logs_survives_a_planted_garbage_record_and_fifo(env, data_dir, kept):
    """Another member of a shared store plants records: garbage, a FIFO, a record pointing at a
    file outside the store. list_logs still answers (without them); log_summary of the outside one
    is one line; nothing outside the store is read or deleted."""
    store = LogStore(data_dir)
    victim = data_dir.parent / "victim.BIN"
    shutil.copyfile(HOP, victim)
    old = time.time() - 86400
    os.utime(victim, (old, old))
    (store.records / "20200101-000000-000001.json").write_text(json.dumps({"id": "20200101-000000-000001", "end": "x"}))
    os.mkfifo(store.records / "20200101-000000-000002.json")
    bad = "20200101-000000-000003"
    (store.records / f"{bad}.json").write_text(
        json.dumps({"id": bad, "kind": "bin", "path": str(victim), "size": 1, "managed": True, "end": old})
    )
    async with server(env) as call:
        with anyio.fail_after(30):  # a FIFO opened for reading blocks until a writer comes
            doc = await call("list_logs")
        assert kept in [r["id"] for r in doc["logs"]]
        with pytest.raises(ToolFailed, match="outside the log store"):
            await call("log_summary", log_id=bad)
    LogStore(data_dir, 0.000001).prune()
    assert victim.exists()


async def test_a_second_http_server_on_the_same_port_keeps_the_first_ones_token_file(env, procs, instances):
    """``serve --http P`` on 127.0.0.1 and a second on 127.0.0.2 (both loopback, both bind):
    the second must not replace the first one's token file (its clients would be refused),
    nor remove it when it stops."""
    import signal
    import subprocess
    import sys

    from test_http_token import INIT, listening

    port = 22000 + instances[0] % 1000
    d = Path(env["SITLPOOL_DATA_DIR"]) / "http"

    def serve(host: str):
        return procs.popen(
            [sys.executable, "-m", "sitlpool", "serve", "--http", str(port), "--host", host],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def post(host: str, token: str) -> int:
        import http.client

        c = http.client.HTTPConnection(host, port, timeout=10)
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        c.request("POST", "/mcp", body=json.dumps(INIT), headers={**h, "Authorization": f"Bearer {token}"})
        status = c.getresponse().status
        c.close()
        return status

    from conftest import wait_for

    serve("127.0.0.1")
    first = d / f"serve-{port}.token"
    wait_for(lambda: first.exists() and listening(port), timeout=30, what="the first server")
    token_a = first.read_text().strip()
    b = serve("127.0.0.2")
    wait_for(lambda: len(list(d.glob(f"serve-{port}*.token"))) == 2, timeout=30, what="the second server's token")
    assert first.read_text().strip() == token_a, "the second server replaced the first one's token file"
    assert post("127.0.0.1", first.read_text().strip()) == 200
    b.send_signal(signal.SIGTERM)
    b.wait(30)
    assert first.exists() and post("127.0.0.1", first.read_text().strip()) == 200
