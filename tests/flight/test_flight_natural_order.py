"""The flight tools in an agent's natural order on the built-in vehicle and on real
ArduCopter / ArduPlane (issue 11 §1): through the MCP server over stdio, through the
pytest plugin, and through the Python API (``sitlpool.flight.Flight``)."""

from __future__ import annotations

import time

import anyio
import pytest

from mcp_client import ToolFailed, server

pytestmark = pytest.mark.anyio
SPEEDUP = 5

# Real vehicles run on instances below 256 (real SITL keeps -I in a uint8): conftest's
# `instances` gives such a block to a test that uses real_copter / real_plane / arducopter.


@pytest.fixture
def anyio_backend():
    return "asyncio"


def with_binary(env, binary) -> dict:
    """The server's environment, flying ``binary`` (None: the built-in vehicle)."""
    return env if binary is None else dict(env, SITLPOOL_SITL_BINARY=str(binary))


@pytest.fixture
def flight_env(env, vehicle_binary):
    return with_binary(env, vehicle_binary)


async def test_natural_order_through_mcp(flight_env):
    """open_sitl, set_mode GUIDED (at once), arm (retried while refused), takeoff (first
    time), wait_until altitude_above, land, wait_until disarmed: as an agent calls them."""
    async with server(flight_env) as call:
        s = await call("open_sitl", speedup=SPEEDUP, label="natural order")
        sid = s["session_id"]
        snap = await call("snapshot", session_id=sid)
        v = snap["vehicle"]
        assert v["kind"] == "copter" and isinstance(v["ready_to_arm"], bool)
        if not v["ready_to_arm"]:
            assert v["not_ready_because"], "not ready, and no reason"
        await call("set_mode", session_id=sid, mode="GUIDED")  # in the vehicle's first second: must hold
        refusals = []
        deadline = time.monotonic() + 50
        while True:
            try:
                await call("arm", session_id=sid, wait_ready_s=0)
                break
            except ToolFailed as e:
                refusals.append(str(e))
                assert time.monotonic() < deadline, refusals[-3:]
                await anyio.sleep(0.3)
        for r in refusals:
            assert "refused" in r and "no reason given" not in r, r  # the vehicle's reason or sitlpool's diagnosis
        snap = await call("snapshot", session_id=sid)
        assert snap["vehicle"]["armed"] and snap["vehicle"]["mode"] == "GUIDED"
        await anyio.sleep(3)  # the agent thinks longer than DISARM_DELAY (2 s of wall time at speedup 5)
        t = await call("takeoff", session_id=sid, altitude_m=10)
        if "SITLPOOL_SITL_BINARY" in flight_env:  # real ArduCopter disarmed itself meanwhile: sitlpool re-armed it
            assert any("re-armed" in n for n in t.get("sitlpool_did", [])), t
        w = await call("wait_until", session_id=sid, condition="altitude_above", value=9.5, timeout_s=40)
        assert w["result"] == "met", w
        await call("land", session_id=sid)
        w = await call("wait_until", session_id=sid, condition="disarmed", timeout_s=50)
        assert w["result"] == "met" and w["snapshot"]["vehicle"]["relative_alt_m"] < 1, w
        await call("close_sitl", session_id=sid)


def test_refusal_names_only_what_was_said_after_the_command(real_copter, env, monkeypatch):
    """Real ArduCopter: armed in STABILIZE, a takeoff is refused without a word. The
    'Arming motors' said just before must not be given as its reason; sitlpool's
    diagnosis says what to do."""
    from sitlpool.flight import Flight
    from sitlpool.mavlink.link import CommandRefused
    from sitlpool.process import ManagedManager

    monkeypatch.setenv("SITLPOOL_SITL_BINARY", str(real_copter))
    m = ManagedManager()
    try:
        h = m.start("refusal", speedup=SPEEDUP)
        f = Flight(h.link)
        ready, why = f.readiness()
        assert not ready and why, "a vehicle that just booted is not ready to arm"
        assert f.link.wait(lambda v: v.prearm_ok, 40), "the pre-arm bit never became healthy"
        f.arm_when_ready(30)  # STABILIZE: arms without a position
        assert f.v.mode == "STABILIZE"
        with pytest.raises(CommandRefused) as e:
            h.link.takeoff(10)
        assert e.value.texts == [] and "Arming motors" not in str(e.value), str(e.value)
        assert "no reason given" in str(e.value)
        assert "GUIDED" in f.diagnose("takeoff to 10 m")
        with pytest.raises(CommandRefused, match="said nothing; likely cause: .*GUIDED"):
            f._do(h.link.takeoff, 10)
    finally:
        m.close_all()


async def test_plane_flies_through_the_same_tools(real_plane, env):
    """model='plane' with ArduCopter configured runs the arduplane beside it: take off
    (TAKEOFF mode), circle (LOITER), a clear refusal to land, rtl."""
    e = with_binary(env, real_plane.parent / "arducopter")
    async with server(e) as call:
        s = await call("open_sitl", model="plane", speedup=SPEEDUP)
        sid = s["session_id"]
        snap = await call("snapshot", session_id=sid)
        assert snap["vehicle"]["kind"] == "plane"
        with pytest.raises(ToolFailed, match="unknown mode 'ALT_HOLD'.*LOITER.*TAKEOFF"):
            await call("set_mode", session_id=sid, mode="ALT_HOLD")
        w = await call("wait_until", session_id=sid, condition="ready_to_arm", timeout_s=40)
        assert w["result"] == "met", w["snapshot"]["vehicle"]["not_ready_because"]
        t = await call("takeoff", session_id=sid, altitude_m=40)
        assert any("TAKEOFF" in n for n in t["sitlpool_did"]), t
        w = await call("wait_until", session_id=sid, condition="altitude_above", value=38, timeout_s=40)
        assert w["result"] == "met", w
        await call("set_mode", session_id=sid, mode="LOITER")
        v = w["snapshot"]["vehicle"]
        g = await call("goto", session_id=sid, lat=v["lat"] + 0.003, lon=v["lon"], altitude_m=60)
        assert g["snapshot"]["vehicle"]["mode"] == "GUIDED", g  # DO_REPOSITION: Plane switches to GUIDED itself
        with pytest.raises(ToolFailed, match="a plane cannot land on command"):
            await call("land", session_id=sid)
        r = await call("rtl", session_id=sid)
        assert r["snapshot"]["vehicle"]["mode"] == "RTL" and r["snapshot"]["vehicle"]["armed"]
        await call("close_sitl", session_id=sid)


PLUGIN_HOP = """
def test_hop(sitl):
    sitl.arm_and_takeoff(5)
    assert sitl.vehicle.rel_alt >= 4.5 and sitl.vehicle.mode == "GUIDED"
    sitl.flight.land()
    sitl.wait_disarmed()
"""


def test_pytest_plugin_hop_on_real_copter(real_copter, pytester, env, instances):
    from sitlpool.leases import LeasePool

    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    pytester.makepyfile(test_real_hop=PLUGIN_HOP)
    r = pytester.runpytest_subprocess(
        "-p",
        "no:randomly",
        "--sitl-binary",
        str(real_copter),
        "--sitl-speedup",
        str(SPEEDUP),
        "--sitl-pool",
        f"{instances[0]}-{instances[-1]}",
        timeout=180,
    )
    r.assert_outcomes(passed=1)
    assert LeasePool.from_env().status() == []
