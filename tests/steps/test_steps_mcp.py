"""fly_steps, steps_status, abort_steps and repro through the real MCP client over stdio, on
the built-in vehicle; and the step vocabulary is the MCP flight tools' own (names and arguments)."""

import time
from pathlib import Path

import anyio
import pytest

from mcp_client import ToolFailed, server
from sitlpool.leases import LeasePool
from sitlpool.steps import TOOLS

pytestmark = pytest.mark.anyio

HOME = (-35.3632621, 149.1652374)
HOP = [
    {"tool": "wait_until", "condition": "ready_to_arm", "timeout_s": 60},
    {"tool": "set_params", "values": {"WPNAV_SPEED": 800}},
    {"tool": "arm"},
    {"tool": "takeoff", "altitude_m": 5},
    {"tool": "wait_until", "condition": "altitude_above", "value": 4.7, "timeout_s": 30},
    {"tool": "goto", "lat": HOME[0], "lon": HOME[1] + 0.0001, "altitude_m": 5},
    {"tool": "wait_until", "condition": "reached", "value": 0.5, "timeout_s": 30},
    {"hold_s": 2},
    {"tool": "land"},
    {"tool": "wait_until", "condition": "disarmed", "timeout_s": 60},
    {"hold_s": 1},
]


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def until_done(call, run_id: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        st = await call("steps_status", run_id=run_id)
        if st["done"] or time.monotonic() > deadline:
            return st
        await anyio.sleep(0.2)


async def test_vocabulary_is_the_mcp_tools(env):
    async with server(env) as call:
        tools = {t.name: t for t in (await call.session.list_tools()).tools}
    for name, tool in TOOLS.items():
        assert name in tools, name
        props = set(tools[name].input_schema["properties"]) - {"session_id"}
        assert set(tool.parameters) == props, name
        required = set(tools[name].input_schema.get("required", [])) - {"session_id"}
        assert set(tool.required) == required, name
    assert {"fly_steps", "steps_status", "abort_steps", "repro"} <= set(tools)


async def test_fly_steps_returns_at_once_and_repro_compares(env, instances):
    async with server(env) as call:
        t0 = time.monotonic()
        started = await call("fly_steps", steps=HOP, speedup=20, label="mcp-hop")
        assert time.monotonic() - t0 < 10  # the launch, not the flight
        assert set(started) == {"run_id", "session_id", "steps"}
        early = await call("steps_status", run_id=started["run_id"])
        assert early["steps_total"] == len(HOP) and not early["done"]
        st = await until_done(call, started["run_id"])
        assert st["ok"] is True and st["state"] == "done", st["error"]
        assert st["steps_done"] == len(HOP) and st["log_ids"] and Path(st["recipe"]).is_file()
        assert st["outcomes"][1]["result"] == {"set": {"WPNAV_SPEED": 800.0}}
        assert started["session_id"] not in [s["session_id"] for s in await call("list_sessions")]

        again = await call("repro", run_id=started["run_id"])
        st2 = await until_done(call, again["run_id"])
        assert st2["ok"] and st2["repro_of"] == started["run_id"]
        c = st2["comparison"]
        assert c["exact"] is True and c["logs"]["differences"] == [], c
        # by a log it left, too
        by_log = await call("repro", log_id=st["log_ids"][0], speedup=20)
        assert by_log["repro_of"] == started["run_id"]
        await call("abort_steps", run_id=by_log["run_id"])

        with pytest.raises(ToolFailed, match="step 1 .takeoff.: unknown argument alt; takeoff takes altitude_m"):
            await call("fly_steps", steps=[{"tool": "takeoff", "alt": 5}])
        with pytest.raises(ToolFailed, match="unknown step run 'nope'"):
            await call("steps_status", run_id="nope")
        with pytest.raises(ToolFailed, match="exactly one of run_id, log_id, session_id or recipe"):
            await call("repro")
    assert LeasePool(Path(env["SITLPOOL_DATA_DIR"]) / "leases", instances).status() == []


async def test_abort_steps_closes_the_session(env, instances):
    async with server(env) as call:
        started = await call("fly_steps", steps=[{"hold_s": 1000}], speedup=10, time_limit_s=2000)
        await anyio.sleep(0.5)
        out = await call("abort_steps", run_id=started["run_id"])
        assert out["aborted"] is True and out["state"] == "aborted"
        st = await call("steps_status", run_id=started["run_id"])
        assert st["done"] and st["state"] == "aborted" and st["ok"] is False
        assert await call("list_sessions") == []
    assert LeasePool(Path(env["SITLPOOL_DATA_DIR"]) / "leases", instances).status() == []
