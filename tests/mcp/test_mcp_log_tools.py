"""The flight-log MCP tools (issue 21) through the real MCP client over stdio: kept logs
listed, summarised, read, paged, compared, pinned and drawn, named by id only; a flying
session's live log; every bad input one line."""

import base64
import io
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import pytest

from mcp_client import ToolFailed, server
from sitlpool.logs import LogStore

pytestmark = pytest.mark.anyio

HOP = Path(__file__).resolve().parents[2].parent / "shared" / "logs" / "copter-hop.BIN"  # as tests/logs/logfiles.py


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def hop(tmp_path) -> Path:
    if not HOP.is_file():
        pytest.skip(f"no real log at {HOP} (../shared beside the checkout)")
    return HOP


def keep(data_dir: Path, tmp_path: Path, hop: Path, name: str, **fields) -> str:
    """A copy of the real hop log kept in the test's store; its id."""
    src = tmp_path / "sitl" / name / "00000001.BIN"
    src.parent.mkdir(parents=True)
    shutil.copyfile(hop, src)
    return LogStore(data_dir).keep(src, fields).id


@pytest.fixture
def kept(env, data_dir, tmp_path, hop) -> dict:
    now = time.time()
    old = keep(data_dir, tmp_path, hop, "a", session="aaa111", label="hop-a", instance=3, end=now - 3600)
    new = keep(data_dir, tmp_path, hop, "b", session="bbb222", label="hop-b", instance=4, end=now - 10)
    return {"old": old, "new": new}


async def test_list_logs_newest_first_with_filters(env, kept):
    async with server(env) as call:
        doc = await call("list_logs")
        assert [r["id"] for r in doc["logs"]] == [kept["new"], kept["old"]]
        assert doc["total"] == 2 and doc["more"] is False and doc["live"] == []
        assert doc["kept_bytes"] == 2 * HOP.stat().st_size
        r = doc["logs"][0]
        assert (r["session"], r["label"], r["instance"], r["kind"], r["pinned"]) == ("bbb222", "hop-b", 4, "bin", False)
        assert [r["id"] for r in (await call("list_logs", session_id="aaa111"))["logs"]] == [kept["old"]]
        assert [r["id"] for r in (await call("list_logs", label="hop-b"))["logs"]] == [kept["new"]]
        assert [r["id"] for r in (await call("list_logs", since="30m"))["logs"]] == [kept["new"]]
        assert [r["id"] for r in (await call("list_logs", since=time.time() - 7200))["logs"]] == [
            kept["new"],
            kept["old"],
        ]
        page = await call("list_logs", limit=1)
        assert [r["id"] for r in page["logs"]] == [kept["new"]] and page["more"] is True and page["total"] == 2
        assert (await call("list_logs", session_id="nobody"))["logs"] == []


async def test_summary_fields_messages_of_a_kept_log(env, kept):
    log_id = kept["new"]
    async with server(env) as call:
        s = await call("log_summary", log_id=log_id)
        assert s["log_id"] == log_id and "path" not in s
        assert s["vehicle"] == "ArduCopter" and s["firmware"].startswith("ArduCopter V4.7")
        assert [m["mode"] for m in s["modes"]] == ["GUIDED", "LAND"]
        assert 9.5 < s["altitude"]["max"] < 10 and s["altitude"]["max_time"] > 42
        assert "takeoff" in [p["phase"] for p in s["phases"]]
        assert any(m["text"] == "Arming motors" for m in s["messages"])
        assert s["end"]["status"] == "truncated" and s["end"]["last_time"] == pytest.approx(75.297, abs=0.01)

        full = (await call("log_fields", log_id=log_id, fields=["CTUN.Alt"], max_points=10000))["fields"]["CTUN.Alt"]
        f = await call("log_fields", log_id=log_id, fields=["CTUN.Alt", "BAT.Volt"], max_points=20)
        assert f["log_id"] == log_id and "path" not in f
        alt = f["fields"]["CTUN.Alt"]
        assert len(alt["t"]) <= 20 and alt["downsampled"] and alt["count"] == full["count"] > 20
        assert max(alt["v"]) == max(full["v"]) and min(alt["v"]) == min(full["v"])  # the peaks are kept
        assert alt["t"] == sorted(alt["t"]) and f["fields"]["BAT.Volt"]["unit"] == "V"
        one = await call("log_fields", log_id=log_id, fields="CTUN.Alt BAT.Volt", max_points=20)  # one string
        assert one["fields"] == f["fields"]
        part = (await call("log_fields", log_id=log_id, fields=["CTUN.Alt"], t0=50, t1=60))["fields"]["CTUN.Alt"]
        assert part["t"] and 50 <= min(part["t"]) and max(part["t"]) <= 60

        m = await call("log_messages", log_id=log_id, type="MODE")
        assert m["log_id"] == log_id and "path" not in m and m["more"] is False
        assert [x["Mode"] for x in m["messages"]] == [4, 4, 9] and "Mode" in m["fields"]  # GUIDED, GUIDED, LAND
        page = await call("log_messages", log_id=log_id, type="MODE", offset=2, limit=1)
        assert [x["Mode"] for x in page["messages"]] == [9] and page["more"] is False
        page = await call("log_messages", log_id=log_id, type="MODE", offset=0, limit=2)
        assert [x["Mode"] for x in page["messages"]] == [4, 4] and page["more"] is True
        page = await call("log_messages", log_id=log_id, type="MSG", limit=2)
        assert len(page["messages"]) == 2 and page["more"] is True
        late = await call("log_messages", log_id=log_id, type="MODE", t0=45, t1=75)
        assert [(x["Mode"], x["time"]) for x in late["messages"]] == [(9, pytest.approx(51.605, abs=0.001))]


async def test_compare_pin_unpin(env, kept):
    async with server(env) as call:
        c = await call("log_compare", log_a=kept["old"], log_b=kept["new"])
        assert (c["a_id"], c["b_id"]) == (kept["old"], kept["new"])
        assert c["differences"] == [] and "max altitude" in c["same"]
        assert c["a"]["log_id"] == kept["old"] and "path" not in c["a"] and "path" not in c["b"]
        r = await call("pin_log", log_id=kept["old"])
        assert r["id"] == kept["old"] and r["pinned"] is True
        listed = {x["id"]: x["pinned"] for x in (await call("list_logs"))["logs"]}
        assert listed == {kept["old"]: True, kept["new"]: False}
        assert (await call("pin_log", log_id=kept["old"]))["pinned"] is True  # idempotent
        assert (await call("unpin_log", log_id=kept["old"]))["pinned"] is False
    assert LogStore(env["SITLPOOL_DATA_DIR"]).get(kept["old"]).pinned is False


async def test_log_picture_is_an_image_and_a_line(env, kept):
    from PIL import Image

    async with server(env) as call:
        r = await call.session.call_tool(
            "log_picture", {"log_id": kept["new"], "fields": ["CTUN.Alt", "BAT.Volt"], "t0": 40, "t1": 76}
        )
        assert not r.is_error, " ".join(getattr(c, "text", "") for c in r.content)
        images = [c for c in r.content if c.type == "image"]
        texts = [c for c in r.content if c.type == "text"]
        assert len(images) == 1 and images[0].mime_type == "image/png"
        img = Image.open(io.BytesIO(base64.b64decode(images[0].data)))
        assert img.format == "PNG" and img.width >= 600 and img.height >= 300
        doc = json.loads(texts[0].text)
        assert doc["log_id"] == kept["new"] and doc["fields"] == ["CTUN.Alt", "BAT.Volt"] and doc["png_bytes"] > 1000
        with pytest.raises(ToolFailed, match="no field Altt"):
            await call("log_picture", log_id=kept["new"], fields=["CTUN.Altt"])


async def refused(call, tool: str, match: str, **args) -> str:
    """The tool refuses in one line matching ``match``."""
    with pytest.raises(ToolFailed) as e:
        await call(tool, **args)
    text = str(e.value)
    assert "\n" not in text.strip(), f"{tool} {args}: more than one line: {text!r}"
    assert len(text) < 2000, f"{tool}: {len(text)} characters"
    assert match.lower() in text.lower(), f"{tool} {args}: {text!r}"
    return text


async def test_bad_inputs_are_one_line_each(env, kept, data_dir, tmp_path):
    log_id = kept["new"]
    notbin = tmp_path / "sitl" / "junk" / "00000007.BIN"
    notbin.parent.mkdir(parents=True)
    notbin.write_text("this is not a DataFlash log\n" * 10)
    junk = LogStore(data_dir).keep(notbin, {"session": "ccc333"}).id
    async with server(env) as call:
        for tool in ("log_summary", "pin_log", "unpin_log"):
            await refused(call, tool, "not a log id", log_id="../../etc/passwd")
        await refused(call, "log_summary", "not a log id", log_id=str(HOP))  # a path to a real log: ids only
        await refused(call, "log_summary", "not a log id", log_id=str(LogStore(data_dir).path(log_id)))
        await refused(call, "log_fields", "not a log id", log_id="/etc/passwd", fields=["CTUN.Alt"])
        await refused(call, "log_compare", "not a log id", log_a=log_id, log_b="../x.BIN")
        await refused(call, "log_summary", "no kept log 20261201-124301-a1b2c3", log_id="20261201-124301-a1b2c3")
        await refused(call, "pin_log", "no kept log", log_id="20261201-124301-a1b2c3")
        text = await refused(call, "log_summary", "not a log id", log_id="x" * 10000)
        assert len(text) < 300
        await refused(call, "log_summary", "give a log id", log_id="")
        await refused(call, "log_summary", "not a DataFlash log", log_id=junk)
        # unknown fields and types name the ones that exist
        text = await refused(call, "log_fields", "CTUN has no field Altt", log_id=log_id, fields=["CTUN.Altt"])
        assert "Alt" in text.split("CTUN fields:")[1]
        await refused(call, "log_fields", "no message type CTUNX (closest: CTUN", log_id=log_id, fields=["CTUNX.Alt"])
        await refused(call, "log_fields", "not a TYPE.Field name", log_id=log_id, fields=["../../etc/passwd"])
        await refused(call, "log_fields", "no fields asked for", log_id=log_id, fields=[])
        await refused(call, "log_messages", "no message type FOO", log_id=log_id, type="FOO")
        # time ranges outside the log say the log's range
        await refused(call, "log_fields", "outside", log_id=log_id, fields=["CTUN.Alt"], t0=1000)
        await refused(call, "log_fields", "ends before it starts", log_id=log_id, fields=["CTUN.Alt"], t0=60, t1=50)
        await refused(call, "log_messages", "outside", log_id=log_id, type="GPS", t1=1)
        await refused(call, "log_picture", "outside", log_id=log_id, fields=["CTUN.Alt"], t0=1000)
        # sizes
        await refused(call, "log_fields", "max_points must be", log_id=log_id, fields=["CTUN.Alt"], max_points=10**9)
        await refused(call, "log_fields", "max_points must be", log_id=log_id, fields=["CTUN.Alt"], max_points=1)
        await refused(call, "log_messages", "limit must be", log_id=log_id, type="MODE", limit=5000)
        await refused(call, "log_messages", "offset must be", log_id=log_id, type="MODE", offset=-1)
        await refused(call, "log_picture", "at most 8 fields", log_id=log_id, fields=["CTUN.Alt"] * 9)
        await refused(call, "list_logs", "limit must be", limit=0)
        await refused(call, "list_logs", "limit must be", limit=10**6)
        await refused(call, "list_logs", "since='yesterday'", since="yesterday")
        # live logs: open sessions of this server only, never pinned before they are kept
        await refused(call, "log_summary", "unknown session 'zzzzzz'", log_id="live:zzzzzz")
        await refused(call, "pin_log", "still being written", log_id="live:zzzzzz")
        # the server still answers
        assert (await call("log_summary", log_id=log_id))["log_id"] == log_id


@pytest.fixture
def nobody_dir():
    """A directory user nobody may enter (pytest's own temporary directories are root's only)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root (to run the server as another user) and setpriv")
    d = Path(tempfile.mkdtemp(prefix="sitlpool-log-tools-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d)


async def test_a_log_another_user_keeps_private_is_refused(env, kept, data_dir, nobody_dir):
    """In a group-shared data dir a user reads the logs they may read: another user's private
    record is neither listed nor read nor pinned, and a record they may only read is not
    pinned (the server runs as user nobody here; the logs are root's)."""
    dd = nobody_dir / "data"
    shutil.copytree(data_dir / "logs", dd / "logs")
    for rec in (dd / "logs" / "records").glob("*.json"):  # the records name the logs where they now are
        rec.write_text(rec.read_text().replace(str(data_dir), str(dd)))
    for root, _dirs, files in os.walk(dd):
        os.chmod(root, 0o2775)
        for f in files:
            os.chmod(Path(root) / f, 0o644)
    os.chmod(dd, 0o3777)
    os.chmod(dd / "logs" / "records" / f"{kept['old']}.json", 0o600)  # root's, private
    home = nobody_dir / "home"
    home.mkdir()
    os.chown(home, 65534, 65534)
    e = dict(env, SITLPOOL_DATA_DIR=str(dd), HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"))
    async with server_as(e, ["--reuid=65534", "--regid=65534", "--clear-groups", sys.executable]) as call:
        assert (await call("server_info"))["data_dir"] == str(dd)
        doc = await call("list_logs")
        assert [r["id"] for r in doc["logs"]] == [kept["new"]]  # the private one is not listed
        await refused(call, "log_summary", "belongs to another user", log_id=kept["old"])
        await refused(call, "log_fields", "belongs to another user", log_id=kept["old"], fields=["CTUN.Alt"])
        await refused(call, "pin_log", "belongs to another user", log_id=kept["old"])
        assert (await call("log_summary", log_id=kept["new"]))["vehicle"] == "ArduCopter"  # readable: read
        await refused(call, "pin_log", f"cannot pin log {kept['new']}", log_id=kept["new"])  # root's record
    assert LogStore(dd).get(kept["new"]).pinned is False


def server_as(env, setpriv_args):
    """``mcp_client.server`` with the server under ``setpriv`` (another user)."""
    from contextlib import asynccontextmanager

    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from mcp_client import Client

    @asynccontextmanager
    async def run():
        params = StdioServerParameters(
            command=shutil.which("setpriv"), args=[*setpriv_args, "-m", "sitlpool", "serve"], env=env
        )
        with open(os.devnull, "w") as log:
            async with stdio_client(params, errlog=log) as (r, w):
                async with ClientSession(r, w) as session:
                    await session.initialize()
                    yield Client(session)

    return run()


# ---- a live log: a flying session's log read while it flies, then kept ---------------------------


async def test_live_log_of_a_flying_session(env, instances, vehicle_binary):
    """A session's log is read live while it flies (``live:<session_id>``), then kept when
    the session closes, under the session's id and label."""
    e = dict(env)
    if vehicle_binary is not None:
        e["SITLPOOL_SITL_BINARY"] = str(vehicle_binary)
    async with server(e) as call:
        s = await call("open_sitl", label="live-hop", speedup=5)
        sid = s["session_id"]
        w = await call("wait_until", session_id=sid, condition="ready_to_arm", timeout_s=50)
        assert w["result"] == "met", w
        await call("set_mode", session_id=sid, mode="GUIDED")
        await call("arm", session_id=sid)
        await call("takeoff", session_id=sid, altitude_m=8)
        w = await call("wait_until", session_id=sid, condition="altitude_above", value=7.5, timeout_s=40)
        assert w["result"] == "met", w
        listed = (await call("list_logs", session_id=sid))["live"]
        if listed:
            await read_live_then_kept(call, sid, listed)
        else:
            await call("close_sitl", session_id=sid)
    if not listed:  # skipped outside the client's task group: inside it, the skip's reason is lost
        pytest.skip("the vehicle wrote no DataFlash log after arming (the built-in vehicle's logging is not wired yet)")


async def read_live_then_kept(call, sid: str, listed: list) -> None:
    live = f"live:{sid}"
    assert listed == [{"log_id": live, "session": sid, "label": "live-hop", "size": listed[0]["size"], "live": True}]
    assert listed[0]["size"] > 0
    summary = await call("log_summary", log_id=live)
    assert summary["log_id"] == live and summary["arming"], summary
    assert summary["altitude"]["max"] > 5
    assert "GUIDED" in [m["mode"] for m in summary["modes"]]
    f = await call("log_fields", log_id=live, fields=["CTUN.Alt"], max_points=50)
    assert max(f["fields"]["CTUN.Alt"]["v"]) > 5
    assert (await call("log_messages", log_id=live, type="MODE"))["messages"]
    r = await call.session.call_tool("log_picture", {"log_id": live, "fields": ["CTUN.Alt"]})
    assert not r.is_error and [c.type for c in r.content] == ["image", "text"]
    await refused(call, "pin_log", "still being written", log_id=live)
    await call("land", session_id=sid)
    await call("wait_until", session_id=sid, condition="disarmed", timeout_s=50)
    await call("close_sitl", session_id=sid)
    await refused(call, "log_summary", f"unknown session {sid!r}", log_id=live)  # closed: no live log
    kept = (await call("list_logs", session_id=sid))["logs"]
    assert kept and kept[0]["label"] == "live-hop" and kept[0]["session"] == sid, kept
    again = await call("log_summary", log_id=kept[0]["id"])
    assert again["altitude"]["max"] >= summary["altitude"]["max"] - 0.5
    assert (await call("pin_log", log_id=kept[0]["id"]))["pinned"] is True


async def test_live_log_before_arming_and_after_the_sitl_died(env, instances):
    async with server(env) as call:
        s = await call("open_sitl", label="no-log-yet", speedup=5)
        sid, live = s["session_id"], f"live:{s['session_id']}"
        await refused(call, "log_summary", f"session {sid} has no log yet: ArduPilot starts one at arming", log_id=live)
        assert (await call("list_logs", session_id=sid))["live"] == []
        os.kill(s["pid"], signal.SIGKILL)
        w = await call("wait_until", session_id=sid, condition="armed", timeout_s=20)
        assert w["result"] == "died", w
        await refused(call, "log_fields", f"list_logs(session_id='{sid}')", log_id=live, fields=["CTUN.Alt"])
        await call("close_sitl", session_id=sid)


async def test_an_attached_sessions_live_log_is_read_in_place(env, instances):
    """Server B attaches to the vehicle server A flies: B reads its live log where it is
    written, and never keeps it (not B's); A keeps it when it closes its session."""
    async with server(env) as a, server(env) as b:
        s = await a("open_sitl", label="flown-by-a", speedup=5)
        w = await a("wait_until", session_id=s["session_id"], condition="ready_to_arm", timeout_s=50)
        assert w["result"] == "met", w
        await a("set_mode", session_id=s["session_id"], mode="GUIDED")
        await a("arm", session_id=s["session_id"])
        await a("takeoff", session_id=s["session_id"], altitude_m=5)
        w = await a("wait_until", session_id=s["session_id"], condition="altitude_above", value=4.5, timeout_s=40)
        assert w["result"] == "met", w
        seen = await b("attach_sitl", instance=s["instance"], label="watcher")
        live = (await b("list_logs", session_id=seen["session_id"]))["live"]
        if live:
            summary = await b("log_summary", log_id=f"live:{seen['session_id']}")
            assert summary["arming"] and summary["altitude"]["max"] > 3
            await b("close_sitl", session_id=seen["session_id"])
            assert (await b("list_logs", session_id=seen["session_id"]))["logs"] == []  # not B's to keep
            await a("close_sitl", session_id=s["session_id"])
            kept = (await a("list_logs", session_id=s["session_id"]))["logs"]
            assert [r["label"] for r in kept] == ["flown-by-a"] and kept[0]["managed"] is True
        else:
            await b("close_sitl", session_id=seen["session_id"])
            await a("close_sitl", session_id=s["session_id"])
    if not live:  # outside the clients' task groups (see test_live_log_of_a_flying_session)
        pytest.skip("the vehicle wrote no DataFlash log after arming (the built-in vehicle's logging is not wired yet)")
