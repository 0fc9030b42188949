"""Failsafes and faults (issue 22) on the built-in vehicle and on real ArduCopter 4.7, side by side:
each scenario hovers in GUIDED, injects a fault by PARAM_SET of ArduPilot's own ``SIM_*`` and
failsafe parameters, and records the modes, STATUSTEXTs, SYS_STATUS/EKF bits and their sim times
(seconds after the PARAM_SET, from the vehicle's time_boot_ms). Expectations are the figures
measured on the real binary (../shared/ardupilot/FAILSAFES.md, bench/measure_real_world); the
differential test compares the records within TOLERANCES (sim seconds, metres).

The scenarios share one vehicle per kind, in order; the battery failsafe and SIM_RC_FAIL=2's
neutral RC latch on ArduCopter until a reboot: those scenarios run last and reboot the vehicle."""

from __future__ import annotations

import math
import re
import time

import pytest

from gcs_scenarios import (  # noqa: F401
    HOME,
    MODES,
    arducopter_vehicle,
    assert_same,
    builtin_vehicle,
    cases,
    check,
    distance,
    near,
    records,
    reset,
)

pytestmark = pytest.mark.xdist_group("gcs_world_failsafes")

NAMES = {v: k for k, v in MODES.items()}
RC_RECEIVER, BATTERY, GEOFENCE, MAG, BARO = 0x10000, 0x2000000, 0x100000, 0x4, 0x8
XY_CONTROL = 0x4000
EKF_POS_HORIZ_ABS, EKF_POS_VERT_ABS, EKF_GPS_GLITCH = 0x10, 0x20, 0x8000


class Watch:
    """Reads everything a GCS gets and keeps, on the vehicle's clock (seconds after ``mark``): the
    modes, the texts, the sim time each SYS_STATUS health bit first went 0 and back, the EKF flags,
    the farthest distance from home and the highest altitude."""

    def __init__(self, g, override: bool = False, heartbeats: bool = False):
        self.g = g
        self.t = 0.0  # time_boot_ms of the last message that had one
        self.t0 = 0.0
        self.mode = ""
        self.armed = False
        self.modes: list[tuple[float, str]] = []
        self.texts: list[tuple[float, int, str]] = []
        self.lost: dict[int, float] = {}
        self.back: dict[int, float] = {}
        self.health = 0
        self.ekf = 0
        self.ekf_lost: float | None = None
        self.alt = 0.0
        self.max_alt = 0.0
        self.max_dist = 0.0
        self.pos: tuple[float, float] | None = None
        self.true_pos: tuple[float, float] | None = None
        self.vel = (0.0, 0.0)
        self.att = (0.0, 0.0, 0.0)
        self.fix = 6
        self.override = override  # RC override ch1-4 at 1500 (centred sticks), 5 Hz of sim time
        self.heartbeats = heartbeats  # a GCS heartbeat every sim second
        self.at_text: dict[str, tuple[float, float]] = {}  # first text -> (altitude, true distance from home)
        self.dist = 0.0
        self.home = HOME[:2]  # where the vehicle armed (its home, the fence's centre)
        self.next_override = self.next_hb = 0.0
        self.hooks: list = []

    def mark(self) -> None:
        self.run(0.3)  # the clock as of now
        self.t0 = self.t
        self.modes, self.texts, self.lost, self.back, self.at_text = [], [], {}, {}, {}
        self.max_alt, self.max_dist, self.ekf_lost = self.alt, 0.0, None

    def trigger(self, name: str, value: float) -> None:
        """PARAM_SET ``name``; the clock's zero (``mark``) is the sim time of its PARAM_VALUE."""
        self.mark()
        self.set(name, value)
        self.t0 = self.t

    def set(self, name: str, value: float) -> None:
        self.g.m.mav.param_set_send(1, 1, name.encode(), value, 9)
        got = lambda w, m: m.get_type() == "PARAM_VALUE" and m.param_id == name  # noqa: E731
        seen = []
        self.hooks.append(lambda w, m: seen.append(1) if got(w, m) else None)
        try:
            self.run(5, until=lambda w: bool(seen))
        finally:
            self.hooks.pop()

    def rel(self) -> float:
        return round(self.t - self.t0, 2)

    def run(self, sim_s: float, until=None) -> bool:
        """Read for ``sim_s`` sim seconds (or until ``until(self)``); True if ``until`` came."""
        g, start = self.g, None
        deadline = time.monotonic() + 4 * sim_s / g.speedup + 15  # a starved SITL runs slower than asked
        while time.monotonic() < deadline:
            now = self.t  # on the vehicle's clock: the same rates in sim time at any speedup
            if self.override and not self.next_override <= now < self.next_override + 0.2:
                self.next_override = now
                g.m.mav.rc_channels_override_send(1, 1, 1500, 1500, 1500, 1500, 0, 0, 0, 0)
            if self.heartbeats and not self.next_hb <= now < self.next_hb + 1.0:
                self.next_hb = now
                g.m.mav.heartbeat_send(6, 8, 0, 0, 0)
            m = g.m.recv_match(blocking=True, timeout=0.05)
            if m is None:
                continue
            self.see(m)
            if start is None and self.t > 0:
                start = self.t  # the clock as of the first message that has one
            if until is not None and until(self):
                return True
            if start is not None and self.t - start >= sim_s:
                return False
        return False

    def see(self, m) -> None:
        typ = m.get_type()
        ms = getattr(m, "time_boot_ms", None)
        if ms is not None and ms / 1000 > self.t - 5:
            self.t = ms / 1000
        if typ == "STATUSTEXT":
            self.texts.append((self.rel(), m.severity, m.text))
            self.at_text.setdefault(m.text, (self.alt, self.dist))
            self.g.seen_texts.append(m.text)
        elif typ == "HEARTBEAT" and m.type != 6:
            self.armed = bool(m.base_mode & 128)
            name = NAMES.get(m.custom_mode, str(m.custom_mode))
            if name != self.mode:
                self.mode = name
                self.modes.append((self.rel(), name))
        elif typ == "SYS_STATUS":
            h = m.onboard_control_sensors_health
            for bit in (RC_RECEIVER, BATTERY, GEOFENCE, MAG, BARO, XY_CONTROL):
                if self.health & bit and not h & bit and bit not in self.lost:
                    self.lost[bit] = self.rel()
                if not self.health & bit and h & bit and bit in self.lost and bit not in self.back:
                    self.back[bit] = self.rel()
            self.health = h
        elif typ == "EKF_STATUS_REPORT":
            if self.ekf & EKF_POS_HORIZ_ABS and not m.flags & EKF_POS_HORIZ_ABS and self.ekf_lost is None:
                self.ekf_lost = self.rel()
            self.ekf = m.flags
        elif typ == "GLOBAL_POSITION_INT":
            self.alt = m.relative_alt / 1000
            self.max_alt = max(self.max_alt, self.alt)
            self.pos = (m.lat / 1e7, m.lon / 1e7)
            self.vel = (m.vx / 100, m.vy / 100)
        elif typ == "SIMSTATE":
            self.true_pos = (m.lat / 1e7, m.lng / 1e7)
            self.dist = distance(*self.home, *self.true_pos)
            self.max_dist = max(self.max_dist, self.dist)
        elif typ == "ATTITUDE":
            self.att = (math.degrees(m.roll), math.degrees(m.pitch), math.degrees(m.yaw))
        elif typ == "GPS_RAW_INT":
            self.fix = m.fix_type
        for hook in self.hooks:
            hook(self, m)

    def first(self, text: str) -> float | None:
        return next((t for t, _, tx in self.texts if tx.startswith(text)), None)

    def mode_at(self, name: str) -> float | None:
        return next((t for t, n in self.modes if n == name), None)

    def said(self, *prefixes: str) -> list[str]:
        """The texts starting with one of ``prefixes``, in order, numbers of mAh and m/s as N."""
        out = []
        for _, _, tx in self.texts:
            if tx.startswith(prefixes):
                out.append(re.sub(r"used \d+ mAh", "used N mAh", tx))
        return out


def hover(v, params: dict | None = None, alt: float = 15, **watch) -> Watch:
    """The vehicle hovering ``alt`` m over home in GUIDED, ``params`` set before arming."""
    g = reset(v)
    try:
        for k, val in (params or {}).items():
            g.param_set(k, val)
        g.m.mav.request_data_stream_send(1, 1, 10, 10, 1)  # EXTRA1 (ATTITUDE, SIMSTATE) at 10 Hz
        g.m.mav.request_data_stream_send(1, 1, 6, 4, 1)  # POSITION at 4 Hz
        assert g.takeoff(alt), f"took off (texts: {g.seen_texts[-8:]})"
        w = Watch(g, **watch)
        h = g.home()
        if h is not None:
            w.home = (h.latitude / 1e7, h.longitude / 1e7)
        w.run(3)
        return w
    except BaseException:
        g.close()  # the port is free for the next scenario
        raise


def finish(w: Watch, restore: dict, reboot: bool = False) -> None:
    """Parameters back, landed and disarmed; ``reboot``: PREFLIGHT_REBOOT_SHUTDOWN as well, for a
    failsafe ArduCopter keeps until it reboots (battery; SIM_RC_FAIL=2's neutral RC)."""
    g = w.g
    w.override = False
    try:
        for k, val in restore.items():
            g.param_set(k, val)
        if w.armed:
            g.mode("LAND")
            g.wait_disarmed(g.wall(90))
        if reboot:
            g.cmd(246, 1)
            time.sleep(0.5)
    finally:
        g.close()


# ---- scenarios ---------------------------------------------------------------------------------


def s_radio(v) -> dict:
    """SIM_RC_FAIL=1 in GUIDED: RTL after RC_FS_TIMEOUT (1 s); cleared when it comes back."""
    w = hover(v)
    try:
        w.trigger("SIM_RC_FAIL", 1)
        w.run(6, until=lambda w: w.mode == "RTL" and RC_RECEIVER in w.lost)
        w.run(1)
        w.set("SIM_RC_FAIL", 0)
        w.run(2, until=lambda w: w.first("Radio Failsafe Cleared") is not None)
        w.run(1.5)
        return {
            "modes": [n for _, n in w.modes],
            "texts": w.said("Radio Failsafe"),
            "failsafe_s": w.first("Radio Failsafe"),
            "rc_unhealthy_s": w.lost.get(RC_RECEIVER),
            "rc_healthy_again": RC_RECEIVER in w.back,
        }
    finally:
        finish(w, {"SIM_RC_FAIL": 0})


def s_radio_neutral(v) -> dict:
    """SIM_RC_FAIL=2 (neutral sticks, throttle 950 < FS_THR_VALUE): RTL at once."""
    w = hover(v)
    try:
        w.trigger("SIM_RC_FAIL", 2)
        w.run(4, until=lambda w: w.mode == "RTL")
        w.run(0.5)
        rec = {
            "modes": [n for _, n in w.modes],
            "failsafe_s": w.first("Radio Failsafe"),
            "rc_unhealthy_s": w.lost.get(RC_RECEIVER),
        }
        w.set("SIM_RC_FAIL", 0)
        w.run(3)
        rec["texts"] = w.said("Radio Failsafe")  # SITL keeps the neutral RC: no "Cleared"
        return rec
    finally:
        finish(w, {"SIM_RC_FAIL": 0}, reboot=True)


def s_gcs(v) -> dict:
    """FS_GCS_ENABLE=1: heartbeats stop, RTL after FS_GCS_TIMEOUT (5 s); they resume: cleared."""
    w = hover(v, heartbeats=True)
    try:
        w.g.param_set("FS_GCS_ENABLE", 1)  # once the heartbeats come (a takeoff without them would trip it)
        w.run(2)
        w.heartbeats = False
        w.mark()
        w.g.m.mav.heartbeat_send(6, 8, 0, 0, 0)  # the last one: the clock starts as it arrives,
        w.set("FS_GCS_ENABLE", 1)  # when the PARAM_VALUE sent after it comes back
        w.t0 = w.t
        w.run(9, until=lambda w: w.mode == "RTL")
        w.run(0.5)
        w.heartbeats = True
        w.run(2, until=lambda w: w.first("GCS Failsafe Cleared") is not None)
        return {
            "modes": [n for _, n in w.modes],
            "texts": w.said("GCS Failsafe"),
            "failsafe_s": w.first("GCS Failsafe"),
        }
    finally:
        w.heartbeats = False
        finish(w, {"FS_GCS_ENABLE": 0})


def s_gps_loss(v) -> dict:
    """SIM_GPS1_ENABLE=0: no fix, EKF position lost at ~7.3 s, EKF failsafe LAND at ~8 s."""
    w = hover(v)
    try:
        w.trigger("SIM_GPS1_ENABLE", 0)
        w.run(12, until=lambda w: w.mode == "LAND" and XY_CONTROL in w.lost)
        w.run(1)
        return {
            "fix_lost": w.fix < 3,
            "modes": [n for _, n in w.modes],
            "texts": w.said("EKF variance", "EKF Failsafe"),
            "ekf_pos_lost_s": w.ekf_lost,
            "failsafe_s": w.first("EKF Failsafe"),
            "xy_control_lost_s": w.lost.get(XY_CONTROL),
        }
    finally:
        finish(w, {"SIM_GPS1_ENABLE": 1})


def s_fence_circle(v) -> dict:
    """FENCE_TYPE 2, FENCE_RADIUS 60: a destination outside is ignored; flying out at 10 m/s with
    the fence avoidance off (AVOID_ENABLE 0; with it, test_gcs_world_fence.py): breach, RTL."""
    w = hover(v, {"FENCE_ENABLE": 1, "FENCE_TYPE": 2, "FENCE_RADIUS": 60, "FENCE_ACTION": 1, "AVOID_ENABLE": 0})
    g = w.g
    try:
        lat, lon = w.home[0] + 120 / 111319.5, w.home[1]
        g.m.mav.set_position_target_global_int_send(
            0, 1, 1, 6, 0b110111111000, int(lat * 1e7), int(lon * 1e7), 15, 0, 0, 0, 0, 0, 0, 0, 0
        )
        start = w.pos
        w.run(5)
        moved = distance(*start, *w.pos) if start and w.pos else None
        w.mark()

        def push(w, m):
            if m.get_type() == "GLOBAL_POSITION_INT" and w.mode == "GUIDED":
                w.g.m.mav.set_position_target_local_ned_send(
                    0, 1, 1, 1, 0b110111000111, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0
                )

        w.hooks.append(push)
        w.run(40, until=lambda w: w.mode == "RTL")
        w.hooks.clear()
        w.run(0.5)  # the texts of that instant (they may follow the HEARTBEAT)
        breach_dist = w.at_text.get("Circle fence breached", (0, None))[1]
        w.run(15, until=lambda w: w.first("Fence breach cleared") is not None)
        return {
            "outside_destination_moved_m": None if moved is None else round(moved, 1),
            "modes": [n for _, n in w.modes],
            "texts": w.said("Circle fence", "Manual recovery", "Fence breach"),
            "breach_distance_m": None if breach_dist is None else round(breach_dist, 1),
            "max_distance_m": round(w.max_dist, 1),
            "breach_s": w.first("Circle fence"),
            "geofence_unhealthy": GEOFENCE in w.lost,
            "_cleared_after_breach_s": (
                None
                if w.first("Fence breach cleared") is None
                else round(w.first("Fence breach cleared") - w.first("Circle fence"), 1)
            ),
        }
    finally:
        finish(w, {"FENCE_ENABLE": 0, "FENCE_TYPE": 7, "FENCE_RADIUS": 150, "AVOID_ENABLE": 3})


def s_fence_alt(v) -> dict:
    """FENCE_TYPE 3, FENCE_ALT_MAX 30; NAV_TAKEOFF 40: RTL at 30 m."""
    g = reset(v)
    for k, val in {"FENCE_ENABLE": 1, "FENCE_TYPE": 3, "FENCE_ALT_MAX": 30, "FENCE_ACTION": 1}.items():
        g.param_set(k, val)
    g.m.mav.request_data_stream_send(1, 1, 6, 4, 1)
    w = Watch(g)
    try:
        g.mode("GUIDED")
        g.arm()
        w.run(1.5)  # a HEARTBEAT: the mode before
        w.mark()
        took = g.cmd(22, 0, 0, 0, 0, 0, 0, 40)
        w.t0 = w.t
        w.run(40, until=lambda w: w.mode == "RTL")
        w.run(0.5)
        breach_alt = w.at_text.get("Max Alt fence breached", (0.0, 0.0))[0]
        w.run(25, until=lambda w: w.first("Fence breach cleared") is not None)
        return {
            "takeoff": took,
            "modes": [n for _, n in w.modes if n != "GUIDED"],  # (GUIDED: set just before)
            "texts": w.said("Max Alt fence", "Manual recovery", "Fence breach"),
            "breach_s": w.first("Max Alt fence"),
            "breach_alt_m": round(breach_alt, 1),
            "max_alt_m": round(w.max_alt, 1),
            "cleared_s": w.first("Fence breach cleared"),
        }
    finally:
        finish(w, {"FENCE_ENABLE": 0, "FENCE_TYPE": 7, "FENCE_ALT_MAX": 100})


def s_battery(v) -> dict:
    """BATT_LOW_VOLT 11 (RTL), BATT_CRT_VOLT 10.2 (LAND); SIM_BATT_VOLTAGE 10.5 then 10.0."""
    params = {"BATT_LOW_VOLT": 11.0, "BATT_FS_LOW_ACT": 2, "BATT_CRT_VOLT": 10.2, "BATT_FS_CRT_ACT": 1}
    w = hover(v, params)
    try:
        w.trigger("SIM_BATT_VOLTAGE", 10.5)
        w.run(14, until=lambda w: w.mode == "RTL")
        w.run(0.5)
        low = w.first("Battery 1 is low")
        w.run(3)
        w.set("SIM_BATT_VOLTAGE", 10.0)
        t1 = w.t
        w.run(14, until=lambda w: w.first("Battery 1 is critical") is not None)
        crt = w.first("Battery 1 is critical")
        w.run(2)
        return {
            "modes": [n for _, n in w.modes],
            "texts": w.said("Battery"),
            "low_s": low,
            "critical_after_s": None if crt is None else round(w.t0 + crt - t1, 2),
            "battery_unhealthy": BATTERY in w.lost,
        }
    finally:
        finish(
            w, {"SIM_BATT_VOLTAGE": 12.6, "BATT_FS_LOW_ACT": 0, "BATT_FS_CRT_ACT": 0, "BATT_CRT_VOLT": 0}, reboot=True
        )


SCENARIOS = {
    "radio": s_radio,
    "gcs": s_gcs,
    "gps_loss": s_gps_loss,
    "fence_circle": s_fence_circle,
    "fence_alt": s_fence_alt,
    # these two latch on ArduCopter until a reboot: each ends with one
    "battery": s_battery,
    "radio_neutral": s_radio_neutral,
}

EXPECT = {
    "radio": {
        "modes": ["RTL"],
        "texts": ["Radio Failsafe", "Radio Failsafe Cleared"],
        "failsafe_s": near(1.05, 0.4),
        "rc_unhealthy_s": near(1.1, 0.6),
        "rc_healthy_again": True,
    },
    "radio_neutral": {
        "modes": ["RTL"],
        "texts": ["Radio Failsafe"],
        "failsafe_s": near(0.1, 0.4),
        "rc_unhealthy_s": near(0.1, 0.6),
    },
    "gcs": {"modes": ["RTL"], "texts": ["GCS Failsafe", "GCS Failsafe Cleared"], "failsafe_s": near(5.2, 0.6)},
    "gps_loss": {
        "fix_lost": True,
        "modes": ["LAND"],
        "texts": ["EKF variance", "EKF Failsafe: changed to LAND Mode"],
        "ekf_pos_lost_s": near(7.3, 0.6),
        "failsafe_s": near(8.05, 0.6),
        "xy_control_lost_s": near(8.3, 0.7),
    },
    "fence_circle": {
        "outside_destination_moved_m": near(0, 1),
        "modes": ["RTL"],
        "texts": ["Circle fence breached", "Manual recovery started", "Fence breach cleared"],
        "breach_distance_m": near(60, 1.5),
        "geofence_unhealthy": True,
        # measured with AVOID_ENABLE 0 from a 15 m hover: breach at +8.5 s, 82.6 m at most
        "breach_s": near(8.5, 1),
        "max_distance_m": near(82.6, 6),
    },
    "fence_alt": {
        "takeoff": 0,
        "modes": ["RTL"],
        "texts": ["Max Alt fence breached", "Manual recovery started", "Fence breach cleared"],
        "breach_alt_m": near(30, 1),
        "max_alt_m": near(32.4, 1.5),
    },
    "battery": {
        "modes": ["RTL", "LAND"],
        "texts": [
            "Battery 1 is low 10.50V used N mAh",
            "Battery Failsafe",
            "Battery 1 is critical 10.00V used N mAh",
            "Battery Failsafe",
        ],
        "low_s": near(10.2, 0.5),
        "critical_after_s": near(10.2, 0.5),
        "battery_unhealthy": True,
    },
}
# absolute tolerances of the differential comparison (sim seconds, metres, degrees)
TOLERANCES = {
    "failsafe_s": 0.5,
    "rc_unhealthy_s": 0.6,
    "ekf_pos_lost_s": 0.6,
    "xy_control_lost_s": 0.7,
    "outside_destination_moved_m": 1,
    "breach_distance_m": 1.5,
    "max_distance_m": 6,
    "cleared_after_breach_s": 6,
    "breach_s": 3,  # real ArduCopter itself breached after 14.25-15.75 s in three runs (its climb timing); the altitude is checked to 1 m
    "breach_alt_m": 1,
    "max_alt_m": 1.5,
    "cleared_s": 3,
    "low_s": 0.5,
    "critical_after_s": 0.5,
}

XFAIL: dict[str, str] = {}
XFAIL_DIFF: dict[str, str] = {}


@pytest.mark.parametrize("name,kind", cases(SCENARIOS, XFAIL))
def test_world_failsafe(records, name, kind):
    rec = records.get(name, kind)
    bad = check(rec, EXPECT[name])
    assert not bad, f"{name} on {kind}: " + "; ".join(bad) + f"\n(record: {rec})"


@pytest.mark.parametrize("name,kind", cases(SCENARIOS, XFAIL_DIFF, kinds=("diff",)))
def test_world_failsafe_same_as_arducopter(records, name, kind):
    assert_same("failsafes", name, records, TOLERANCES)
