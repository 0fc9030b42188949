"""Every session records its recipe, not only a step run's: a session opened with open_sitl
and flown by hand through the MCP tools (arm, takeoff, land), then closed, leaves a recipe
(the binary and its SHA-256, model, speedup, the flight calls with the vehicle's sim times)
and ``repro(session_id=...)`` flies those calls again as steps on sim time, on the built-in
vehicle, to the same log summary."""

import json
import time
from pathlib import Path

import anyio
import pytest

from mcp_client import server
from sitlpool.steps.recipe import builtin_hash

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def until_done(call, run_id: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        st = await call("steps_status", run_id=run_id)
        if st["done"] or time.monotonic() > deadline:
            return st
        await anyio.sleep(0.2)


async def test_a_session_flown_by_tools_is_flown_again_by_repro(env, instances):
    async with server(env) as call:
        # speedup 10: a wall-clock latency (the client's calls, the kill at close) is half the sim time it is at 20
        opened = await call("open_sitl", speedup=10, label="by-hand", params={"WPNAV_SPEED_UP": 200})
        sid = opened["session_id"]
        ready = await call("wait_until", session_id=sid, condition="ready_to_arm", timeout_s=50)
        assert ready["result"] == "met", ready
        await call("set_mode", session_id=sid, mode="GUIDED")
        await call("arm", session_id=sid)
        await call("takeoff", session_id=sid, altitude_m=5)
        up = await call("wait_until", session_id=sid, condition="altitude_above", value=4.7, timeout_s=50)
        assert up["result"] == "met", up
        await call("land", session_id=sid)
        down = await call("wait_until", session_id=sid, condition="disarmed", timeout_s=50)
        assert down["result"] == "met", down
        # ended in a lasting state (2 sim s disarmed), as a flight to be compared should end
        t_down = down["snapshot"]["sim_time_s"]
        while (await call("snapshot", session_id=sid))["sim_time_s"] < t_down + 2:
            await anyio.sleep(0.05)
        closed = await call("close_sitl", session_id=sid)
        assert closed["logs"]

        started = await call("repro", session_id=sid)
        assert started["repro_of"] == f"session-{sid}"
        st = await until_done(call, started["run_id"])

    assert st["ok"] is True and st["state"] == "done", st.get("error")
    recipe = json.loads(Path(env["SITLPOOL_DATA_DIR"], "runs", f"session-{sid}", "recipe.json").read_text())
    assert recipe["kind"] == "session" and recipe["session_id"] == sid and recipe["speedup"] == 10
    assert recipe["params"] == {"WPNAV_SPEED_UP": 200.0} and recipe["model"] == "quad"
    assert recipe["binary"]["builtin"] and len(recipe["binary"]["sha256"]) == 64
    tools = [c["tool"] for c in recipe["calls"]]
    assert [t for t in tools if t != "set_mode"] == ["arm", "takeoff", "land"], tools
    assert "set_mode" in tools and recipe["calls"][tools.index("takeoff")]["altitude_m"] == 5
    times = [c["sim_time_s"] for c in recipe["calls"]]
    assert times == sorted(times) and times[0] > 0 and recipe["sim_time_end_s"] >= times[-1]
    assert {"hold_until_s": times[0]} in recipe["steps"]
    c = st["comparison"]
    assert c["logs"]["differences"] == [], c["logs"]
    # the built-in vehicle's identity is its sources' hash: the same unless they were edited meanwhile
    assert c["same_binary"] is (recipe["binary"]["sha256"] == builtin_hash())


def test_a_python_api_session_records_its_recipe_for_repro(env, instances):
    from sitlpool.flight import Flight
    from sitlpool.mavlink.recorder import attach
    from sitlpool.process import ManagedManager
    from sitlpool.steps import record_handle, repro

    m = ManagedManager()
    try:
        h = m.start("script-hop", speedup=10, params={"WPNAV_SPEED_UP": 200})
        rec = attach(h.link)  # the flight recorder, from the start (the pytest plugin and sessions attach it)
        f = Flight(h.link)
        assert f.wait_ready(60)
        f.set_mode("GUIDED")
        f.arm()
        f.takeoff(5)
        assert h.link.wait(lambda v: (v.rel_alt or 0) > 4.7, 60)
        f.land()
        assert h.link.wait(lambda v: not v.armed, 60)
        t_down = rec.sim_ms  # ended in a lasting state (2 sim s disarmed), as a flight to be compared should end
        assert h.link.wait(lambda v: rec.sim_ms >= t_down + 2000, 30)
    finally:
        m.close_all()
    path = record_handle(h, label="script-hop")
    recipe = json.loads(path.read_text())
    assert recipe["session_id"] == "script-hop" and recipe["params"] == {"WPNAV_SPEED_UP": 200.0}
    assert [c["tool"] for c in recipe["calls"]] == ["set_mode", "arm", "takeoff", "land"], recipe["calls"]
    again = repro(session_id="script-hop")
    assert again.ok, again.error
    assert again.comparison["logs"]["differences"] == [], again.comparison["logs"]
