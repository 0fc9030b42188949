"""The world on Ray sessions: wind, failures and sim time on a SITL that a node's actor holds.
Through ``sitlpool serve --ray`` (the MCP client over stdio, one paced session: set_wind and
wind_history, a GPS lost in flight seen by wait_until(failsafe), clear_failure, set_speedup
on a paced vehicle) and through the Python API (``sitlpool.world``'s functions given a
``RemoteSitl``). The fleet modules' one loopback cluster (conftest's fleet_cluster)."""

from __future__ import annotations

import os

import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.xdist_group(
    "fleet_b"
)  # a second worker and its own shared cluster for half the fleet modules (--dist loadgroup)

SPEEDUP = 10


def test_world_tools_on_a_serve_ray_session(fleet_cluster, tmp_path):
    import anyio

    from mcp_client import ToolFailed, server
    from sitlpool.world import PACE_SPEEDUP

    env = dict(os.environ, SITLPOOL_DATA_DIR=str(tmp_path / "data"), SITLPOOL_POOL="1-2")

    async def agent():
        async with server(env, args=["--ray", fleet_cluster.address]) as call:
            s = await call(
                "open_sitl",
                speedup=SPEEDUP,
                pace=True,
                wind={"speed_m_s": 3, "direction_deg": 270},
                label="ray-world",
            )
            sid = s["session_id"]

            async def param(name: str) -> float:
                return (await call("get_param", session_id=sid, name=name))["value"]

            # wind: the launch wind is the first entry of the node's history, set_wind the next
            w = await call("set_wind", session_id=sid, speed_m_s=6, direction_deg=90, turbulence=1, profile="uniform")
            assert (w["speed_m_s"], w["from_direction_deg"], w["turbulence_m_s"]) == (6, 90, 1), w
            assert w["felt_at_vehicle"]["speed_m_s"] == 6 and w["sim_time_s"] > 0, w
            h = await call("wind_history", session_id=sid)
            assert [c["by"] for c in h["changes"]] == ["open_sitl", "set_wind"], h
            assert h["changes"][0]["set"]["SIM_WIND_SPD"] == 3 and h["changes"][1]["set"]["SIM_WIND_SPD"] == 6
            assert h["now"]["speed_m_s"] == 6
            assert await param("SIM_WIND_SPD") == 6 and await param("SIM_WIND_DIR") == 90

            # sim time: on a paced session the node runs the vehicle at the new speedup during calls
            sp = await call("set_speedup", session_id=sid, speedup=2 * SPEEDUP)
            assert sp["speedup"] == 2 * SPEEDUP and sp["was"] == SPEEDUP, sp
            assert sp["paced_between_calls"] == PACE_SPEEDUP, sp
            assert await param("SIM_SPEEDUP") == 2 * SPEEDUP  # this call waited for the node's pacer

            # a failure in flight, its failsafe, cleared
            kinds = {k["kind"]: k for k in (await call("list_failures", session_id=sid))["kinds"]}
            assert kinds["gps_loss"]["supported"] and kinds["battery_low"]["supported"], kinds
            await call("set_mode", session_id=sid, mode="GUIDED")
            await call("arm", session_id=sid)
            await call("takeoff", session_id=sid, altitude_m=5)
            up = await call("wait_until", session_id=sid, condition="altitude_above", value=4.5, timeout_s=30)
            assert up["result"] == "met", up["snapshot"]
            out = await call("inject_failure", session_id=sid, kind="gps_loss")
            assert out["set"] == {"SIM_GPS1_ENABLE": 0.0} and "warning" not in out["failsafe"], out
            seen = await call("wait_until", session_id=sid, condition="failsafe", value="ekf", timeout_s=30)
            assert seen["result"] == "met", seen["snapshot"]["vehicle"]["recent_texts"]
            mode = await call("wait_until", session_id=sid, condition="mode_is", value="LAND", timeout_s=10)
            assert mode["result"] == "met", mode["snapshot"]
            assert (await call("list_failures", session_id=sid))["injected"] == {"gps_loss": {"SIM_GPS1_ENABLE": 0.0}}
            cleared = await call("clear_failure", session_id=sid, kind="gps_loss")
            assert cleared["restored"] == {"SIM_GPS1_ENABLE": 1.0}, cleared
            assert await param("SIM_GPS1_ENABLE") == 1

            # bad input: one line from the node, nothing applied
            with pytest.raises(ToolFailed, match="no gps_loss failure was injected"):
                await call("clear_failure", session_id=sid, kind="gps_loss")
            with pytest.raises(ToolFailed, match="wind speed"):
                await call("set_wind", session_id=sid, speed_m_s=1000, direction_deg=0)
            assert await param("SIM_WIND_SPD") == 6
            closed = await call("close_sitl", session_id=sid)
            assert closed["closed"].startswith("SITL stopped"), closed

    anyio.run(agent)


def test_world_functions_take_a_remote_sitl(fleet_cluster):
    """``sitlpool.world``'s functions given a fleet's handle (its link, its ``Sitl``) run on its node."""
    from sitlpool import world
    from sitlpool.errors import SitlpoolError
    from sitlpool.vehicle import Sitl

    s = fleet_cluster.fleet.open(speedup=SPEEDUP, label="ray-world-py")
    try:
        assert world.set_wind(s, 4, 180, profile="uniform")["felt_at_vehicle"]["speed_m_s"] == 4
        assert [c["by"] for c in world.wind_history(s.link)["changes"]] == ["set_wind"]
        assert world.wind_history(Sitl(s))["now"]["speed_m_s"] == 4  # the pytest plugin's handle, --sitl-ray
        assert s.get_param("SIM_WIND_SPD") == 4
        assert world.inject_failure(s, "compass")["set"] == {"SIM_MAG1_FAIL": 1.0}
        assert world.list_failures(s)["injected"] == {"compass": {"SIM_MAG1_FAIL": 1.0}}
        assert world.clear_failure(s, "compass")["restored"] == {"SIM_MAG1_FAIL": 0.0}
        with pytest.raises(SitlpoolError, match="no compass failure was injected"):
            world.clear_failure(s, "compass")
        with pytest.raises(SitlpoolError, match="the kinds are: gps_loss"):
            world.inject_failure(s, "meteor")
        assert world.set_speedup(s, 2 * SPEEDUP)["was"] == SPEEDUP
        assert s.get_param("SIM_SPEEDUP") == 2 * SPEEDUP
        assert world.sim_time_s(s) > 0
        with pytest.raises(SitlpoolError, match="held by another process"):
            world.world_of(s)  # its listeners live on the node
    finally:
        s.close()
