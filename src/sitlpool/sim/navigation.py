"""How the vehicle flies to a point: speed and acceleration limits from its own parameters
(WPNAV_*, LAND_*, RTL_*), braking to stop on a target, LAND's descent, RTL's phases and where
RTL goes (home, or the nearest rally point as AP_Rally chooses it)."""

from __future__ import annotations

import math
from collections.abc import Callable

from .rules import MODE_NAMES
from .sensors import Sensors
from .state import MissionItem

RTL_ALT_MIN = 2.0  # m: ModeRTL's RTL_ALT_MIN (200 cm)
RTL_MIN_CONE_SLOPE = 0.5


class Navigation(Sensors):
    # the stored rally points (set by the mission protocol, mission_protocol.py)
    rally_items: Callable[[], list[MissionItem]]
    speed_up_override: float | None = None  # DO_CHANGE_SPEED's climb / descent speeds in AUTO (m/s)
    speed_dn_override: float | None = None
    rtl_dest: tuple[float, float] | None = None  # where RTL goes (north, east), set when it starts

    def _limits(self) -> tuple[float, float, float, float, float]:
        """Horizontal speed and accel, climb and descent speed, vertical accel (m/s, m/s²)."""
        g = self.p.get
        vh = self.guided_speed or g("WPNAV_SPEED", 1000) / 100
        auto = MODE_NAMES.get(self.mode) == "AUTO"
        up = (auto and self.speed_up_override) or g("WPNAV_SPEED_UP", 250) / 100
        dn = (auto and self.speed_dn_override) or g("WPNAV_SPEED_DN", 150) / 100
        return (
            max(0.2, vh),
            max(0.5, g("WPNAV_ACCEL", 250) / 100),
            max(0.1, up),
            max(0.1, dn),
            max(0.3, g("WPNAV_ACCEL_Z", 100) / 100),
        )

    def _toward(self, tn: float, te: float, ta: float, vh, ah, vup, vdn, az) -> tuple[float, float, float]:
        """Desired velocity to a point: cruise, then brake so as to stop on it (accel-limited),
        along a straight line in 3D (the horizontal speed waits for the climb or descent)."""
        dn, de = tn - self.north, te - self.east
        d = math.hypot(dn, de)
        dz = ta - self.alt
        if abs(dz) > 0.5 and d > 0.5:
            vh = min(vh, d * (vup if dz > 0 else vdn) / abs(dz))
        v = min(vh, math.sqrt(2 * ah * d * 0.9), d * 2) if d > 0.02 else 0.0
        wn, we = (dn / d * v, de / d * v) if d > 0.02 else (0.0, 0.0)
        vz = min(vup if dz > 0 else vdn, math.sqrt(2 * az * abs(dz) * 0.9), abs(dz) * 2) if abs(dz) > 0.01 else 0.0
        return wn, we, -vz if dz > 0 else vz

    def _land_speed(self) -> float:
        low = self.p.get("LAND_ALT_LOW", 1000) / 100
        if self.alt < low:
            return max(0.1, self.p.get("LAND_SPEED", 50) / 100)
        return max(0.1, (self.p.get("LAND_SPEED_HIGH", 0) or self.p.get("WPNAV_SPEED_DN", 150)) / 100)

    def rtl_target(self) -> tuple[float, float, float]:
        """Where RTL returns and at what altitude (north, east, metres above the origin), as
        ArduCopter's ModeRTL::compute_return_target: the nearest rally point when AP_Rally picks
        it (RALLY_LIMIT_KM, RALLY_INCL_HOME), else home; the altitude the highest of the rally
        point's, RTL_ALT and the current altitude plus RTL_CLIMB_MIN, capped by the
        RTL_CONE_SLOPE, never below the current altitude."""
        g = self.p.get
        dn, de, dalt = self.home_n, self.home_e, 0.0  # return altitude above home
        best: tuple[float, float, float, float] | None = None
        smart = MODE_NAMES.get(self.mode) == "SMART_RTL"  # SmartRTL retraces its path home: no rally points
        for r in [] if smart else getattr(self, "rally_items", list)():
            n, e = self.local(r.lat, r.lon)
            d = math.hypot(n - self.north, e - self.east)
            if best is None or d < best[0]:
                best = (d, n, e, self.alt_from(r.frame, r.alt) - self.home_up)
        limit = g("RALLY_LIMIT_KM", 0.3) * 1000
        if best is not None and not (limit > 0 and best[0] > limit):
            home_d = math.hypot(self.home_n - self.north, self.home_e - self.east)
            if not g("RALLY_INCL_HOME", 1) or best[0] < home_d:
                _, dn, de, dalt = best
        cur = self.alt - self.home_up
        min_alt = max(RTL_ALT_MIN, cur + max(0.0, g("RTL_CLIMB_MIN", 0) / 100))
        target = max(max(dalt, 0.0), g("RTL_ALT", 1500) / 100, min_alt)
        slope = g("RTL_CONE_SLOPE", 3)
        if slope >= RTL_MIN_CONE_SLOPE:
            dist = math.hypot(dn - self.north, de - self.east)
            target = min(target, max(dist * slope, min_alt))
        return dn, de, max(target, cur) + self.home_up

    def _rtl(self, vh, ah, vup, vdn, az) -> tuple[float, float, float]:
        """ArduCopter's RTL: climb to the return altitude, return at RTL_SPEED to home or the
        nearest rally point, loiter RTL_LOIT_TIME, land there."""
        speed = self.p.get("RTL_SPEED", 0) / 100 or vh
        if self.rtl_phase == "climb" or self.rtl_dest is None:
            n, e, self.rtl_alt = self.rtl_target()
            self.rtl_dest = (n, e)
            self.rtl_phase = "return" if self.rtl_phase == "climb" else self.rtl_phase
        dn, de = self.rtl_dest
        if self.rtl_phase == "return":
            want = self._toward(dn, de, self.rtl_alt, speed, ah, vup, vdn, az)
            if math.hypot(self.north - dn, self.east - de) < 0.5 and abs(self.alt - self.rtl_alt) < 0.3:
                self.rtl_phase = "loiter"
                self.rtl_loiter_until = self.t + self.p.get("RTL_LOIT_TIME", 5000) / 1000
            return want
        if self.rtl_phase == "loiter":
            if self.t >= self.rtl_loiter_until:
                self.rtl_phase = "land"
            return self._toward(dn, de, self.alt, speed, ah, vup, vdn, az)
        return 0.0, 0.0, self._land_speed()
