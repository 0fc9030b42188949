"""Every vehicle tool of ``sitlpool serve --ray`` on a Ray node's SITL: the tools whose exchanges
listen on the link (parameters, missions, RC override, the flight picture) run on the node,
where the link is (``RemoteLink.on_node``), and answer as on a local session. The fleet
modules' one loopback cluster (conftest's fleet_cluster)."""

from __future__ import annotations

import json
import os

import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.xdist_group("fleet")  # the fleet modules share one worker and one cluster (--dist loadgroup)

MISSION = [
    {"command": "takeoff", "alt_m": 10},
    {"command": "waypoint", "lat": -35.3630, "lon": 149.1650, "alt_m": 10},
    {"command": "rtl"},
]


def test_parameters_missions_rc_and_picture_on_a_ray_session(fleet_cluster, tmp_path):
    import anyio

    from mcp_client import ToolFailed, server

    env = dict(os.environ, SITLPOOL_DATA_DIR=str(tmp_path / "data"), SITLPOOL_POOL="1-2")

    async def agent():
        async with server(env, args=["--ray", fleet_cluster.address]) as call:
            sid = (await call("open_sitl", speedup=10, label="ray-tools"))["session_id"]
            got = await call("get_params", session_id=sid, prefix="RTL_")
            assert got["count"] == len(got["params"]) > 3 and "RTL_ALT" in got["params"], got
            assert (await call("set_params", session_id=sid, values={"RTL_ALT": 1500, "WPNAV_SPEED": 600}))["set"]
            assert (await call("get_param", session_id=sid, name="WPNAV_SPEED"))["value"] == 600
            with pytest.raises(ToolFailed, match="NO_SUCH_PARAM"):  # checked first, nothing set
                await call("set_params", session_id=sid, values={"RTL_ALT": 1600, "NO_SUCH_PARAM": 1})
            assert (await call("get_param", session_id=sid, name="RTL_ALT"))["value"] == 1500

            assert (await call("upload_mission", session_id=sid, items=MISSION))["uploaded"] == 3
            wpl = await call("download_mission", session_id=sid, format="waypoints")
            assert wpl["count"] == 3 and wpl["text"].startswith("QGC WPL 110"), wpl
            assert (await call("mission_status", session_id=sid))["total_items"] == 3

            await call("set_mode", session_id=sid, mode="GUIDED")
            await call("arm", session_id=sid)
            await call("takeoff", session_id=sid, altitude_m=5)
            up = await call("wait_until", session_id=sid, condition="altitude_above", value=4.5, timeout_s=30)
            assert up["result"] == "met", up["snapshot"]
            assert (await call("rc_override", session_id=sid, channels={"3": 1500}))["holding"] is True
            pic = await call("flight_picture", session_id=sid)
            shown = json.loads(pic[1]["text"]) if isinstance(pic, list) else pic
            assert shown["positions"] > 0 and shown["max_relative_alt_m"] > 1 and shown["mission_waypoints"] == 1, shown
            await call("land", session_id=sid)
            down = await call("wait_until", session_id=sid, condition="disarmed", timeout_s=60)
            assert down["result"] == "met", down["snapshot"]
            assert (await call("clear_mission", session_id=sid))["cleared"] is True
            assert (await call("mission_status", session_id=sid))["total_items"] == 0
            await call("close_sitl", session_id=sid)

    anyio.run(agent)
