"""A session of ``sitlpool serve --ray`` records its recipe when it closes, as a local MCP
session does: the node's actor makes it from the calls its link's recorder saw (with their sim
times), the server writes it under its own data dir, and ``repro(session_id=...)`` flies it
again (here on this machine's built-in vehicle) and compares the two logs. The fleet modules'
one loopback cluster (conftest's fleet_cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.xdist_group("fleet")  # the fleet modules share one worker and one cluster (--dist loadgroup)


def test_a_ray_session_records_a_recipe_that_repro_flies_again(fleet_cluster, env):
    import anyio

    from mcp_client import server
    from sitlpool.steps import repro

    async def agent() -> str:
        async with server(env, args=["--ray", fleet_cluster.address]) as call:
            opened = await call("open_sitl", speedup=10, label="ray-recipe", params={"WPNAV_SPEED_UP": 200})
            sid = opened["session_id"]
            await call("set_mode", session_id=sid, mode="GUIDED")
            await call("arm", session_id=sid)
            await call("takeoff", session_id=sid, altitude_m=5)
            up = await call("wait_until", session_id=sid, condition="altitude_above", value=4.7, timeout_s=60)
            assert up["result"] == "met", up["snapshot"]
            await call("land", session_id=sid)
            down = await call("wait_until", session_id=sid, condition="disarmed", timeout_s=60)
            assert down["result"] == "met", down["snapshot"]
            await call("close_sitl", session_id=sid)
            return sid

    sid = anyio.run(agent)
    d = Path(env["SITLPOOL_DATA_DIR"]) / "runs" / f"session-{sid}"
    recipe = json.loads((d / "recipe.json").read_text())  # written by the server, on the driver
    assert recipe["session_id"] == sid and recipe["params"] == {"WPNAV_SPEED_UP": 200.0}, recipe
    tools = [c["tool"] for c in recipe["calls"]]  # as the vehicle accepted them (takeoff makes sure of GUIDED)
    assert tools[:2] == ["set_mode", "arm"] and tools[-2:] == ["takeoff", "land"], recipe["calls"]
    assert recipe["calls"][-2]["altitude_m"] == 5.0, recipe["calls"]
    times = [c["sim_time_s"] for c in recipe["calls"]]
    assert all(t is not None for t in times) and times == sorted(times), times  # the node's sim clock
    run = json.loads((d / "run.json").read_text())
    bins = [lg for lg in run["logs"] if lg["kind"] == "bin"]
    assert bins and bins[0]["node_id"] in {n["node_id"] for n in fleet_cluster.fleet.nodes()}, run["logs"]

    again = repro(session_id=sid)  # flown here, compared with the node's log (one machine: its path is here)
    assert again.ok, again.error
    c = again.comparison["logs"]
    # the same flight: only the log's length may differ (how long the session stayed open after its last call)
    assert [x["what"] for x in c["differences"]] in ([], ["duration"]), c["differences"]
    assert {"max altitude", "max horizontal speed"} <= set(c["same"]), c
