"""The built-in vehicle's world (issue 22), driven in-process on its own clock: wind (profile, lag,
seeded turbulence, lean, drift, upwind ground speed), faults and failsafes, against the figures
measured on real ArduCopter 4.7 (bench/measure_real_world/README.md, ../shared/ardupilot/FAILSAFES.md).
The same cases against the real binary: tests/gcs/test_gcs_world_*.py."""

from __future__ import annotations

import math

import pytest

from sitlpool.sim.copter import MODES, Copter
from sitlpool.sim.observers import VehicleObserver
from sitlpool.sim.params import Params
from sitlpool.sim.rules import ERR, MODE_NAMES, MODE_REASONS
from sitlpool.sim.world import Wind, max_airspeed

HOME = (-35.363261, 149.165230, 584.0, 353.0)
DT = 0.04


class Recorder(VehicleObserver):
    def __init__(self):
        self.errors: list[tuple[float, int, int]] = []
        self.modes: list[tuple[int, str]] = []

    def on_error(self, vehicle, subsystem, code):
        self.errors.append((vehicle.t, subsystem, code))

    def on_mode(self, vehicle, old, new, reason):
        self.modes.append((new, reason))


class Vehicle:
    def __init__(self, tmp_path, **params):
        self.texts: list[tuple[float, int, str]] = []
        p = Params(tmp_path / "eeprom.bin", [], True, None, 1.0)
        for k, v in params.items():
            assert p.set(k, v, save=False), k
        self.c = Copter(p, HOME, 1.0, self.send, lambda: None)
        self.rec = Recorder()
        self.c.observers.append(self.rec)
        self.c.ready()
        self.run(3)

    def send(self, msg, link=None):
        if msg.get_type() == "STATUSTEXT":
            self.texts.append((self.c.t, msg.severity, msg.text))

    def run(self, seconds, until=None) -> bool:
        for _ in range(int(round(seconds / DT))):
            self.c.step(DT)
            if until is not None and until(self.c):
                return True
        return False

    def set(self, name, value):
        assert self.c.p.set(name, value, save=False)

    def takeoff(self, alt=10.0):
        c = self.c
        assert c.set_mode(MODES["GUIDED"], None) == 0
        assert c.arm(False, None) == 0
        assert c.takeoff(alt, None) == 0
        assert self.run(40, until=lambda c: c.rel_alt > alt - 0.05 and abs(c.vd) < 0.05)
        self.run(2)

    def said(self, text, since=0.0):
        return [round(t - since, 2) for t, _, tx in self.texts if tx == text and t >= since]

    def mode(self):
        return MODE_NAMES[self.c.mode]


@pytest.mark.parametrize("spd,wtype,felt", [(10, 0, 4.08), (5, 0, 2.04), (10, 1, 10.0), (10, 2, 9.5)])
def test_wind_altitude_profile_at_10m(tmp_path, spd, wtype, felt):
    """SIM_WIND_T 0: sqrt(alt/SIM_WIND_T_ALT) below it (measured 4.0 m/s for 10 at 10 m);
    1: none; 2: SIM_WIND_T_COEF per metre from T_ALT (10 + (10-60) x 0.01)."""
    v = Vehicle(tmp_path, SIM_WIND_T=wtype)
    v.takeoff(10)
    v.set("SIM_WIND_DIR", 0)
    v.set("SIM_WIND_SPD", spd)
    v.run(10)
    w = v.c.wind
    assert math.hypot(w.n, w.e) == pytest.approx(felt, abs=0.05)
    assert w.n < 0 and abs(w.e) < 1e-6, "from the north: the air moves south"


def test_wind_onset_is_a_one_second_lag(tmp_path):
    """Measured: 63% of the new wind after ~0.75-1 s, 95% after ~3 s."""
    v = Vehicle(tmp_path, SIM_WIND_T=1)
    v.set("SIM_WIND_SPD", 10)
    v.run(1.0)
    assert abs(v.c.wind.n) / 10 == pytest.approx(0.63, abs=0.05)
    v.run(2.0)
    assert abs(v.c.wind.n) / 10 == pytest.approx(0.95, abs=0.03)


def test_turbulence_is_seeded_and_has_the_measured_spread():
    """Same seed and parameters: the same gusts; another seed: others. SPD 10 TURB 2 at 10 m:
    measured mean 4.29 m/s, std 1.38 (the felt airspeed)."""

    class P(dict):
        def get(self, k, d=0.0):
            return super().get(k, d)

    p = P(SIM_WIND_SPD=10, SIM_WIND_DIR=0, SIM_WIND_TURB=2, SIM_WIND_TC=5, SIM_WIND_T=0, SIM_WIND_T_ALT=60)

    def series(seed):
        w = Wind(seed)
        out = []
        for _ in range(int(600 / DT)):
            w.update(p, 10.0, DT)
            out.append(math.hypot(w.n, w.e))
        return out

    a, b, c = series(1), series(1), series(2)
    assert a == b and a != c
    tail = a[int(10 / DT) :]
    mean = sum(tail) / len(tail)
    std = math.sqrt(sum((x - mean) ** 2 for x in tail) / len(tail))
    assert mean == pytest.approx(4.3, abs=0.5)
    assert std == pytest.approx(1.38, abs=0.6)


@pytest.mark.parametrize("spd,tilt", [(5, 3.7), (10, 8.9)])
def test_holding_leans_into_the_wind(tmp_path, spd, tilt):
    """GUIDED at 10 m in wind from the east: lean 3.6-3.8° (SPD 5) / 8.8-9.0° (SPD 10) towards
    the east (SIM_WIND_DIR ±3°), position held."""
    v = Vehicle(tmp_path)
    v.takeoff(10)
    c = v.c
    p0 = (c.north, c.east)
    v.set("SIM_WIND_DIR", 90)
    v.set("SIM_WIND_SPD", spd)
    v.run(20)
    assert math.hypot(c.roll, c.pitch) == pytest.approx(tilt, abs=0.3)
    h = math.radians(c.heading)
    fwd, right = -math.tan(math.radians(c.pitch)), math.tan(math.radians(c.roll))
    bearing = math.degrees(math.atan2(fwd * math.sin(h) + right * math.cos(h), fwd * math.cos(h) - right * math.sin(h)))
    assert bearing % 360 == pytest.approx(90, abs=3)
    assert math.hypot(c.north - p0[0], c.east - p0[1]) < 0.05


@pytest.mark.parametrize("spd,wtype,at3,at10", [(10, 0, 2.45, 3.78), (5, 0, 1.12, 1.85), (10, 1, 6.85, 9.53)])
def test_alt_hold_drifts_downwind_at_the_wind_speed(tmp_path, spd, wtype, at3, at10):
    """ALT_HOLD, sticks centred: the ground speed builds up as measured (+3 s, +10 s) exactly
    downwind, altitude held."""
    v = Vehicle(tmp_path, SIM_WIND_T=wtype)
    v.takeoff(10)
    c = v.c
    v.set("SIM_WIND_DIR", 0)
    v.set("SIM_WIND_SPD", spd)
    v.run(10)
    assert c.set_mode(MODES["ALT_HOLD"], None) == 0
    v.run(3)
    assert math.hypot(c.vn, c.ve) == pytest.approx(at3, abs=0.3)
    v.run(7)
    assert math.hypot(c.vn, c.ve) == pytest.approx(at10, abs=0.3)
    assert math.degrees(math.atan2(c.ve, c.vn)) % 360 == pytest.approx(180, abs=1)
    assert c.rel_alt == pytest.approx(10, abs=0.1)
    assert abs(c.roll) + abs(c.pitch) < 0.5


def test_goto_upwind_is_slower_downwind_is_not(tmp_path):
    """100 m upwind at SPD 10 (4.08 m/s at 10 m): ~6.2 m/s ground speed (30° lean, ~10.25 m/s of
    air), 19.4-20.0 s measured; downwind at WPNAV_SPEED, 15.1 s measured (ours: 14.1 s, as
    without wind: the built-in vehicle's goto is ~1 s quicker)."""
    assert max_airspeed(30) == pytest.approx(10.25, abs=0.05)
    v = Vehicle(tmp_path)
    v.takeoff(10)
    c = v.c
    v.set("SIM_WIND_DIR", 0)
    v.set("SIM_WIND_SPD", 10)
    v.run(10)
    n0 = c.north
    assert c.goto_local(n0 + 100, c.east, c.alt)
    t0, top = c.t, [0.0]

    def arrived(c, n):
        top[0] = max(top[0], math.hypot(c.vn, c.ve))
        return abs(c.north - n) < 1.5 and math.hypot(c.vn, c.ve) < 1

    assert v.run(60, until=lambda c: arrived(c, n0 + 100))
    assert c.t - t0 == pytest.approx(19.6, abs=2)
    assert top[0] == pytest.approx(6.19, abs=0.3)
    assert math.hypot(c.roll, c.pitch) <= 30.01
    assert c.goto_local(n0, c.east, c.alt)
    t0, top[0] = c.t, 0.0
    assert v.run(60, until=lambda c: arrived(c, n0))
    assert c.t - t0 == pytest.approx(15.1, abs=2)
    assert top[0] == pytest.approx(10.0, abs=0.1)


def test_battery_failsafe_low_then_critical(tmp_path):
    """FAILSAFES.md §3: +10.2 s RTL with "Battery 1 is low 10.50V used N mAh" and "Battery
    Failsafe"; critical: LAND +10.2 s; BATTERY unhealthy; ERR FAILSAFE_BATT; mode reason."""
    v = Vehicle(tmp_path, BATT_LOW_VOLT=11.0, BATT_FS_LOW_ACT=2, BATT_CRT_VOLT=10.2, BATT_FS_CRT_ACT=1)
    v.takeoff(15)
    t0 = v.c.t
    v.set("SIM_BATT_VOLTAGE", 10.5)
    assert v.run(12, until=lambda c: MODE_NAMES[c.mode] == "RTL")
    assert v.c.t - t0 == pytest.approx(10.2, abs=0.1)
    low = [tx for t, sev, tx in v.texts if t >= t0 and sev == 4]
    assert (
        low[0].startswith("Battery 1 is low 10.50V used ") and low[0].endswith(" mAh") and low[1] == "Battery Failsafe"
    )
    assert not v.c.health()[2] & 0x2000000
    t1 = v.c.t
    v.set("SIM_BATT_VOLTAGE", 10.0)
    assert v.run(12, until=lambda c: MODE_NAMES[c.mode] == "LAND")
    assert v.c.t - t1 == pytest.approx(10.2, abs=0.1)
    assert (MODES["RTL"], "battery_failsafe") in v.rec.modes and (MODES["LAND"], "battery_failsafe") in v.rec.modes
    assert [e[1:] for e in v.rec.errors] == [(ERR["FAILSAFE_BATT"], 1), (ERR["FAILSAFE_BATT"], 1)]
    assert MODE_REASONS["battery_failsafe"] == 4


def test_radio_failsafe_and_overrides(tmp_path):
    """SIM_RC_FAIL=1: RTL +1.0-1.1 s, "Radio Failsafe", RC_RECEIVER unhealthy; cleared: stays
    RTL. With RC overrides coming: nothing until 1 s after the last one."""
    v = Vehicle(tmp_path)
    v.takeoff(15)
    c = v.c
    assert c.set_mode(MODES["LOITER"], None) == 0
    t0 = c.t
    v.set("SIM_RC_FAIL", 1)
    for _ in range(60):  # overrides at 10 Hz for 6 s: RC input
        c.rc_override(1500)
        v.run(0.1)
    assert v.mode() == "LOITER" and not v.said("Radio Failsafe", t0)
    last = c.t
    assert v.run(3, until=lambda c: MODE_NAMES[c.mode] == "RTL")
    assert c.t - last == pytest.approx(1.0, abs=0.15)
    assert not c.health()[2] & 0x10000
    v.set("SIM_RC_FAIL", 0)
    v.run(0.5)
    assert v.said("Radio Failsafe Cleared") and v.mode() == "RTL" and c.health()[2] & 0x10000


def test_gcs_failsafe_after_the_last_heartbeat(tmp_path):
    """FS_GCS_ENABLE=1: RTL 5.16-5.30 s after the last heartbeat; "GCS Failsafe Cleared" on the
    next; FS_OPTIONS 16: in a pilot mode (ALT_HOLD) the text only."""
    v = Vehicle(tmp_path, FS_GCS_ENABLE=1)
    v.takeoff(15)
    c = v.c
    c.gcs_heartbeat()
    t0 = c.t
    assert v.run(8, until=lambda c: MODE_NAMES[c.mode] == "RTL")
    assert c.t - t0 == pytest.approx(5.23, abs=0.1) and v.said("GCS Failsafe", t0)
    c.gcs_heartbeat()
    assert v.said("GCS Failsafe Cleared", t0) and v.mode() == "RTL"
    assert c.set_mode(MODES["ALT_HOLD"], None) == 0
    t1 = c.t
    v.run(7)
    assert v.said("GCS Failsafe", t1) and v.mode() == "ALT_HOLD"


def test_gps_loss_ekf_failsafe_lands(tmp_path):
    """SIM_GPS1_ENABLE=0: no fix +0.5, EKF position lost +7.3, LAND +8.0 with "EKF variance" and
    "EKF Failsafe: changed to LAND Mode", "stopped aiding" +15.2, lands and disarms; GUIDED is
    refused meanwhile; GPS back: the EKF uses it again."""
    v = Vehicle(tmp_path)
    v.takeoff(15)
    c = v.c
    t0 = c.t
    v.set("SIM_GPS1_ENABLE", 0)
    v.run(0.6)
    assert c.gps_fix == 0
    assert v.run(8, until=lambda c: c.ekf_flags() & 0x10 == 0)
    assert c.t - t0 == pytest.approx(7.3, abs=0.1)
    assert v.run(2, until=lambda c: MODE_NAMES[c.mode] == "LAND")
    assert c.t - t0 == pytest.approx(8.0, abs=0.1)
    assert v.said("EKF variance", t0) and v.said("EKF Failsafe: changed to LAND Mode", t0)
    assert c.set_mode(MODES["GUIDED"], None) != 0
    assert v.run(60, until=lambda c: not c.armed)
    assert v.said("EKF3 IMU0 stopped aiding", t0)[0] == pytest.approx(15.2, abs=0.1)
    v.set("SIM_GPS1_ENABLE", 1)
    assert v.run(10, until=lambda c: c.ekf_flags() & 0x10)
    assert c.position_ok and v.said("EKF Failsafe Cleared", t0)


def test_fence_circle_and_altitude(tmp_path):
    """A destination outside the circle is ignored; flying out: RTL at FENCE_RADIUS with "Circle
    fence breached", "Manual recovery started"; cleared back inside by FENCE_MARGIN. NAV_TAKEOFF 40
    under FENCE_ALT_MAX 30: RTL at 30 m."""
    v = Vehicle(
        tmp_path, AVOID_ENABLE=0, FENCE_ENABLE=1, FENCE_TYPE=3, FENCE_RADIUS=60, FENCE_ALT_MAX=30, FENCE_ACTION=1
    )
    v.takeoff(15)
    c = v.c
    assert not c.goto_local(c.north + 120, c.east, c.alt)
    assert c.goto_local(c.north + 50, c.east, c.alt)
    v.run(15)
    t0 = c.t
    assert v.run(30, until=lambda c: c.set_velocity(3, 0, 0) and False or MODE_NAMES[c.mode] == "RTL")
    assert math.hypot(c.north - c.home_n, c.east - c.home_e) == pytest.approx(60, abs=0.2)
    assert v.said("Circle fence breached", t0) and v.said("Manual recovery started", t0)
    assert not c.health()[2] & 0x100000 and c.health()[1] & 0x100000
    assert v.run(30, until=lambda c: "fence" not in c.fs)
    assert v.said("Fence breach cleared", t0)
    assert (MODES["RTL"], "fence_breached") in v.rec.modes
    assert (ERR["FAILSAFE_FENCE"], 2) in [e[1:] for e in v.rec.errors]


@pytest.mark.parametrize(
    "mul,ground,text", [(0.0, 1.7, "Potential Thrust Loss (2)"), (0.5, 3.4, "Potential Thrust Loss (1)")]
)
def test_failed_motor_falls_and_stays_armed(tmp_path, mul, ground, text):
    """SIM_ENGINE_MUL then SIM_ENGINE_FAIL=1 from 10 m: 0 flips (roll ~106°) and hits the ground
    at +1.7 s; 0.5 spins at -46°/s and hits it at +3.4 s; "Potential Thrust Loss"; no disarm, no
    mode change (as measured)."""
    v = Vehicle(tmp_path)
    v.takeoff(10)
    c = v.c
    v.set("SIM_ENGINE_MUL", mul)
    t0 = c.t
    v.set("SIM_ENGINE_FAIL", 1)
    v.run(1.0)
    assert abs(c.roll) > 30
    assert v.run(5, until=lambda c: c.alt <= 0)
    assert c.t - t0 == pytest.approx(ground, abs=0.3)
    v.run(30)
    assert c.armed and v.mode() == "GUIDED" and v.said(text, t0)
    v.set("SIM_ENGINE_FAIL", 0)
    assert v.run(20, until=lambda c: c.rel_alt > 9), "motor back: it climbs to its target again"


def test_three_quarter_motor_holds(tmp_path):
    v = Vehicle(tmp_path)
    v.takeoff(10)
    v.set("SIM_ENGINE_MUL", 0.75)
    v.set("SIM_ENGINE_FAIL", 1)
    v.run(10)
    assert v.c.rel_alt == pytest.approx(10, abs=0.1) and not any("Thrust" in t for _, _, t in v.texts)


def test_gps_glitch_moves_the_estimate_not_the_vehicle(tmp_path):
    """SIM_GPS1_GLTCH_X 0.0003: text +1.2 s, GPS_GLITCH flag, EKF reset to the GPS +10 s (33.4 m
    north reported, true position unchanged), "Glitch cleared" +20 s."""
    v = Vehicle(tmp_path)
    v.takeoff(10)
    c = v.c
    t0 = c.t
    v.set("SIM_GPS1_GLTCH_X", 0.0003)
    v.run(2)
    assert v.said("GPS Glitch or Compass error", t0)[0] == pytest.approx(1.2, abs=0.1)
    assert c.ekf_flags() & 0x8000
    v.run(9)
    assert c.est_dn == pytest.approx(33.4, abs=0.1) and abs(c.north) < 0.05
    v.run(10)
    assert v.said("Glitch cleared", t0)[0] == pytest.approx(20.0, abs=0.1) and not c.ekf_flags() & 0x8000


def test_compass_and_baro_faults(tmp_path):
    v = Vehicle(tmp_path)
    v.takeoff(10)
    t0 = v.c.t
    v.set("SIM_MAG1_FAIL", 1)
    v.set("SIM_BARO_DISABLE", 1)
    v.run(1)
    assert not v.c.health()[2] & 0xC
    v.run(10)
    assert v.said("EKF3 IMU0 switching to compass 1", t0)[0] == pytest.approx(10.0, abs=0.1)
    v.set("SIM_MAG1_FAIL", 0)
    v.set("SIM_BARO_DISABLE", 0)
    v.run(0.1)
    assert v.c.health()[2] & 0xC == 0xC


def test_fence_polygon_from_the_uploaded_fence(tmp_path):
    """FENCE_TYPE bit 4 with an inclusion polygon (NAV_FENCE_POLYGON_VERTEX_INCLUSION, 5001) of the
    fence list: "Polygon fence breached" and RTL on leaving it (not measured on ArduCopter)."""
    from sitlpool.sim.geo import to_latlon
    from sitlpool.sim.state import MissionItem

    v = Vehicle(tmp_path, FENCE_ENABLE=1, FENCE_TYPE=4, FENCE_ACTION=1, AVOID_ENABLE=0)
    c = v.c
    corners = [to_latlon(c.origin_lat, c.origin_lon, n, e) for n, e in ((-40, -40), (40, -40), (40, 40), (-40, 40))]
    c.fence_items = lambda: [MissionItem(5001, lat, lon, 0, (4, 0, 0, 0)) for lat, lon in corners]
    v.takeoff(10)
    t0 = c.t
    assert v.run(30, until=lambda c: c.set_velocity(0, 3, 0) and False or MODE_NAMES[c.mode] == "RTL")
    assert c.east == pytest.approx(40, abs=0.2)
    assert v.said("Polygon fence breached", t0)
    assert v.run(30, until=lambda c: "fence" not in c.fs) and v.said("Fence breach cleared", t0)
