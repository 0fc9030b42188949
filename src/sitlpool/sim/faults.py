"""Faults injected through ArduPilot's ``SIM_*`` parameters, as ArduCopter 4.7 SITL reacts to them
(measured: ../shared/ardupilot/FAILSAFES.md, bench/measure_real_world/README.md); times are sim
seconds after the parameter changed.

- ``SIM_GPS1_ENABLE=0``: no fix at +0.5 s, the EKF loses its horizontal position at +7.3 s
  (position modes are refused, the EKF failsafe follows: ``failsafes.py``), "EKF3 IMU0/1 stopped
  aiding" and constant-position mode at +15.2 s. ``SIM_GPS1_JAM=1``: the fix flaps, "GPS Glitch
  or Compass error" and the glitch flag at +4.7 s, the position lost at +6.1 s. GPS back: the EKF
  uses it again 5 s later ("EKF3 IMU0/1 is using GPS").
- ``SIM_GPS1_GLTCH_X/Y`` (degrees of latitude/longitude): the GPS moves at once; "GPS Glitch or
  Compass error" and EKF flag GPS_GLITCH at +1.2 s; the EKF resets its position to the GPS at
  +10 s (the vehicle does not move: its reported position jumps); "Glitch cleared" at +20 s.
- ``SIM_MAG1_FAIL=1``: MAG unhealthy at +0.6 s, "EKF3 IMU0/1 switching to compass 1" at +10 s
  (unless compass 2 failed too). ``SIM_BARO_DISABLE=1``: BARO unhealthy at +0.2 s. With the
  second one off too (``SIM_BAR2_DISABLE=1``, or ``SIM_BARO_COUNT`` 1): at +10.1 s the EKF
  loses its vertical position (EKF_STATUS_REPORT POS_VERT_ABS off) and the copter climbs away
  at 5 m/s in GUIDED and LOITER (measured in GUIDED to 249 m in 60 s; no failsafe, no mode
  change); "SmartRTL deactivated: bad position" at +25.2 s. Real SITL keeps the reported
  relative altitude frozen meanwhile (the built-in vehicle reports the climb).
- ``SIM_ENGINE_FAIL`` (motor bitmask) with ``SIM_ENGINE_MUL`` (its thrust multiplier): 0 flips
  and falls (ground at +1.7 s from 10 m), 0.5 spins at -46°/s and descends (~6.6 m/s, ground at
  +3.4 s from 10 m) with "Potential Thrust Loss (1)" at +2.8 s, 0.75 holds (a 12° tilt). On the
  ground it stays armed in its mode: no crash check, no disarm (as measured).
"""

from __future__ import annotations

import math

from .actions import Actions
from .rules import ERR, A
from .world import MOTOR_TIP, engine_failure, failure_effect

M_PER_DEG = 111319.5
BARO_LOST_S = 10.1  # both barometers off: the EKF loses its vertical position this long after
BARO_LOST_CLIMB = 5.0  # m/s: ... and the copter climbs away (measured: 5.0 m/s, 249 m after 60 s)
GLITCH_FLAG = A.EKF_GPS_GLITCHING
LOST_AIDING = A.EKF_VELOCITY_HORIZ | A.EKF_CONST_POS_MODE


class Faults(Actions):
    def since(self, key: str, cond: bool) -> float | None:
        """Sim seconds ``cond`` has held (None when it does not), timed in ``self.fs[key]``."""
        if not cond:
            self.fs.pop(key, None)
            return None
        return self.t - self.fs.setdefault(key, self.t)

    def once(self, key: str) -> bool:
        """True the first time ``key`` is asked since it was ``forget``-ed."""
        if key in self.fs:
            return False
        self.fs[key] = self.t
        return True

    def forget(self, *keys: str) -> None:
        for k in keys:
            self.fs.pop(k, None)

    def faults_step(self, dt: float) -> int:
        """Advance the wind and the faults; returns the SYS_STATUS health bits they clear."""
        self.wind.update(self.p, max(0.0, self.alt), dt)
        lost = self._gps() if self.gps_detected else 0
        lost |= self._glitch()
        lost |= self._compass_baro()
        self._motor()
        return lost

    def _gps(self) -> int:
        g = self.p.get
        off = self.since("gps_off", not g("SIM_GPS1_ENABLE", 1))
        jam = self.since("gps_jam", bool(g("SIM_GPS1_JAM", 0)))
        pos_lost_at = 7.3 if off is not None else 6.1
        el = off if off is not None else jam
        if el is None:
            self.gps_fix = 6
            back = self.since("gps_back", not self.ekf_pos_ok)
            if back is not None and back >= 5.0:
                self.ekf_pos_ok = True
                self.ekf_extra &= ~(LOST_AIDING | GLITCH_FLAG)
                self.forget("gps_back", "said_aiding", "said_jam")
                for imu in (0, 1):
                    self.text(A.MAV_SEVERITY_INFO, f"EKF3 IMU{imu} is using GPS")
            return 0
        self.forget("gps_back")
        if off is not None:
            self.gps_fix = 0 if off >= 0.5 else 6
        else:
            self.gps_fix = 1 if int(el * 2.7) % 3 != 2 else 6  # jammed: the fix flaps
            if el >= 4.7 and self.once("said_jam"):
                self.ekf_extra |= GLITCH_FLAG
                self.text(A.MAV_SEVERITY_CRITICAL, "GPS Glitch or Compass error")
                self.error(ERR["GPS"], ERR["GPS_GLITCH"])
        if el >= pos_lost_at:
            self.ekf_pos_ok = False
        if el >= 15.2 and self.once("said_aiding"):
            self.ekf_extra |= LOST_AIDING
            for imu in (0, 1):
                self.text(A.MAV_SEVERITY_WARNING, f"EKF3 IMU{imu} stopped aiding")
        return 0

    def _glitch(self) -> int:
        g = self.p.get
        self.gps_dn = g("SIM_GPS1_GLTCH_X", 0.0) * M_PER_DEG
        self.gps_de = g("SIM_GPS1_GLTCH_Y", 0.0) * M_PER_DEG * math.cos(math.radians(self.origin_lat))
        moved = math.hypot(self.gps_dn - self.est_dn, self.gps_de - self.est_de) > 1.0
        if moved and self.position_ok and "glitch" not in self.fs:
            self.fs["glitch"] = self.t
        if "glitch" not in self.fs:
            return 0
        el = self.t - self.fs["glitch"]
        if el >= 1.2 and self.once("said_glitch"):
            self.ekf_extra |= GLITCH_FLAG
            self.text(A.MAV_SEVERITY_CRITICAL, "GPS Glitch or Compass error")
            self.error(ERR["GPS"], ERR["GPS_GLITCH"])
        if el >= 10.0:
            self.est_dn, self.est_de = self.gps_dn, self.gps_de  # the EKF resets to the GPS
        if el >= 20.0:
            self.ekf_extra &= ~GLITCH_FLAG
            self.forget("glitch", "said_glitch")
            self.text(A.MAV_SEVERITY_CRITICAL, "Glitch cleared")
            self.error(ERR["GPS"], ERR["RESOLVED"])
        return 0

    def _compass_baro(self) -> int:
        g = self.p.get
        lost = 0
        mag1 = self.since("mag1", bool(g("SIM_MAG1_FAIL", 0)))
        if mag1 is not None and mag1 >= 0.6:
            lost |= A.MAV_SYS_STATUS_SENSOR_3D_MAG
        if mag1 is not None and mag1 >= 10.0 and not g("SIM_MAG2_FAIL", 0) and self.once("said_mag"):
            for imu in (0, 1):
                self.text(A.MAV_SEVERITY_INFO, f"EKF3 IMU{imu} switching to compass 1")
        if mag1 is None:
            self.forget("said_mag")
        baro = self.since("baro1", bool(g("SIM_BARO_DISABLE", 0)))
        if baro is not None and baro >= 0.2:
            lost |= A.MAV_SYS_STATUS_SENSOR_ABSOLUTE_PRESSURE
        both = baro is not None and (bool(g("SIM_BAR2_DISABLE", 0)) or g("SIM_BARO_COUNT", 2) < 2)
        none_left = self.since("baro_all", both)
        self.baro_lost = none_left is not None and none_left >= BARO_LOST_S
        if none_left is None:
            self.frozen_rel_alt = None
        elif self.frozen_rel_alt is None:
            self.frozen_rel_alt = self.rel_alt  # what real SITL keeps reporting (telemetry.py)
        if none_left is not None and none_left >= 25.2 and self.once("said_baro_pos"):
            self.text(A.MAV_SEVERITY_WARNING, "SmartRTL deactivated: bad position")
        elif none_left is None:
            self.forget("said_baro_pos")
        return lost

    def _motor(self) -> None:
        """A failed motor's attitude, spin and thrust-loss texts (its fall: ``motor_fall``)."""
        f = engine_failure(self.p) if self.armed else None
        el = self.since("motor", f is not None)
        if f is None or el is None:
            self.yaw_rate = 0.0
            self.fault_tilt = (0.0, 0.0)
            if self.motor_down and self.landed_since is not None:  # its motor back: it climbs again
                self.landed_since = self.lift_at = self.t
            self.motor_down = False
            self.forget("said_thrust")
            return
        motor, mul = f
        _, _, tilt, yaw_rate = failure_effect(mul)
        blamed = motor if mul > 0.3 else (2 if motor == 1 else 1)  # as ArduCopter's thrust-loss check names it
        if (0.3 < mul < 0.7 and el >= 2.8 or mul <= 0.3 and el >= 6.5) and self.once("said_thrust"):
            self.text(A.MAV_SEVERITY_EMERGENCY, f"Potential Thrust Loss ({blamed})")
            self.error(ERR["THRUST_LOSS_CHECK"], ERR["OCCURRED"])
        if self.landed_since is not None:
            self.yaw_rate = 0.0
            self.fault_tilt = (0.0, 0.0)
            return
        ramp = min(1.0, el / 0.5)
        if mul >= 0.7:  # it holds: the tilt and spin are a transient the controllers take out
            ramp *= max(0.0, 1 - max(0.0, el - 0.5) / 2.0)
        sr, sp, sy = MOTOR_TIP.get(motor, (1, 0, -1))
        self.fault_tilt = (sr * tilt * ramp, sp * tilt * ramp)
        self.yaw_rate = abs(yaw_rate) * sy * ramp

    def motor_fall(self) -> tuple[float, float] | None:
        """(terminal descent m/s, time constant s) while a failed motor brings the vehicle down."""
        f = engine_failure(self.p) if self.armed else None
        if f is None:
            return None
        term, tau, _, _ = failure_effect(f[1])
        return (term, tau) if term > 0 else None
