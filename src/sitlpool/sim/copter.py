"""A MAVLink copter with simple kinematics, on simulated time.

Behaves like ArduCopter where clients can tell: mode numbers, arming checks with
``PreArm:``/``Arm:`` texts, COMMAND_ACK results, GUIDED takeoff and go-to, LAND, RTL,
landing detection and auto-disarm. Everything runs on sim time (speedup honoured).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Callable

os.environ.setdefault("MAVLINK20", "1")
from pymavlink.dialects.v20 import ardupilotmega as mavlink  # noqa: E402

from .params import Params  # noqa: E402

MODES = {
    "STABILIZE": 0, "ACRO": 1, "ALT_HOLD": 2, "AUTO": 3, "GUIDED": 4, "LOITER": 5, "RTL": 6,
    "CIRCLE": 7, "LAND": 9, "DRIFT": 11, "SPORT": 13, "FLIP": 14, "AUTOTUNE": 15, "POSHOLD": 16,
    "BRAKE": 17, "THROW": 18, "AVOID_ADSB": 19, "GUIDED_NOGPS": 20, "SMART_RTL": 21,
}
MODE_NAMES = {v: k for k, v in MODES.items()}
SUPPORTED_MODES = {"STABILIZE", "ALT_HOLD", "LOITER", "GUIDED", "AUTO", "RTL", "LAND", "BRAKE", "POSHOLD"}
NEEDS_POSITION = {"LOITER", "GUIDED", "AUTO", "RTL", "BRAKE", "POSHOLD"}
EARTH_R = 6378137.0
FORCE_MAGIC = 21196

A = mavlink  # short alias for constants
R_ACCEPTED, R_DENIED, R_UNSUPPORTED, R_FAILED = (
    A.MAV_RESULT_ACCEPTED, A.MAV_RESULT_TEMPORARILY_REJECTED, A.MAV_RESULT_UNSUPPORTED, A.MAV_RESULT_FAILED)


@dataclass
class MissionItem:
    """One stored mission item: positions in degrees, altitude in metres above home."""

    command: int
    lat: float
    lon: float
    alt: float
    params: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    frame: int = A.MAV_FRAME_GLOBAL_RELATIVE_ALT


NAV_COMMANDS = {A.MAV_CMD_NAV_WAYPOINT, A.MAV_CMD_NAV_TAKEOFF, A.MAV_CMD_NAV_LAND, A.MAV_CMD_NAV_RETURN_TO_LAUNCH}


class Copter:
    """Vehicle state. ``send(msg, link=None)`` broadcasts (link None) or replies on one link."""

    def __init__(self, params: Params, home: tuple[float, float, float, float], ready_delay: float,
                 send: Callable, request_reboot: Callable[[], None]):
        self.p = params
        self.send = send
        self.request_reboot = request_reboot
        self.home_lat, self.home_lon, self.home_alt, heading = home
        self.t = 0.0  # sim seconds since boot
        self.ready_at = ready_delay
        self.north = self.east = 0.0
        self.alt = 0.0  # metres above home
        self.vn = self.ve = self.vd = 0.0  # m/s, down positive
        self.heading = heading % 360
        self.mode = MODES["STABILIZE"]
        self.armed = False
        self.armed_at = 0.0
        self.landed_since: float | None = 0.0
        self.target: tuple[float, float, float] | None = None  # north, east, alt
        self.throttle = 1000  # RC channel 3 (override)
        self.throttle_until = 0.0
        self.consumed_mah = 0.0
        self.next_prearm = 30.0  # sim s: first periodic "PreArm:" text (as SITL, every 30 s)
        self.rtl_phase = ""
        self.was_ready = False
        self.mission: list[MissionItem] = []  # item 0 is home, as on ArduPilot
        self.mission_seq = 1
        self.auto_landing = False
        self.velocity: tuple[float, float, float] | None = None
        self.velocity_until = 0.0
        self.yaw_target: float | None = None
        self.guided_speed: float | None = None

    # ---- derived state --------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self.t >= self.ready_at

    @property
    def flying(self) -> bool:
        return self.armed and self.landed_since is None

    @property
    def lat(self) -> float:
        return self.home_lat + math.degrees(self.north / EARTH_R)

    @property
    def lon(self) -> float:
        return self.home_lon + math.degrees(self.east / (EARTH_R * math.cos(math.radians(self.home_lat))))

    def local(self, lat: float, lon: float) -> tuple[float, float]:
        n = math.radians(lat - self.home_lat) * EARTH_R
        e = math.radians(lon - self.home_lon) * EARTH_R * math.cos(math.radians(self.home_lat))
        return n, e

    def prearm_failure(self) -> str | None:
        if self.p.get("ARMING_CHECK") == 0:
            return None
        if not self.ready:
            return "Need Position Estimate" if self.t > 1 else "Gyros not calibrated"
        if self.p.get("BATT_MONITOR") and self.battery_remaining() < 10:
            return "Battery 1 low voltage failsafe"
        return None

    def battery_remaining(self) -> int:
        cap = max(1.0, self.p.get("BATT_CAPACITY", 3300))
        return max(0, int(round(100 * (1 - self.consumed_mah / cap))))

    def text(self, severity: int, text: str, link=None) -> None:
        self.send(mavlink.MAVLink_statustext_message(severity, text.encode()[:50]), link)

    # ---- physics ----------------------------------------------------------------

    def step(self, dt: float) -> None:
        self.t += dt
        if self.ready and not self.was_ready:
            self.was_ready = True
            self.text(A.MAV_SEVERITY_INFO, "EKF3 IMU0 is using GPS")
        if not self.armed and self.t >= self.next_prearm:
            self.next_prearm = self.t + 30
            why = self.prearm_failure()
            if why:
                self.text(A.MAV_SEVERITY_CRITICAL, f"PreArm: {why}")
        self.hold_position_after_velocity()
        self._fly(dt)
        self.consumed_mah += self.current() * dt / 3.6

    def _speeds(self) -> tuple[float, float, float]:
        return (self.p.get("WPNAV_SPEED", 1000) / 100, self.p.get("WPNAV_SPEED_UP", 250) / 100,
                max(0.1, self.p.get("WPNAV_SPEED_DN", 150) / 100))

    def _fly(self, dt: float) -> None:
        name = MODE_NAMES.get(self.mode, "")
        vh, vup, vdn = self._speeds()
        want_n = want_e = 0.0
        want_d = 0.0
        if not self.armed:
            self.vn = self.ve = self.vd = 0.0
            return
        if name == "GUIDED" and self.velocity is not None and self.t < self.velocity_until:
            want_n, want_e, want_d = self.velocity
            sp = math.hypot(want_n, want_e)
            if sp > vh:
                want_n, want_e = want_n / sp * vh, want_e / sp * vh
            want_d = max(-vup, min(vdn, want_d))
        elif name == "GUIDED" and self.target:
            tn, te, ta = self.target
            want_n, want_e = self._toward(tn - self.north, te - self.east, self.guided_speed or vh)
            want_d = self._vertical(ta - self.alt, vup, vdn)
        elif name in ("ALT_HOLD", "LOITER", "POSHOLD", "STABILIZE"):
            if self.throttle_until < self.t:
                self.throttle = 1500 if name != "STABILIZE" and self.flying else self.throttle
            stick = (self.throttle - 1500) / 500
            if name == "STABILIZE":
                want_d = -vup * max(0.0, (self.throttle - 1350) / 650) if self.throttle > 1350 else (vdn if self.throttle < 1300 else 0)
            elif abs(stick) > 0.1:
                want_d = -stick * (self.p.get("PILOT_SPEED_UP", 250) / 100) if stick > 0 else -stick * vdn
        elif name == "LAND":
            want_d = self._land_speed()
        elif name == "RTL":
            want_n, want_e, want_d = self._rtl(vh, vup, vdn)
        elif name == "AUTO":
            want_n, want_e, want_d = self._auto(vh, vup, vdn)
        # BRAKE, a finished mission, anything else: hold
        self.vn, self.ve, self.vd = want_n, want_e, want_d
        self.north += self.vn * dt
        self.east += self.ve * dt
        self.alt -= self.vd * dt
        if self.yaw_target is not None:
            self.heading = self.yaw_target
        elif self.vn or self.ve:
            self.heading = math.degrees(math.atan2(self.ve, self.vn)) % 360
        if self.alt <= 0.0:
            self.alt = 0.0
            self.vd = min(self.vd, 0.0)
            if self.vd == 0 and self.landed_since is None:
                self.landed_since = self.t
                self.vn = self.ve = 0.0
        elif self.alt > 0.3 and self.landed_since is not None:
            self.landed_since = None
        if self.landed_since is not None:
            self.vn = self.ve = 0.0
            idle = self.t - max(self.landed_since, self.armed_at)
            landing = name in ("LAND", "RTL") or (name == "AUTO" and self.auto_landing)
            delay = self.p.get("DISARM_DELAY", 10)
            if landing and idle > 1.0 or (delay > 0 and idle > delay):
                self.disarm("landed" if landing else "auto disarm")

    def _toward(self, dn: float, de: float, speed: float) -> tuple[float, float]:
        d = math.hypot(dn, de)
        if d < 0.05:
            return 0.0, 0.0
        v = min(speed, d * 2)  # slow down on arrival
        return dn / d * v, de / d * v

    @staticmethod
    def _vertical(dalt: float, vup: float, vdn: float) -> float:
        if abs(dalt) < 0.02:
            return 0.0
        return -min(vup, dalt * 2) if dalt > 0 else min(vdn, -dalt * 2)

    def _land_speed(self) -> float:
        low = self.p.get("LAND_ALT_LOW", 1000) / 100
        return max(0.1, self.p.get("LAND_SPEED", 50) / 100) if self.alt < low else self._speeds()[2]

    def _rtl(self, vh, vup, vdn) -> tuple[float, float, float]:
        rtl_alt = max(self.p.get("RTL_ALT", 1500) / 100, self.alt if self.rtl_phase != "climb" else 0)
        if self.rtl_phase == "climb":
            if self.alt < rtl_alt - 0.1:
                return 0.0, 0.0, -vup
            self.rtl_phase = "return"
        if self.rtl_phase == "return":
            vn, ve = self._toward(-self.north, -self.east, vh)
            if math.hypot(self.north, self.east) < 0.5:
                self.rtl_phase = "land"
            return vn, ve, 0.0
        return 0.0, 0.0, self._land_speed()

    def _auto(self, vh, vup, vdn) -> tuple[float, float, float]:
        """Fly the mission from ``mission_seq``: TAKEOFF, WAYPOINT, LAND, RETURN_TO_LAUNCH
        (other commands are passed over). At its end the vehicle holds."""
        radius = max(0.5, self.p.get("WPNAV_RADIUS", 200) / 100)
        while self.mission_seq < len(self.mission):
            it = self.mission[self.mission_seq]
            if it.command == A.MAV_CMD_NAV_TAKEOFF:
                if self.alt >= it.alt - 0.3:
                    self._reached()
                    continue
                return 0.0, 0.0, self._vertical(it.alt - self.alt, vup, vdn)
            if it.command in (A.MAV_CMD_NAV_WAYPOINT, A.MAV_CMD_NAV_LAND):
                # latitude and longitude 0 mean "where the vehicle is", as on ArduPilot
                n, e = (self.north, self.east) if it.lat == 0 and it.lon == 0 else self.local(it.lat, it.lon)
                dist = math.hypot(n - self.north, e - self.east)
                if it.command == A.MAV_CMD_NAV_LAND:
                    if dist > 0.5:
                        vn, ve = self._toward(n - self.north, e - self.east, self.guided_speed or vh)
                        return vn, ve, 0.0
                    self.auto_landing = True
                    return 0.0, 0.0, self._land_speed()
                if dist <= radius and abs(it.alt - self.alt) < 0.5:
                    self._reached()
                    continue
                vn, ve = self._toward(n - self.north, e - self.east, self.guided_speed or vh)
                return vn, ve, self._vertical(it.alt - self.alt, vup, vdn)
            if it.command == A.MAV_CMD_NAV_RETURN_TO_LAUNCH:
                self._reached()
                self.mode = MODES["RTL"]
                self.rtl_phase = "climb"
                return 0.0, 0.0, 0.0
            self.mission_seq += 1  # DO_/CONDITION_ commands: nothing to simulate
        return 0.0, 0.0, 0.0

    def _reached(self) -> None:
        self.send(mavlink.MAVLink_mission_item_reached_message(self.mission_seq))
        self.mission_seq += 1
        self.send(self.message("MISSION_CURRENT"))

    # ---- actions ----------------------------------------------------------------

    def arm(self, force: bool, link) -> int:
        if self.armed:
            return R_ACCEPTED
        why = None if force else self.prearm_failure()
        if why is None and not force and MODE_NAMES.get(self.mode) in NEEDS_POSITION and not self.ready:
            why = "Need Position Estimate"
        if why is None and not force and MODE_NAMES.get(self.mode) in ("RTL", "LAND", "AUTO", "BRAKE"):
            why = "Mode not armable"
        if why:
            self.text(A.MAV_SEVERITY_CRITICAL, f"Arm: {why}", link)
            return R_FAILED
        self.armed = True
        self.armed_at = self.t
        self.landed_since = self.t
        self.throttle = 1000
        self.target = None
        self.text(A.MAV_SEVERITY_INFO, "Arming motors")
        return R_ACCEPTED

    def disarm(self, why: str = "", force: bool = False, link=None) -> int:
        if not self.armed:
            return R_ACCEPTED
        if self.flying and not force:
            self.text(A.MAV_SEVERITY_CRITICAL, "Disarm: vehicle is flying (use force)", link)
            return R_FAILED
        self.armed = False
        self.target = None
        self.vn = self.ve = self.vd = 0.0
        if self.alt > 0:  # forced disarm in the air: it falls (simply: lands at once)
            self.alt = 0.0
        self.landed_since = self.t
        self.text(A.MAV_SEVERITY_INFO, "Disarming motors")
        return R_ACCEPTED

    def set_mode(self, custom: int, link) -> int:
        name = MODE_NAMES.get(custom)
        if name not in SUPPORTED_MODES:
            self.text(A.MAV_SEVERITY_WARNING, f"Mode change to {name or custom} failed: unsupported", link)
            return R_FAILED
        if name in NEEDS_POSITION and not self.ready:
            self.text(A.MAV_SEVERITY_WARNING, f"Mode change to {name} failed: requires position", link)
            return R_FAILED
        if name == "AUTO" and self.armed and self.landed_since is not None:
            first = self.mission[1] if len(self.mission) > 1 else None
            if first is None or first.command != A.MAV_CMD_NAV_TAKEOFF:
                self.text(A.MAV_SEVERITY_WARNING, "Auto: Missing Takeoff Cmd", link)
                return R_FAILED
        if custom != self.mode:
            self.mode = custom
            self.velocity = self.yaw_target = None
            self.auto_landing = False
            if name == "AUTO" and self.mission_seq >= len(self.mission):
                self.mission_seq = 1  # a finished mission starts over
            self.target = (self.north, self.east, self.alt) if name == "GUIDED" and self.flying else None
            self.rtl_phase = "climb" if name == "RTL" else ""
        return R_ACCEPTED

    def takeoff(self, alt: float, link) -> int:
        if MODE_NAMES.get(self.mode) != "GUIDED":
            self.text(A.MAV_SEVERITY_WARNING, "Takeoff: mode must be GUIDED", link)
            return R_FAILED
        if not self.armed:
            self.text(A.MAV_SEVERITY_WARNING, "Takeoff: vehicle not armed", link)
            return R_FAILED
        if self.flying:
            return R_FAILED
        if not alt > 0:
            return R_DENIED
        self.target = (self.north, self.east, float(alt))
        self.landed_since = None if alt > 0 else self.landed_since
        return R_ACCEPTED

    def goto(self, lat: float, lon: float, alt: float | None) -> bool:
        if MODE_NAMES.get(self.mode) != "GUIDED" or not self.flying:
            return False
        n, e = self.local(lat, lon)
        return self.goto_local(n, e, alt)

    def goto_local(self, north: float, east: float, alt: float | None) -> bool:
        """A position target in metres from home (NED, alt up)."""
        if MODE_NAMES.get(self.mode) != "GUIDED" or not self.flying:
            return False
        self.target = (north, east, self.alt if alt is None else alt)
        self.velocity = None
        return True

    def set_velocity(self, vn: float, ve: float, vd: float) -> bool:
        """A velocity target (m/s NED); like ArduCopter it stops after 3 s without a new one."""
        if MODE_NAMES.get(self.mode) != "GUIDED" or not self.flying:
            return False
        self.velocity = (vn, ve, vd)
        self.velocity_until = self.t + 3.0
        self.target = None
        return True

    def hold_position_after_velocity(self) -> None:
        if self.velocity is not None and self.t >= self.velocity_until:
            self.velocity = None
            self.target = (self.north, self.east, self.alt)

    def condition_yaw(self, angle: float, relative: bool, direction: int) -> int:
        if not self.armed:
            return R_FAILED
        base = self.heading if relative else 0.0
        self.yaw_target = (base + (angle if direction >= 0 else -angle)) % 360
        return R_ACCEPTED

    def change_speed(self, speed: float) -> int:
        if speed <= 0:
            return R_FAILED
        self.guided_speed = float(speed)
        return R_ACCEPTED

    def reboot(self, link) -> int:
        if self.armed:
            self.text(A.MAV_SEVERITY_WARNING, "Reboot refused: vehicle armed", link)
            return R_FAILED
        self.request_reboot()
        return R_ACCEPTED

    def rc_override(self, chan3: int) -> None:
        if 800 <= chan3 <= 2200:
            self.throttle = chan3
            self.throttle_until = self.t + 1.0  # overrides time out, as RC_OVERRIDE_TIME does
        if self.armed and self.landed_since is not None and self.throttle > 1350 and MODE_NAMES.get(self.mode) in ("STABILIZE", "ALT_HOLD", "LOITER", "POSHOLD"):
            self.landed_since = None

    # ---- telemetry --------------------------------------------------------------

    def base_mode(self) -> int:
        m = A.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED | A.MAV_MODE_FLAG_STABILIZE_ENABLED
        if MODE_NAMES.get(self.mode) in ("GUIDED", "AUTO", "RTL", "LOITER"):
            m |= A.MAV_MODE_FLAG_GUIDED_ENABLED
        if self.armed:
            m |= A.MAV_MODE_FLAG_SAFETY_ARMED
        return m

    def system_status(self) -> int:
        if self.t < 1.0:
            return A.MAV_STATE_BOOT
        return A.MAV_STATE_ACTIVE if self.armed else A.MAV_STATE_STANDBY

    def message(self, name: str):
        """The telemetry message ``name`` for the current state, or None."""
        ms = int(self.t * 1000) & 0xFFFFFFFF
        if name == "HEARTBEAT":
            return mavlink.MAVLink_heartbeat_message(
                A.MAV_TYPE_QUADROTOR, A.MAV_AUTOPILOT_ARDUPILOTMEGA, self.base_mode(), self.mode, self.system_status(), 3)
        if name == "SYS_STATUS":
            sensors = 0x0020FC3F
            health = sensors if self.ready else sensors & ~0x20  # GPS unhealthy until ready
            return mavlink.MAVLink_sys_status_message(
                sensors, sensors, health, 150, int(self.voltage() * 1000), int(self.current() * 100),
                self.battery_remaining(), 0, 0, 0, 0, 0, 0)
        if name == "GPS_RAW_INT":
            fix = 3 if self.ready else (1 if self.t < 0.5 * self.ready_at else 2)
            sats = 10 if self.ready else 4
            return mavlink.MAVLink_gps_raw_int_message(
                int(self.t * 1e6), fix, int(self.lat * 1e7), int(self.lon * 1e7), int((self.home_alt + self.alt) * 1000),
                121, 200, int(math.hypot(self.vn, self.ve) * 100), int(self.heading * 100) % 36000, sats)
        if name == "GLOBAL_POSITION_INT":
            return mavlink.MAVLink_global_position_int_message(
                ms, int(self.lat * 1e7), int(self.lon * 1e7), int((self.home_alt + self.alt) * 1000), int(self.alt * 1000),
                int(self.vn * 100), int(self.ve * 100), int(self.vd * 100), int(self.heading * 100) % 36000)
        if name == "MISSION_CURRENT":
            total = max(0, len(self.mission) - 1)
            return mavlink.MAVLink_mission_current_message(min(self.mission_seq, len(self.mission)), total)
        if name == "LOCAL_POSITION_NED":
            return mavlink.MAVLink_local_position_ned_message(ms, self.north, self.east, -self.alt, self.vn, self.ve, self.vd)
        if name == "ATTITUDE":
            return mavlink.MAVLink_attitude_message(ms, 0.0, 0.0, math.radians(self.heading if self.heading <= 180 else self.heading - 360), 0, 0, 0)
        if name == "VFR_HUD":
            thr = 0 if not self.armed else (39 if self.flying else 10)
            return mavlink.MAVLink_vfr_hud_message(
                math.hypot(self.vn, self.ve), math.hypot(self.vn, self.ve), int(self.heading) % 360, thr,
                self.home_alt + self.alt, -self.vd)
        if name == "HOME_POSITION":
            if not self.ready:
                return None
            return mavlink.MAVLink_home_position_message(
                int(self.home_lat * 1e7), int(self.home_lon * 1e7), int(self.home_alt * 1000), 0, 0, 0, [1, 0, 0, 0], 0, 0, 0)
        if name == "BATTERY_STATUS":
            return mavlink.MAVLink_battery_status_message(
                0, 0, 0, 32767, [int(self.voltage() * 1000)] + [65535] * 9, int(self.current() * 100),
                int(self.consumed_mah), -1, self.battery_remaining())
        if name == "SYSTEM_TIME":
            return mavlink.MAVLink_system_time_message(int(time.time() * 1e6), ms)
        if name == "SIMSTATE":
            return mavlink.MAVLink_simstate_message(0, 0, math.radians(self.heading), 0, 0, -9.81, 0, 0, 0,
                                                    int(self.lat * 1e7), int(self.lon * 1e7))
        return None

    def voltage(self) -> float:
        return self.p.get("SIM_BATT_VOLTAGE", 12.6) * (0.85 + 0.15 * self.battery_remaining() / 100)

    def current(self) -> float:
        return 0.3 + (15.0 if self.flying else (2.0 if self.armed else 0.0))
