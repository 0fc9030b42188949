"""``sitlpool.world``, the Python API of wind, failures and sim time: on the built-in vehicle and
on real ArduCopter (``vehicle_binary``), through the vehicle's own SIM_* parameters, all of a
call's parameters or none."""

from __future__ import annotations

import math
import time

import pytest

from conftest import wait_for
from sitlpool import world
from sitlpool.errors import SitlpoolError
from sitlpool.sessions import Sessions
from sitlpool.vehicle import Sitl


@pytest.fixture
def session(env, vehicle_binary, monkeypatch):
    if vehicle_binary is not None:
        monkeypatch.setenv("SITLPOOL_SITL_BINARY", str(vehicle_binary))
    sessions = Sessions()
    sessions.start()
    s = sessions.open(speedup=5)
    yield s
    sessions.close_all()


def test_wind_is_set_read_back_and_every_change_kept_with_sim_time(session):
    link = session.link
    wait_for(lambda: world.sim_time_s(link) is not None, 10, what="a time_boot_ms")
    out = world.set_wind(session.flight, 5, -270, turbulence=1, profile="ardupilot")  # a Flight reaches it
    assert out["set"] == {"SIM_WIND_SPD": 5, "SIM_WIND_DIR": 90, "SIM_WIND_TURB": 1, "SIM_WIND_T": 0}
    assert link.get_param("SIM_WIND_SPD") == 5 and link.get_param("SIM_WIND_DIR") == 90
    assert out["sim_time_s"] > 0
    assert out["felt_at_vehicle"]["speed_m_s"] == 0.0  # on the ground: sqrt(0/60) of it
    assert world.felt_wind(10, 0, 60, 0.01, 10) == pytest.approx(4.08, abs=0.01)  # measured 4.0 m/s at 10 m
    assert world.felt_wind(10, 1, 60, 0.01, 10) == 10
    link.set_param("SIM_WIND_SPD", 7)  # any PARAM_SET of the wind is history too
    wait_for(lambda: len(world.wind_history(link)["changes"]) == 2, 5, what="the PARAM_SET in the history")
    h = world.wind_history(session)["changes"]
    assert [e["by"] for e in h] == ["set_wind", "parameter"]
    assert h[1]["set"] == {"SIM_WIND_SPD": 7} and h[1]["sim_time_s"] >= h[0]["sim_time_s"]
    assert world.sim_time_s(Sitl(session.handle)) is not None  # the pytest plugin's sitl reaches it too
    out = world.set_wind(link, 0, 0, seed=42)
    assert "applied" in out["seed"] and out["seed"]["value"] == 42


def test_bad_input_is_one_line_and_changes_nothing(session):
    link = session.link
    link.set_param("SIM_WIND_SPD", 3)
    for bad, match in [
        (lambda: world.set_wind(link, 1000, 0), "wind speed 1000 m/s is out of range"),
        (lambda: world.set_wind(link, 5, float("nan")), "wind direction nan is not a finite number"),
        (lambda: world.set_wind(link, 5, 0, turbulence=-1), "turbulence -1 m/s is out of range"),
        (lambda: world.set_wind(link, 5, 0, profile="gusty"), "unknown wind profile 'gusty'; use one of ardupilot"),
        (lambda: world.set_wind(link, 5, 0, seed=-3), "seed -3 is not a whole number"),
        (
            lambda: world.inject_failure(link, "meteor"),
            "unknown failure kind 'meteor'; the kinds are: gps_loss, gps_glitch",
        ),
        (lambda: world.inject_failure(link, "motor", motor=0), "motor 0 is not a motor number from 1 to 12"),
        (lambda: world.inject_failure(link, "motor", thrust=2), "thrust 2 .* is out of range"),
        (lambda: world.inject_failure(link, "gps_loss", motor=1), "failure gps_loss takes no options; not motor"),
        (
            lambda: world.clear_failure(link, "rc_loss"),
            r"no rc_loss failure was injected on this vehicle \(injected now: none\)",
        ),
        (lambda: world.set_speedup(link, 0), "speedup 0 is out of range.*not a pause"),
        (
            lambda: world.apply_params(link, {"SIM_WIND_SPD": 9, "NO_SUCH_PARAM": 1}, "x"),
            "no parameter NO_SUCH_PARAM; nothing",
        ),
    ]:
        with pytest.raises(SitlpoolError, match=match) as e:
            bad()
        assert "\n" not in str(e.value)
    assert link.get_param("SIM_WIND_SPD") == 3
    assert link.get_param("SIM_ENGINE_FAIL") == 0 and link.get_param("SIM_RC_FAIL") == 0
    assert world.wind_history(link)["changes"] == [] or all(
        e["by"] == "parameter" for e in world.wind_history(link)["changes"]
    )


def test_failures_set_their_parameters_and_clearing_restores_them(session):
    link = session.link
    out = world.inject_failure(session.flight, "motor", motor=2, thrust=0.5)
    assert list(out["set"].items()) == [("SIM_ENGINE_MUL", 0.5), ("SIM_ENGINE_FAIL", 2.0)]
    assert link.get_param("SIM_ENGINE_FAIL") == 2 and link.get_param("SIM_ENGINE_MUL") == 0.5
    assert out["failsafe"]["params"] == {"FS_CRASH_CHECK": 1.0}
    # two failures through one parameter: clearing one leaves the other's value in force
    link.set_param("BATT_CRT_VOLT", 10.2)
    low = world.inject_failure(link, "battery_low")["set"]["SIM_BATT_VOLTAGE"]
    assert 10.2 < low < 10.5
    crit = world.inject_failure(link, "battery_critical")["set"]["SIM_BATT_VOLTAGE"]
    assert crit == pytest.approx(9.9)
    assert world.inject_failure(link, "battery_low")["failsafe"]["warning"].startswith("BATT_FS_LOW_ACT is 0")
    assert world.clear_failure(link, "battery_critical")["restored"] == {"SIM_BATT_VOLTAGE": low}
    assert world.clear_failure(link, "battery_low")["restored"] == {"SIM_BATT_VOLTAGE": pytest.approx(12.6)}
    assert math.isclose(link.get_param("SIM_BATT_VOLTAGE"), 12.6, rel_tol=1e-6)
    world.inject_failure(link, "gcs_loss")
    assert link.gcs_heartbeat is False
    assert world.list_failures(link)["injected"].keys() == {"motor", "gcs_loss"}
    assert world.clear_failure(link, "gcs_loss")["restored"] == {"gcs_heartbeat": True} and link.gcs_heartbeat
    assert world.clear_failure(link, "motor")["restored"] == {"SIM_ENGINE_FAIL": 0.0, "SIM_ENGINE_MUL": 0.0}
    assert link.get_param("SIM_ENGINE_FAIL") == 0
    kinds = {k["kind"]: k for k in world.list_failures(link)["kinds"]}
    assert set(kinds) == set(world.KINDS) and all(k["supported"] for k in kinds.values())


def _rate(link, wall_s: float) -> float:
    t0, s0 = time.monotonic(), world.sim_time_s(link)
    time.sleep(wall_s)
    return (world.sim_time_s(link) - s0) / (time.monotonic() - t0)


def test_speedup_live_and_pacing_slow_the_clock_between_calls(session):
    link = session.link
    wait_for(lambda: world.sim_time_s(link) is not None, 10, what="a time_boot_ms")
    out = world.set_speedup(link, 2)
    assert out["speedup"] == 2 and out["was"] == 5 and link.get_param("SIM_SPEEDUP") == 2
    assert 1.4 < _rate(link, 2.0) < 2.6
    pacer = world.Pacer()
    pacer.add(link, 2)
    wait_for(lambda: link.get_param("SIM_SPEEDUP") == pytest.approx(world.PACE_SPEEDUP), 10, what="paced")
    assert _rate(link, 3.0) < 0.3
    assert link.state == "connected" and link.lost_after > 30  # slow HEARTBEATs are not a lost vehicle
    with pacer.busy():
        assert link.get_param("SIM_SPEEDUP") == 2
        assert _rate(link, 2.0) > 1.2
    wait_for(lambda: link.get_param("SIM_SPEEDUP") == pytest.approx(world.PACE_SPEEDUP), 10, what="paced again")
    # a call that begins while the slow-down after the last one is still on its way waits for it
    # and for the speed-up after it (it once returned at once and read SIM_SPEEDUP 0.05)
    for i in range(8):
        with pacer.busy():
            pass
        time.sleep(0.001 * i)  # the pacer's worker may have taken the slow-down, or not yet
        with pacer.busy():
            assert link.get_param("SIM_SPEEDUP") == 2


def test_arduplane_takes_the_same_parameters_and_names_its_own_failsafes(env, real_plane, monkeypatch):
    monkeypatch.setenv("SITLPOOL_SITL_BINARY", str(real_plane.parent / "arducopter"))
    sessions = Sessions()
    sessions.start()
    try:
        link = sessions.open(model="plane", speedup=5).link
        assert all(k["supported"] for k in world.list_failures(link)["kinds"])
        assert world.set_wind(link, 5, 90, profile="uniform")["felt_at_vehicle"]["speed_m_s"] == 5
        out = world.inject_failure(link, "rc_loss")
        assert out["set"] == {"SIM_RC_FAIL": 1} and out["failsafe"]["params"]["THR_FAILSAFE"] == 1
        assert "arduplane" in out["failsafe"]
        out = world.inject_failure(link, "gcs_loss")
        assert out["failsafe"]["warning"].startswith("FS_GCS_ENABL is 0")
        world.clear_failure(link, "gcs_loss")
        assert world.clear_failure(link, "rc_loss")["restored"] == {"SIM_RC_FAIL": 0}
    finally:
        sessions.close_all()
