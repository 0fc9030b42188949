"""The world tools through the real MCP client over stdio: set_wind, wind_history, inject_failure,
clear_failure, list_failures, set_speedup, open_sitl's wind and pace, and wait_until's
failsafe and mode_is; on the built-in vehicle and on real ArduCopter (``vehicle_binary``)."""

import time

import pytest

from conftest import Gcs, hold_lease, listening, start_sim, wait_for
from mcp_client import ToolFailed, server
from sitlpool.instances import ports

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


def env_for(env, vehicle_binary):
    e = dict(env)
    if vehicle_binary is not None:
        e["SITLPOOL_SITL_BINARY"] = str(vehicle_binary)
    return e


async def test_wind_from_boot_and_live_with_its_history(env, instances, vehicle_binary):
    async with server(env_for(env, vehicle_binary)) as call:
        s = await call("open_sitl", speedup=5, wind={"speed_m_s": 4, "direction_deg": 270, "profile": "uniform"})
        sid = s["session_id"]
        assert s["wind"] == {"SIM_WIND_SPD": 4, "SIM_WIND_DIR": 270, "SIM_WIND_TURB": 0, "SIM_WIND_T": 1}
        assert (await call("get_param", session_id=sid, name="SIM_WIND_SPD"))["value"] == 4  # set at boot
        w = await call("set_wind", session_id=sid, speed_m_s=6, direction_deg=90, turbulence=0.5)
        assert w["speed_m_s"] == 6 and w["from_direction_deg"] == 90 and w["profile"] == "uniform"
        assert w["felt_at_vehicle"]["speed_m_s"] == 6 and w["sim_time_s"] > 0
        await call("set_param", session_id=sid, name="SIM_WIND_DIR", value=180)
        h = await call("wind_history", session_id=sid)
        assert [e["by"] for e in h["changes"]] == ["open_sitl", "set_wind", "parameter"]
        assert h["changes"][1]["sim_time_s"] <= h["changes"][2]["sim_time_s"]
        assert h["now"]["from_direction_deg"] == 180
        sp = await call("set_speedup", session_id=sid, speedup=2)
        assert sp["speedup"] == 2 and sp["was"] == 5 and sp["sim_time_s"] > 0


async def test_bad_input_is_one_line_and_nothing_is_half_applied(env, instances):
    async with server(env) as call:
        with pytest.raises(ToolFailed, match="wind speed 1000 m/s is out of range"):
            await call("open_sitl", wind={"speed_m_s": 1000})
        assert await call("list_sessions") == []  # nothing launched
        sid = (await call("open_sitl", speedup=5))["session_id"]
        for tool, args, match in [
            (
                "set_wind",
                {"speed_m_s": 1000, "direction_deg": 0},
                "wind speed 1000 m/s is out of range; use from 0 to 60",
            ),
            ("set_wind", {"speed_m_s": 5, "direction_deg": "NaN"}, "direction"),
            (
                "inject_failure",
                {"kind": "meteor"},
                "unknown failure kind 'meteor'; the kinds are: gps_loss, gps_glitch, "
                "compass, baro, battery_low, battery_critical, motor, rc_loss, gcs_loss",
            ),
            ("inject_failure", {"kind": "motor", "motor": 13}, "motor 13 is not a motor number"),
            ("inject_failure", {"kind": "baro", "voltage": 3}, "failure baro takes all; not voltage"),
            ("clear_failure", {"kind": "gps_loss"}, "no gps_loss failure was injected"),
            ("set_speedup", {"speedup": -1}, "speedup -1 is out of range"),
            ("wait_until", {"condition": "mode_is", "value": "WARP"}, "unknown mode 'WARP'"),
        ]:
            with pytest.raises(ToolFailed, match=match) as e:
                await call(tool, session_id=sid, **args)
            assert "\n" not in str(e.value), (tool, str(e.value))
        assert (await call("get_param", session_id=sid, name="SIM_WIND_SPD"))["value"] == 0
        assert (await call("wind_history", session_id=sid))["changes"] == []
        assert (await call("list_failures", session_id=sid))["injected"] == {}


async def test_read_only_and_someone_elses_vehicle_are_refused(env, procs, tmp_path, instances, lock_dir):
    n = instances[2]
    hold_lease(procs, lock_dir, n, "agent A's flight")
    start_sim(procs, tmp_path / "a", n, "--speedup", 5)
    owner = Gcs(ports(n).serial0)
    owner.heartbeat()
    wait_for(lambda: listening(ports(n).serial1))
    async with server(env) as call:
        ro = (await call("attach_sitl", instance=n))["session_id"]
        for tool, args in [
            ("inject_failure", {"kind": "gps_loss"}),
            ("set_wind", {"speed_m_s": 5, "direction_deg": 0}),
            ("set_speedup", {"speedup": 2}),
            ("clear_failure", {"kind": "gps_loss"}),
        ]:
            with pytest.raises(ToolFailed, match="attached read-only.*control=True.*force=True") as e:
                await call(tool, session_id=ro, **args)
            assert "\n" not in str(e.value), (tool, str(e.value))
        await call("list_failures", session_id=ro)  # reading stays allowed
        forced = (await call("attach_sitl", instance=n, control=True, force=True))["session_id"]
        for tool, args in [
            ("inject_failure", {"kind": "gps_loss"}),
            ("set_wind", {"speed_m_s": 5, "direction_deg": 0}),
            ("set_speedup", {"speedup": 2}),
        ]:
            with pytest.raises(ToolFailed, match=f"instance {n} is leased to agent A's flight.*force=True") as e:
                await call(tool, session_id=forced, **args)
            assert "\n" not in str(e.value), (tool, str(e.value))
        assert (await call("get_param", session_id=forced, name="SIM_GPS1_ENABLE"))["value"] == 1
        assert (await call("get_param", session_id=forced, name="SIM_WIND_SPD"))["value"] == 0
        assert (await call("get_param", session_id=forced, name="SIM_SPEEDUP"))["value"] == 5
        assert (await call("set_wind", session_id=forced, speed_m_s=5, direction_deg=0, force=True))["speed_m_s"] == 5
        assert (await call("set_speedup", session_id=forced, speedup=4, force=True))["speedup"] == 4
        out = await call("inject_failure", session_id=forced, kind="gps_loss", force=True)
        assert out["set"] == {"SIM_GPS1_ENABLE": 0}
        assert (await call("clear_failure", session_id=forced, kind="gps_loss", force=True))["restored"] == {
            "SIM_GPS1_ENABLE": 1
        }
    owner.close()


FAILSAFES = {  # kind: (parameters that arm the failsafe, its text as ArduCopter says it, the mode it flies, speedup)
    "rc_loss": ({}, "radio", "RTL", 10),
    # sitlpool's link sends its GCS heartbeat at 1 Hz wall: 10 s of sim time between two at speedup
    # 10, so FS_GCS_TIMEOUT (5 s by default) is raised to 30 s (3 s wall, a loaded machine's margin)
    "gcs_loss": ({"FS_GCS_ENABLE": 1, "FS_GCS_TIMEOUT": 30}, "gcs", "RTL", 10),
    "battery_low": ({"BATT_LOW_VOLT": 11.0, "BATT_FS_LOW_ACT": 2}, "battery", "RTL", 10),
    "battery_critical": ({"BATT_CRT_VOLT": 10.2, "BATT_FS_CRT_ACT": 1}, "battery", "LAND", 10),
    "gps_loss": ({}, "ekf", "LAND", 10),
}


async def test_each_failsafe_by_inject_failure_is_seen_by_wait_until(env, instances, vehicle_binary):
    """Every kind at once, a session each on one server (five agents' vehicles side by side)."""
    import anyio

    seen_all: dict[str, str] = {}

    async def fly(call, kind: str) -> None:
        params, text, mode, speedup = FAILSAFES[kind]
        sid = (await call("open_sitl", speedup=speedup, params=params or None, label=kind))["session_id"]
        await call("wait_until", session_id=sid, condition="ready_to_arm", timeout_s=50)
        await call("arm", session_id=sid)
        await call("takeoff", session_id=sid, altitude_m=10)
        up = await call("wait_until", session_id=sid, condition="altitude_above", value=9, timeout_s=30)
        assert up["result"] == "met", (kind, up["snapshot"]["vehicle"])
        out = await call("inject_failure", session_id=sid, kind=kind)
        assert "warning" not in out["failsafe"], (kind, out["failsafe"])
        seen = await call("wait_until", session_id=sid, condition="failsafe", value=text, timeout_s=30)
        assert seen["result"] == "met", (kind, seen["snapshot"]["vehicle"]["recent_texts"])
        m = await call("wait_until", session_id=sid, condition="mode_is", value=mode, timeout_s=5)
        assert m["result"] == "met", (kind, m["snapshot"]["vehicle"])
        await call("clear_failure", session_id=sid, kind=kind)
        assert (await call("list_failures", session_id=sid))["injected"] == {}, kind
        seen_all[kind] = mode
        await call("close_sitl", session_id=sid)

    async with server(env_for(env, vehicle_binary)) as call:
        async with anyio.create_task_group() as tg:
            for kind in FAILSAFES:
                tg.start_soon(fly, call, kind)
    assert seen_all == {k: v[2] for k, v in FAILSAFES.items()}


async def test_pace_nearly_stops_the_vehicle_between_calls(env, instances, vehicle_binary):
    async with server(env_for(env, vehicle_binary)) as call:
        s = await call("open_sitl", speedup=5, pace=True)
        sid = s["session_id"]
        assert s["pace"]["between_calls_speedup"] < 0.1
        t0 = (await call("wind_history", session_id=sid))["now"]["sim_time_s"]
        time.sleep(4)  # the agent thinks: 4 s wall
        t1 = (await call("wind_history", session_id=sid))["now"]["sim_time_s"]
        assert t1 - t0 < 5, "paced: 4 s of thinking is far less than the 20 s of flight it would be"
        await call("wait_until", session_id=sid, condition="text", value="never said", timeout_s=2)
        t2 = (await call("wind_history", session_id=sid))["now"]["sim_time_s"]
        assert t2 - t1 > 4, "during a call the vehicle runs at its speedup (2 s of wait_until: 10 s)"
        assert (await call("snapshot", session_id=sid))["link"] == "connected"
        assert (await call("set_speedup", session_id=sid, speedup=2))["paced_between_calls"] < 0.1
