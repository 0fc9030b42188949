"""ArduCopter 4.7's failsafes on the built-in vehicle, with its parameters, texts, mode changes and
SYS_STATUS bits, at the sim times measured on the real binary (../shared/ardupilot/FAILSAFES.md):

- battery: below ``BATT_LOW_VOLT`` (``BATT_CRT_VOLT``) for ``BATT_LOW_TIMER`` s while armed:
  "Battery 1 is low|critical 10.50V used N mAh", "Battery Failsafe", ``BATT_FS_LOW_ACT``
  (``BATT_FS_CRT_ACT``); BATTERY unhealthy. ``SIM_BATT_VOLTAGE`` is the voltage.
- radio (``FS_THR_ENABLE``): ``SIM_RC_FAIL=1`` (no pulses) for ``RC_FS_TIMEOUT`` s, RC overrides
  counting as input; ``SIM_RC_FAIL=2`` (throttle 950 < ``FS_THR_VALUE``) at once, and latched:
  real SITL keeps the neutral sticks and throttle 950 after ``SIM_RC_FAIL=0`` until it reboots
  (an RC override clears it while it lasts): "Radio Failsafe", RC_RECEIVER unhealthy; "Radio
  Failsafe Cleared" when the RC comes back.
- GCS (``FS_GCS_ENABLE``): no HEARTBEAT from ``MAV_GCS_SYSID`` for ``FS_GCS_TIMEOUT`` s while
  armed: "GCS Failsafe" (``FS_OPTIONS`` bit 4: pilot modes carry on); "GCS Failsafe Cleared".
- EKF (``FS_EKF_ACTION``, ``FS_EKF_THRESH``): 0.7 s after the EKF lost its position: "EKF
  variance", "EKF Failsafe: changed to LAND Mode"; "EKF Failsafe Cleared" when it is back.
- fence (``FENCE_ENABLE``, ``FENCE_TYPE`` bits 1 max altitude / 2 circle / 4 polygons and
  circles uploaded as the mission protocol's fence list (not measured), ``FENCE_ALT_MAX``,
  ``FENCE_RADIUS``, ``FENCE_MARGIN``, ``FENCE_ACTION``): "Max Alt|Circle fence breached",
  "Manual recovery started", GEOFENCE unhealthy; "Fence breach cleared" once back inside by the
  margin. ``FENCE_ACTION`` 0 (report only) reports the breach again each time the vehicle is
  ``FENCE_BACKUP_M`` (20 m) further out than the last report (AC_Fence's backup fences: at 10 m/s
  "Circle fence breached" every 2 s, measured); an action ignores new breaches for 10 s (manual
  recovery). 2 (LAND): LAND at the breach, as measured. A GUIDED destination outside the circle,
  above ``FENCE_ALT_MAX`` or outside the uploaded zones is ignored (``Actions.fence_allows``).
- fence avoidance (AC_Avoid, ``AVOID_ENABLE`` bit 1, on by default): in GUIDED velocity control
  (and LOITER, POSHOLD) the speed toward the circle is limited to AC_Avoid's sqrt controller of
  the room left to ``FENCE_RADIUS`` - ``FENCE_MARGIN`` (``PSC_POSXY_P``, 1 m/s²), and in ALT_HOLD,
  LOITER, POSHOLD and GUIDED the climb to that of the room below ``FENCE_ALT_MAX`` -
  ``FENCE_MARGIN`` (``PSC_POSZ_P``, ``PILOT_ACCEL_Z``): the copter stops 2 m inside and never
  breaches (measured at 3 and 10 m/s, and climbing at 2.5 m/s in ALT_HOLD: stops at 58.0-58.2 m
  of a 60 m circle, at 28.0 m under a 30 m ceiling). ``Failsafes.avoid``.
- crash check (``FS_CRASH_CHECK``): real ArduCopter did not fire it in any measured case (a
  failed motor tumbling down, from 10 and 50 m): the built-in vehicle has no case that fires it.

A failsafe changes the mode only when armed; on the ground it disarms instead, as ArduCopter.
Each logs an ERR (``on_error``) and its mode change carries the failsafe's reason (``on_mode``).
"""

from __future__ import annotations

import math

from .faults import Faults
from .fence import breached, limit, stop_speed
from .rules import ERR, MODE_NAMES, MODES, NEEDS_POSITION, A

RTL_CHAIN = ("RTL", "LAND")
SMART_RTL_CHAIN = ("SMART_RTL", "RTL", "LAND")
# each failsafe's action parameter -> the modes it tries in order ("continue": stay in AUTO)
BATT_ACTIONS = {
    1: ("LAND",),
    2: RTL_CHAIN,
    3: SMART_RTL_CHAIN,
    4: ("SMART_RTL", "LAND"),
    5: ("TERMINATE",),
    6: RTL_CHAIN,
    7: ("BRAKE", "LAND"),
}
THR_ACTIONS = {
    1: RTL_CHAIN,
    2: ("continue", *RTL_CHAIN),
    3: ("LAND",),
    4: SMART_RTL_CHAIN,
    5: ("SMART_RTL", "LAND"),
    6: RTL_CHAIN,
    7: ("BRAKE", "LAND"),
}
GCS_ACTIONS = {
    1: RTL_CHAIN,
    2: ("continue", *RTL_CHAIN),
    3: SMART_RTL_CHAIN,
    4: ("SMART_RTL", "LAND"),
    5: ("LAND",),
    6: RTL_CHAIN,
    7: ("BRAKE", "LAND"),
}
FENCE_ACTIONS = {1: RTL_CHAIN, 2: ("LAND",), 3: SMART_RTL_CHAIN, 4: ("BRAKE", "LAND"), 5: ("SMART_RTL", "LAND")}
PILOT_MODES = {"STABILIZE", "ACRO", "ALT_HOLD", "DRIFT", "SPORT", "POSHOLD", "FLIP", "AUTOTUNE"}
POSITION_MODES = NEEDS_POSITION | {"LAND"}
AVOID_XY = {"GUIDED", "LOITER", "POSHOLD"}  # AC_Avoid limits these modes' horizontal velocity
AVOID_Z = {"GUIDED", "LOITER", "POSHOLD", "ALT_HOLD"}  # ... and their climb rate
AVOID_ACCEL_XY = 1.0  # m/s², AC_AVOID_ACCEL_CMSS_MAX (fitted: 3 and 10 m/s stops, bench/measure_real_world)
FENCE_TEXTS = {1: "Max Alt fence breached", 2: "Circle fence breached", 4: "Polygon fence breached"}
FENCE_BACKUP_M = 20.0  # AC_Fence's backup fence: a breach this much further out is reported again
MANUAL_RECOVERY_S = 10.0  # AC_FENCE_MANUAL_RECOVERY_TIME_MIN: new breaches ignored after an action
WARN = A.MAV_SEVERITY_WARNING


class Failsafes(Faults):
    def world_step(self, dt: float) -> None:
        """Wind, faults and failsafes for this sub-step (before the vehicle moves)."""
        lost = self.faults_step(dt)
        lost |= self._battery()
        lost |= self._radio()
        self._gcs()
        self._ekf()
        lost |= self._fence()
        extra = 0
        if self.p.get("FENCE_ENABLE", 0):
            extra |= A.MAV_SYS_STATUS_GEOFENCE
        name = MODE_NAMES.get(self.mode)
        if self.flying and name in POSITION_MODES and (name != "LAND" or self.position_ok):
            extra |= A.MAV_SYS_STATUS_SENSOR_XY_POSITION_CONTROL  # off once LAND has no position
        self.enabled_extra = extra
        self.health_lost = lost

    def failsafe_action(self, chain: tuple[str, ...], reason: str) -> None:
        """The first mode of ``chain`` the vehicle can enter; on the ground, a disarm."""
        if not self.armed:
            return
        if not self.flying:
            self.disarm(reason, force=True)
            return
        name = MODE_NAMES.get(self.mode, "")
        for want in chain:
            if want == "continue":
                if name == "AUTO":
                    return
                continue
            if want == "TERMINATE":
                self.disarm(reason, force=True)
                return
            if want in NEEDS_POSITION and not (self.position_ok and self.home_set):
                continue
            if want == name or (name == "LAND" and want != "LAND"):
                return  # already there, or landing: a failsafe does not take it out of LAND
            self.enter_mode(MODES[want], reason)
            return

    def avoid(self, want: tuple[float, float, float], name: str) -> tuple[float, float, float]:
        """AC_Avoid's fence avoidance (``AVOID_ENABLE`` bit 1) on a wanted velocity (n, e, down):
        the speed toward the circle fence, the uploaded polygons and circles (fence.py) and the
        climb toward ``FENCE_ALT_MAX`` limited to what stops ``FENCE_MARGIN`` inside them."""
        g = self.p.get
        if not (g("FENCE_ENABLE", 0) and int(g("AVOID_ENABLE", 3)) & 1 and self.flying):
            return want
        types, margin = int(g("FENCE_TYPE", 7)), max(0.0, g("FENCE_MARGIN", 2))
        vn, ve, vd = want
        if types & 1 and name in AVOID_Z and vd < 0:
            room = g("FENCE_ALT_MAX", 100) - margin - self.rel_alt
            vd = max(vd, -stop_speed(room, g("PSC_POSZ_P", 1), g("PILOT_ACCEL_Z", 250) / 100))
        if types & 2 and name in AVOID_XY and (vn or ve):
            dn, de = self.north - self.home_n, self.east - self.home_e
            dist = math.hypot(dn, de)
            if dist > 1e-3:
                un, ue = dn / dist, de / dist
                out = vn * un + ve * ue
                lim = stop_speed(g("FENCE_RADIUS", 150) - margin - dist, g("PSC_POSXY_P", 1), AVOID_ACCEL_XY)
                if out > lim:
                    vn, ve = vn - un * (out - lim), ve - ue * (out - lim)
        if types & 4 and name in AVOID_XY and (vn or ve):
            zones = self.fence_zones()
            vn, ve = limit(zones, self.north, self.east, vn, ve, margin, g("PSC_POSXY_P", 1), AVOID_ACCEL_XY)
        return vn, ve, vd

    # ---- battery -----------------------------------------------------------------

    def _battery(self) -> int:
        g = self.p.get
        if not g("BATT_MONITOR", 4):
            return 0
        v = self.voltage()
        timer = g("BATT_LOW_TIMER", 10) + 0.2  # the voltage reading lags 0.2 s, as measured
        low_v, crt_v = g("BATT_LOW_VOLT", 10.5), g("BATT_CRT_VOLT", 0)
        low = self.since("batt_low", self.armed and 0 < v < low_v)
        crt = self.since("batt_crt", self.armed and 0 < v < crt_v)
        level = 2 if crt is not None and crt >= timer else (1 if low is not None and low >= timer else 0)
        had = int(self.fs.get("batt_level", 0))
        if level > had:
            self.fs["batt_level"] = level
            word = "critical" if level == 2 else "low"
            self.text(WARN, f"Battery 1 is {word} {v:.2f}V used {self.consumed_mah:.0f} mAh")
            self.text(WARN, "Battery Failsafe")
            self.error(ERR["FAILSAFE_BATT"], ERR["OCCURRED"])
            act = int(g("BATT_FS_CRT_ACT" if level == 2 else "BATT_FS_LOW_ACT", 0))
            if act in BATT_ACTIONS:
                self.failsafe_action(BATT_ACTIONS[act], "battery_failsafe")
        elif had and not self.armed and level == 0:
            self.forget("batt_level")
        return A.MAV_SYS_STATUS_SENSOR_BATTERY if self.fs.get("batt_level") else 0

    # ---- radio ---------------------------------------------------------------------

    def _radio(self) -> int:
        g = self.p.get
        fail = int(g("SIM_RC_FAIL", 0))
        since_fail = self.since("rc_fail", fail == 1)
        if fail == 2:  # neutral sticks, throttle 950: SITL keeps them until it reboots (measured)
            self.fs.setdefault("rc_neutral", self.t)
        last_override = self.fs.get("rc_override", -1e9)
        lost = False
        if since_fail is not None:  # no pulses: RC_FS_TIMEOUT after the last input (an override counts)
            quiet = self.t - max(self.fs["rc_fail"], last_override)
            lost = quiet >= max(0.1, g("RC_FS_TIMEOUT", 1.0)) + 0.05
        if "rc_neutral" in self.fs and not lost:  # throttle 950 below FS_THR_VALUE, unless overridden
            overridden = self.t - last_override < g("RC_OVERRIDE_TIME", 3.0)
            lost = self.t - self.fs["rc_neutral"] >= 0.05 and not overridden and 950 < g("FS_THR_VALUE", 975)
        enabled = bool(g("FS_THR_ENABLE", 1))
        on = "radio_fs" in self.fs
        if lost and enabled and not on:
            self.fs["radio_fs"] = self.t
            self.text(WARN, "Radio Failsafe")
            self.error(ERR["FAILSAFE_RADIO"], ERR["OCCURRED"])
            act = int(g("FS_THR_ENABLE", 1))
            if act in THR_ACTIONS:
                self.failsafe_action(THR_ACTIONS[act], "radio_failsafe")
        elif on and not lost:
            self.forget("radio_fs")
            self.text(WARN, "Radio Failsafe Cleared")
            self.error(ERR["FAILSAFE_RADIO"], ERR["RESOLVED"])
        return A.MAV_SYS_STATUS_SENSOR_RC_RECEIVER if lost else 0

    # ---- ground station --------------------------------------------------------------

    def gcs_heartbeat(self) -> None:
        """A HEARTBEAT from the ground station (sysid ``MAV_GCS_SYSID``)."""
        self.fs["gcs_hb"] = self.t
        if "gcs_fs" in self.fs:
            self.forget("gcs_fs")
            self.text(WARN, "GCS Failsafe Cleared")
            self.error(ERR["FAILSAFE_GCS"], ERR["RESOLVED"])

    def _gcs(self) -> None:
        g = self.p.get
        act = int(g("FS_GCS_ENABLE", 0))
        if not act or not self.armed or "gcs_hb" not in self.fs or "gcs_fs" in self.fs:
            return
        if self.t - self.fs["gcs_hb"] < g("FS_GCS_TIMEOUT", 5) + 0.2:
            return
        self.fs["gcs_fs"] = self.t
        self.text(WARN, "GCS Failsafe")
        self.error(ERR["FAILSAFE_GCS"], ERR["OCCURRED"])
        if int(g("FS_OPTIONS", 16)) & 16 and MODE_NAMES.get(self.mode) in PILOT_MODES:
            return  # FS_OPTIONS bit 4: continue in pilot-controlled modes
        if act in GCS_ACTIONS:
            self.failsafe_action(GCS_ACTIONS[act], "gcs_failsafe")

    # ---- EKF -------------------------------------------------------------------------

    def _ekf(self) -> None:
        g = self.p.get
        bad_now = self.reached(7) and not self.ekf_pos_ok
        bad = self.since("ekf_bad", self.armed and bad_now)
        on = "ekf_fs" in self.fs
        if bad is not None and bad >= 0.7 and not on and g("FS_EKF_THRESH", 0.8) > 0:
            self.fs["ekf_fs"] = self.t
            self.text(A.MAV_SEVERITY_CRITICAL, "EKF variance")
            self.error(ERR["EKFCHECK"], ERR["EKF_BAD_VARIANCE"])
            self.error(ERR["FAILSAFE_EKFINAV"], ERR["OCCURRED"])
            act = int(g("FS_EKF_ACTION", 1))
            name = MODE_NAMES.get(self.mode, "")
            if act and (name in NEEDS_POSITION or act == 3) and name != "LAND":
                to = "ALT_HOLD" if act == 2 else "LAND"
                if self.flying:
                    self.enter_mode(MODES[to], "ekf_failsafe")
                    self.text(A.MAV_SEVERITY_CRITICAL, f"EKF Failsafe: changed to {to} Mode")
                else:
                    self.disarm("ekf_failsafe", force=True)
        elif on and not bad_now:
            self.forget("ekf_fs", "said_smartrtl")
            self.text(A.MAV_SEVERITY_CRITICAL, "EKF Failsafe Cleared")
            self.error(ERR["EKFCHECK"], ERR["RESOLVED"])
            self.error(ERR["FAILSAFE_EKFINAV"], ERR["RESOLVED"])
        if bad is not None and bad >= 15.0 and self.once("said_smartrtl"):
            self.text(WARN, "SmartRTL deactivated: bad position")

    # ---- geofence --------------------------------------------------------------------

    def _fence(self) -> int:
        g = self.p.get
        had = int(self.fs.get("fence", 0))
        if not (g("FENCE_ENABLE", 0) and self.armed):
            self.forget("fence", "fence_alt_backup", "fence_circle_backup")
            return 0
        types = int(g("FENCE_TYPE", 7))
        margin = g("FENCE_MARGIN", 2)
        alt_max, radius = g("FENCE_ALT_MAX", 100), g("FENCE_RADIUS", 150)
        dist = math.hypot(self.north - self.home_n, self.east - self.home_e)
        now = again = 0
        if self.flying:
            if types & 1 and (self.rel_alt > alt_max or had & 1 and self.rel_alt > alt_max - margin):
                now |= 1
                again |= 1 if self.rel_alt >= self.fs.get("fence_alt_backup", math.inf) else 0
            if types & 2 and (dist > radius or had & 2 and dist > radius - margin):
                now |= 2
                again |= 2 if dist >= self.fs.get("fence_circle_backup", math.inf) else 0
            if types & 4 and breached(self.fence_zones(), self.north, self.east, margin if had & 4 else 0.0):
                now |= 4
        if self.t - self.fs.get("fence_action", -math.inf) < MANUAL_RECOVERY_S:
            again = 0  # AC_Fence ignores new breaches while the pilot recovers
        new = now & ~had | again & had
        if new:
            self.fs["fence"] = now
            if new & 1:
                self.fs["fence_alt_backup"] = self.rel_alt + FENCE_BACKUP_M
            if new & 2:
                self.fs["fence_circle_backup"] = dist + FENCE_BACKUP_M
            for bit, text in FENCE_TEXTS.items():
                if new & bit:
                    self.text(A.MAV_SEVERITY_NOTICE, text)
            self.error(ERR["FAILSAFE_FENCE"], new)
            act = int(g("FENCE_ACTION", 1))
            if act in FENCE_ACTIONS and self.flying:
                self.fs["fence_action"] = self.t
                self.failsafe_action(FENCE_ACTIONS[act], "fence_breached")
                self.text(A.MAV_SEVERITY_INFO, "Manual recovery started")
        elif had and not now:
            self.forget("fence", "fence_alt_backup", "fence_circle_backup")
            self.text(A.MAV_SEVERITY_NOTICE, "Fence breach cleared")
            self.error(ERR["FAILSAFE_FENCE"], ERR["RESOLVED"])
        elif now != had:
            self.fs["fence"] = now
        return A.MAV_SYS_STATUS_GEOFENCE if now else 0
