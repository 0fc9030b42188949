"""The world on real ArduPlane (issue 22), through the MCP tools: set_wind changes a loitering
plane's ground speed around its circle (airspeed plus the wind downwind, minus it upwind), and
the failures Plane has a failsafe for (rc_loss, gcs_loss, battery_low) give Plane's own mode
changes and texts, seen by wait_until(failsafe). Skipped without the arduplane binary (beside
SITLPOOL_TEST_SITL_BINARY). One plane per module, in the air, shared by the tests in order."""

from __future__ import annotations

import time

import anyio
import pytest

from mcp_client import server

pytestmark = [pytest.mark.anyio, pytest.mark.xdist_group("gcs_world_plane")]
SPEEDUP = 10


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def _fly(call) -> str:
    s = await call("open_sitl", model="plane", speedup=SPEEDUP)
    sid = s["session_id"]
    w = await call("wait_until", session_id=sid, condition="ready_to_arm", timeout_s=60)
    assert w["result"] == "met", w["snapshot"]["vehicle"]
    await call("takeoff", session_id=sid, altitude_m=50)
    w = await call("wait_until", session_id=sid, condition="altitude_above", value=45, timeout_s=60)
    assert w["result"] == "met", w["snapshot"]["vehicle"]
    await call("set_mode", session_id=sid, mode="LOITER")
    return sid


async def _ground_speeds(call, sid: str, sim_s: float) -> list[tuple[float, float]]:
    """(ground speed, course over ground) sampled from snapshots for ``sim_s`` sim seconds."""
    out = []
    end = time.monotonic() + sim_s / SPEEDUP * 1.5
    while time.monotonic() < end:
        v = (await call("snapshot", session_id=sid))["vehicle"]
        out.append((v["groundspeed_m_s"], v.get("heading_deg", 0)))
        await anyio.sleep(0.05)
    return out


async def _wait(call, sid: str, condition: str, value=None, timeout_s: float = 20) -> dict:
    w = await call("wait_until", session_id=sid, condition=condition, value=value, timeout_s=timeout_s)
    assert w["result"] == "met", (
        condition,
        value,
        w["snapshot"]["vehicle"]["mode"],
        w["snapshot"]["vehicle"]["recent_texts"],
    )
    return w


async def _said(call, sid: str, text: str, timeout_s: float = 20) -> None:
    """``text`` said by the plane: already (a call before this one may have been slower than the
    plane under load: wait_until(text) looks only at texts after it begins) or within the wait."""
    recent = (await call("snapshot", session_id=sid))["vehicle"]["recent_texts"]
    if not any(text in t for t in recent):
        await _wait(call, sid, "text", text, timeout_s)


async def test_plane_wind_and_failsafes(env, real_plane):
    e = dict(env, SITLPOOL_SITL_BINARY=str(real_plane.parent / "arducopter"))
    async with server(e) as call:
        sid = await _fly(call)
        kinds = {k["kind"]: k for k in (await call("list_failures", session_id=sid))["kinds"]}
        assert all(k["supported"] for k in kinds.values()), kinds  # Plane has every SIM_* parameter
        assert {k for k, v in kinds.items() if v.get("arduplane")} >= {"rc_loss", "gcs_loss", "battery_low"}

        # wind: around the loiter circle the ground speed is the airspeed plus the wind downwind (course
        # ~270 for a wind FROM 90) and minus it upwind; measured: 23-28 m/s calm, 12-42 m/s in 10 m/s
        calm = await _ground_speeds(call, sid, 50)
        await call("set_wind", session_id=sid, speed_m_s=10, direction_deg=90, profile="uniform")
        await _ground_speeds(call, sid, 10)
        windy = await _ground_speeds(call, sid, 50)
        await call("set_wind", session_id=sid, speed_m_s=0, direction_deg=90)
        lo, hi = min(calm)[0], max(calm)[0]
        (wlo, wlo_course), (whi, whi_course) = min(windy), max(windy)
        print(
            f"plane ground speed: calm {lo}-{hi} m/s; 10 m/s from 90: {wlo} (course {wlo_course}) - {whi} ({whi_course})"
        )
        assert hi - lo < 10, calm
        assert whi - wlo > 14 and whi > hi + 4 and wlo < lo - 4, (calm, windy)
        assert abs((whi_course - 270 + 180) % 360 - 180) < 60 and abs((wlo_course - 90 + 180) % 360 - 180) < 60

        # rc_loss (THR_FAILSAFE 1): short failsafe after FS_SHORT_TIMEOUT, long after FS_LONG_TIMEOUT: RTL
        await call("set_mode", session_id=sid, mode="LOITER")
        out = await call("inject_failure", session_id=sid, kind="rc_loss")
        assert "warning" not in out["failsafe"] and "RC Long Failsafe" in out["failsafe"]["arduplane"]
        await _wait(call, sid, "failsafe")
        await _said(call, sid, "RC Long Failsafe On: RTL")
        await _wait(call, sid, "mode_is", "RTL", 5)
        await call("clear_failure", session_id=sid, kind="rc_loss")
        await _said(call, sid, "RC Long Failsafe Cleared")

        # gcs_loss (FS_GCS_ENABL 1): FS_LONG_TIMEOUT after the last heartbeat, raised to 30 s here because
        # sitlpool's link beats once a wall second (10 sim seconds at speedup 10)
        await call("set_param", session_id=sid, name="FS_LONG_TIMEOUT", value=30)
        await call("set_param", session_id=sid, name="FS_GCS_ENABL", value=1)
        await call("set_mode", session_id=sid, mode="LOITER")
        out = await call("inject_failure", session_id=sid, kind="gcs_loss")
        assert "warning" not in out["failsafe"], out["failsafe"]
        w = await _wait(call, sid, "failsafe", "gcs")
        assert "GCS Failsafe On: RTL" in w["snapshot"]["vehicle"]["recent_texts"]
        await _wait(call, sid, "mode_is", "RTL", 5)
        await call("clear_failure", session_id=sid, kind="gcs_loss")
        await _said(call, sid, "GCS Failsafe Off")
        await call("set_param", session_id=sid, name="FS_GCS_ENABL", value=0)

        # battery_low (BATT_FS_LOW_ACT 1 = RTL on Plane): after BATT_LOW_TIMER; Plane says no "Battery Failsafe"
        await call("set_param", session_id=sid, name="BATT_LOW_VOLT", value=11.0)
        await call("set_param", session_id=sid, name="BATT_FS_LOW_ACT", value=1)
        await call("set_mode", session_id=sid, mode="LOITER")
        out = await call("inject_failure", session_id=sid, kind="battery_low")
        assert "warning" not in out["failsafe"], out["failsafe"]
        await _said(call, sid, "Battery 1 is low")
        await _wait(call, sid, "mode_is", "RTL", 5)
        await call("clear_failure", session_id=sid, kind="battery_low")
