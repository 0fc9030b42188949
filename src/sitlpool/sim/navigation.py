"""How the vehicle flies to a point: speed and acceleration limits from its own parameters
(WPNAV_*, LAND_*, RTL_*), braking to stop on a target, LAND's descent, RTL's phases."""

from __future__ import annotations

import math

from .sensors import Sensors


class Navigation(Sensors):
    def _limits(self) -> tuple[float, float, float, float, float]:
        """Horizontal speed and accel, climb and descent speed, vertical accel (m/s, m/s²)."""
        g = self.p.get
        vh = self.guided_speed or g("WPNAV_SPEED", 1000) / 100
        return (
            max(0.2, vh),
            max(0.5, g("WPNAV_ACCEL", 250) / 100),
            max(0.1, g("WPNAV_SPEED_UP", 250) / 100),
            max(0.1, g("WPNAV_SPEED_DN", 150) / 100),
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

    def _rtl(self, vh, ah, vup, vdn, az) -> tuple[float, float, float]:
        """ArduCopter's RTL: climb to RTL_ALT, return at RTL_SPEED, loiter RTL_LOIT_TIME, land."""
        rtl_alt = max(self.p.get("RTL_ALT", 1500) / 100 + self.home_up, self.alt)
        speed = self.p.get("RTL_SPEED", 0) / 100 or vh
        if self.rtl_phase == "climb":
            self.rtl_alt = rtl_alt
            self.rtl_phase = "return"
        if self.rtl_phase == "return":
            want = self._toward(self.home_n, self.home_e, self.rtl_alt, speed, ah, vup, vdn, az)
            if (
                math.hypot(self.north - self.home_n, self.east - self.home_e) < 0.5
                and abs(self.alt - self.rtl_alt) < 0.3
            ):
                self.rtl_phase = "loiter"
                self.rtl_loiter_until = self.t + self.p.get("RTL_LOIT_TIME", 5000) / 1000
            return want
        if self.rtl_phase == "loiter":
            if self.t >= self.rtl_loiter_until:
                self.rtl_phase = "land"
            return self._toward(self.home_n, self.home_e, self.alt, speed, ah, vup, vdn, az)
        return 0.0, 0.0, self._land_speed()
