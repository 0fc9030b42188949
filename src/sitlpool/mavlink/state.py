"""What a vehicle said last, as one link keeps it: ``VehicleState``."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from pymavlink.dialects.v20 import ardupilotmega as mavlink

from .modes import mode_name

A = mavlink
# EKF_STATUS_REPORT: what ArduPilot's autotest (wait_ready_to_arm) requires before flying on GPS
EKF_NEEDED = (
    A.EKF_ATTITUDE
    | A.EKF_VELOCITY_HORIZ
    | A.EKF_VELOCITY_VERT
    | A.EKF_POS_HORIZ_REL
    | A.EKF_POS_HORIZ_ABS
    | A.EKF_POS_VERT_ABS
    | A.EKF_PRED_POS_HORIZ_REL
    | A.EKF_PRED_POS_HORIZ_ABS
)
EKF_BAD = A.EKF_CONST_POS_MODE | A.EKF_UNINITIALIZED | A.EKF_GPS_GLITCHING
BOOTING = (A.MAV_STATE_UNINIT, A.MAV_STATE_BOOT)


@dataclass
class VehicleState:
    """The latest of what the vehicle said. Times are ``time.monotonic()``."""

    sysid: int | None = None
    vehicle_type: int | None = None
    custom_mode: int | None = None
    mode: str | None = None
    armed: bool = False
    system_status: int | None = None
    lat: float | None = None
    lon: float | None = None
    alt_amsl: float | None = None
    rel_alt: float | None = None
    vn: float = 0.0
    ve: float = 0.0
    vd: float = 0.0
    groundspeed: float = 0.0
    climb: float = 0.0
    heading: float | None = None
    battery_remaining: int | None = None
    voltage: float | None = None
    gps_fix: int | None = None
    gps_sats: int | None = None
    home: tuple[float, float, float] | None = None
    is_simulator: bool = False
    prearm_ok: bool | None = None  # SYS_STATUS pre-arm bit; None: the vehicle does not report it
    ekf_flags: int | None = None  # EKF_STATUS_REPORT flags; None: never reported
    ekf_ok_since: float | None = None  # when the EKF last became good enough to fly on GPS
    mode_since: float | None = None  # when the current mode was entered (as seen in HEARTBEATs)
    last_heartbeat: float | None = None
    first_heartbeat: float | None = None
    texts: deque = field(default_factory=lambda: deque(maxlen=50))  # (unix time, severity, text)

    @property
    def booting(self) -> bool:
        """Still starting: a mode set now is lost when it finishes (ArduPilot sets its initial mode)."""
        # Copter says BOOT; Plane says CALIBRATING in its INITIALISING mode
        return self.last_heartbeat is None or self.system_status in BOOTING or self.mode == "INITIALISING"

    @property
    def ekf_ok(self) -> bool | None:
        if self.ekf_flags is None:
            return None
        return self.ekf_flags & EKF_NEEDED == EKF_NEEDED and not self.ekf_flags & EKF_BAD

    def heartbeat_age(self) -> float | None:
        return None if self.last_heartbeat is None else time.monotonic() - self.last_heartbeat

    def as_dict(self) -> dict:
        return {
            "mode": self.mode,
            "armed": self.armed,
            "system_status": mavlink.enums["MAV_STATE"][self.system_status].name.replace("MAV_STATE_", "")
            if self.system_status is not None and self.system_status in mavlink.enums["MAV_STATE"]
            else None,
            "lat": self.lat,
            "lon": self.lon,
            "alt_amsl_m": self.alt_amsl,
            "relative_alt_m": self.rel_alt,
            "groundspeed_m_s": round(self.groundspeed, 2),
            "climb_m_s": round(self.climb, 2),
            "velocity_ned_m_s": [round(self.vn, 2), round(self.ve, 2), round(self.vd, 2)],
            "heading_deg": self.heading,
            "battery_remaining_pct": self.battery_remaining,
            "battery_voltage_v": self.voltage,
            "gps_fix_type": self.gps_fix,
            "gps_satellites": self.gps_sats,
            "home": None
            if self.home is None
            else {"lat": self.home[0], "lon": self.home[1], "alt_amsl_m": self.home[2]},
            "heartbeat_age_s": None if (age := self.heartbeat_age()) is None else round(age, 3),
            "is_simulator": self.is_simulator,
            "prearm_check_ok": self.prearm_ok,
            "ekf_flags": self.ekf_flags,
            "recent_texts": [t for _, _, t in list(self.texts)[-10:]],
        }

    def update(self, m) -> bool:
        """Take in one message of the vehicle's; True when it is the vehicle's HEARTBEAT."""
        t = m.get_type()
        v = self
        if t == "HEARTBEAT":
            if m.type == A.MAV_TYPE_GCS or m.autopilot == A.MAV_AUTOPILOT_INVALID:
                return False  # another GCS's, routed to us
            first = v.last_heartbeat is None
            v.sysid = m.get_srcSystem()
            v.vehicle_type = m.type
            v.custom_mode = m.custom_mode
            mode = mode_name(m.type, m.custom_mode)
            if mode != v.mode:
                v.mode_since = time.monotonic()
            v.mode = mode
            v.armed = bool(m.base_mode & A.MAV_MODE_FLAG_SAFETY_ARMED)
            v.system_status = m.system_status
            v.last_heartbeat = time.monotonic()
            if first:
                v.first_heartbeat = v.last_heartbeat
            return True
        elif t == "GLOBAL_POSITION_INT":
            v.lat, v.lon = m.lat / 1e7, m.lon / 1e7
            v.alt_amsl, v.rel_alt = m.alt / 1000, m.relative_alt / 1000
            v.vn, v.ve, v.vd = m.vx / 100, m.vy / 100, m.vz / 100
            if m.hdg != 65535:
                v.heading = m.hdg / 100
        elif t == "VFR_HUD":
            v.groundspeed, v.climb = m.groundspeed, m.climb
        elif t == "SYS_STATUS":
            v.voltage = m.voltage_battery / 1000 if m.voltage_battery != 65535 else None
            v.battery_remaining = m.battery_remaining if m.battery_remaining >= 0 else None
            if m.onboard_control_sensors_present & A.MAV_SYS_STATUS_PREARM_CHECK:
                v.prearm_ok = bool(m.onboard_control_sensors_health & A.MAV_SYS_STATUS_PREARM_CHECK)
        elif t == "EKF_STATUS_REPORT":
            was = v.ekf_ok
            v.ekf_flags = m.flags
            if v.ekf_ok and not was:
                v.ekf_ok_since = time.monotonic()
        elif t == "BATTERY_STATUS":
            if m.battery_remaining >= 0:
                v.battery_remaining = m.battery_remaining
        elif t == "GPS_RAW_INT":
            v.gps_fix, v.gps_sats = m.fix_type, m.satellites_visible
        elif t == "HOME_POSITION":
            v.home = (m.latitude / 1e7, m.longitude / 1e7, m.altitude / 1000)
        elif t == "SIMSTATE":
            v.is_simulator = True
        elif t == "STATUSTEXT":
            v.texts.append((time.time(), m.severity, m.text))
        return False
