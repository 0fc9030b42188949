"""A MAVLink copter with simple kinematics, on simulated time.

Behaves like ArduCopter 4.7 where clients can tell: the boot timeline (GPS, EKF, pre-arm
texts at the sim times real SITL has them), mode numbers and which modes exist, arming
checks with ``Arm:``/``PreArm:`` texts, COMMAND_ACK results, GUIDED takeoff and go-to,
LAND, RTL, AUTO missions (RTL items flown inside AUTO), home reset at arming, landing
detection and auto-disarm. Speeds and accelerations come from the vehicle's own
parameters (WPNAV_*, LAND_*, RTL_*), as ArduCopter's do. Everything runs on sim time.

``Copter`` is built in layers, each a module: ``state`` (fields, frames, texts, observer
hooks) < ``sensors`` (pre-arm checks, health, EKF, battery) < ``navigation`` (speeds, going
to a point, LAND, RTL) < ``mission`` (AP_Mission: storing and flying missions) <
``actions`` (what a GCS asks: arm, modes, takeoff, targets) < ``copter`` (the step: boot
events, the flight modes' motion, landing). Tables of ArduCopter's facts: ``rules``.
"""

from __future__ import annotations

import math

from .failsafes import Failsafes
from .faults import BARO_LOST_CLIMB
from .geo import declination
from .rules import (
    BOOT_TEXTS,
    FORCE_MAGIC,
    GUIDED_LIKE,
    MODE_NAMES,
    MODES,
    PILOTED,
    A,
    mavlink,
)
from .state import MissionItem
from .world import G, HoldError, drag_tan, drift_tau, max_airspeed

DRIFTING = {"STABILIZE", "ACRO", "ALT_HOLD"}  # no position hold: the air carries the vehicle

__all__ = ["FORCE_MAGIC", "MODES", "MODE_NAMES", "Copter", "MissionItem", "declination", "mavlink"]


class Copter(Failsafes):
    """The vehicle: ``Copter(params, home, ready_delay, send, request_reboot)`` (see
    ``VehicleState``); ``step(dt)`` advances it by ``dt`` sim seconds."""

    def step(self, dt: float) -> None:
        self.t += dt
        while self.event_i < len(self.events) and self.t >= self.events[self.event_i][0]:
            i = self.event_i
            self.event_i += 1
            for tx in self.events[i][1]:
                self.text(A.MAV_SEVERITY_INFO, tx.format(elev=int(round(self.origin_alt))))
            if i == 4:
                self.home_set = True
                self.home_changed()
        if not self.declination_set and self.gps_detected:
            self.auto_declination()
        h = self.health()[2] & A.MAV_SYS_STATUS_PREARM_CHECK
        if h != self.prev_health:
            self.prev_health = h
            self.on_health_change()
        if not self.armed and self.t >= self.next_prearm:
            self.next_prearm = self.t + 30
            why = self.prearm_failures()
            if why:
                self.text(A.MAV_SEVERITY_CRITICAL, f"PreArm: {why[0]}")
        self.world_step(dt)
        self.hold_position_after_velocity()
        self._fly(dt)
        amps = self.current()
        self.consumed_mah += amps * dt / 3.6
        self.energy_wh += amps * self.voltage() * dt / 3600
        self.notify("on_step", dt)

    def _fly(self, dt: float) -> None:
        name = MODE_NAMES.get(self.mode, "")
        vh, ah, vup, vdn, az = self._limits()
        if not self.armed:
            self.vn = self.ve = self.vd = 0.0
            self.roll = self.pitch = 0.0
            self.landed_state = A.MAV_LANDED_STATE_ON_GROUND
            return
        fall = self.motor_fall()
        if fall is not None and (self.landed_since is None or self.motor_down):
            self._fall(dt, *fall)
            return
        self._hold_error(dt, name)
        want: tuple[float, float, float] | None = None  # desired velocity n, e, d
        climbing = False
        avoiding = False  # AC_Avoid's fence limits apply (GUIDED velocity control, pilot modes)
        if name in GUIDED_LIKE and self.velocity is not None and self.t < self.velocity_until:
            avoiding = True
            wn, we, wd = self.velocity
            sp = math.hypot(wn, we)
            if sp > vh:
                wn, we = wn / sp * vh, we / sp * vh
            want = (wn, we, max(-vup, min(vdn, wd)))
        elif name in GUIDED_LIKE and self.target:
            want = self._toward(*self.target, vh, ah, vup, vdn, az)
            climbing = self.target[2] > self.alt + 0.3
        elif name in PILOTED:
            avoiding = True
            if name != "STABILIZE":  # the pilot's climb accelerates at PILOT_ACCEL_Z
                az = max(az, self.p.get("PILOT_ACCEL_Z", 250) / 100)
            if self.throttle_until < self.t:
                self.throttle = 1500 if name != "STABILIZE" and self.flying else self.throttle
            stick = (self.throttle - 1500) / 500
            wd = 0.0
            pup = self.p.get("PILOT_SPEED_UP", 250) / 100
            pdn = (self.p.get("PILOT_SPEED_DN", 0) or self.p.get("PILOT_SPEED_UP", 250)) / 100
            if name == "STABILIZE":
                wd = (
                    -pup * max(0.0, (self.throttle - 1350) / 650)
                    if self.throttle > 1350
                    else (pdn if self.throttle < 1300 else 0)
                )
            elif abs(stick) > 0.1:
                wd = -stick * pup if stick > 0 else -stick * pdn
            want = (0.0, 0.0, wd)
        elif name == "LAND":
            want = (0.0, 0.0, self._land_speed())
        elif name in ("RTL", "SMART_RTL"):
            want = self._rtl(vh, ah, vup, vdn, az)
        elif name == "AUTO":
            want = self._auto(vh, ah, vup, vdn, az)
            climbing = self.landed_state == A.MAV_LANDED_STATE_TAKEOFF
        if want is None:
            want = (
                self._toward(self.north, self.east, self.alt, vh, ah, vup, vdn, az) if self.flying else (0.0, 0.0, 0.0)
            )
        if avoiding:
            want = self.avoid(want, name)
        if self.baro_lost and self.flying:  # no barometer left: it climbs away (faults.py)
            want, az = (want[0], want[1], -BARO_LOST_CLIMB), max(az, BARO_LOST_CLIMB)
        if self.landed_since is not None and (self.t < self.lift_at or not (want[2] < 0 or name in PILOTED)):
            want = (0.0, 0.0, 0.0)  # spooling up, or on the ground with nothing to climb to
        wind = self.wind.active and self.landed_since is None
        if wind and (name in DRIFTING or not self.position_ok):
            self._drift(dt)  # no position hold: the air carries it
            self.vd += max(-az * dt, min(az * dt, want[2] - self.vd))
            self._move(dt, name, 0.0, 0.0, True, climbing)
            return
        if wind:
            want = self._airspeed_limited(want)
        # accelerations limited as WPNAV_ACCEL / WPNAV_ACCEL_Z limit ArduCopter's, speeding up
        # eased in at the jerk limit (WPNAV_JERK in AUTO, PSC_JERK_XY otherwise): its S-curves
        dvn, dve = want[0] - self.vn, want[1] - self.ve
        dv = math.hypot(dvn, dve)
        if math.hypot(*want[:2]) > math.hypot(self.vn, self.ve) + 0.05:
            jerk = self.p.get("WPNAV_JERK", 1) if name == "AUTO" else self.p.get("PSC_JERK_XY", 5)
            self.h_acc = min(ah, self.h_acc + max(0.1, jerk) * dt)
        else:
            self.h_acc = 0.0 if math.hypot(self.vn, self.ve) < 0.05 else ah
        lim = max(self.h_acc, 0.05) * dt
        if dv > lim:
            dvn, dve = dvn / dv * lim, dve / dv * lim
        self.vn += dvn
        self.ve += dve
        self.vd += max(-az * dt, min(az * dt, want[2] - self.vd))
        self._move(dt, name, dvn / dt, dve / dt, self.landed_since is not None, climbing)

    def _move(self, dt: float, name: str, an: float, ae: float, level: bool, climbing: bool) -> None:
        """Integrate the velocity, lean as the thrust must (accelerating ``an``, ``ae`` against
        the drag of the air), yaw, touch the ground, and detect landing."""
        if level:
            self.roll, self.pitch = self.fault_tilt if self.landed_since is None else (0.0, 0.0)
        else:
            self._lean(an, ae)
        self.north += self.vn * dt
        self.east += self.ve * dt
        self.alt -= self.vd * dt
        if self.yaw_rate:
            self.heading = (self.heading + self.yaw_rate * dt) % 360
        elif self.yaw_target is not None:
            self.heading = self.yaw_target
        elif math.hypot(self.vn, self.ve) > 0.5:
            self.heading = math.degrees(math.atan2(self.ve, self.vn)) % 360
        if self.alt <= 0.0:
            self.alt = 0.0
            if self.vd > 0 and self.landed_since is None:
                self.text(A.MAV_SEVERITY_INFO, f"SIM Hit ground at {self.vd:f} m/s")
            self.vd = min(self.vd, 0.0)
            if self.vd == 0 and self.landed_since is None:
                self.landed_since = self.t
                self.vn = self.ve = 0.0
        elif self.alt > 0.3 and self.landed_since is not None:
            self.landed_since = None
        if self.landed_since is not None:
            self.vn = self.ve = 0.0
            waiting = self.t < self.lift_at
            self.landed_state = A.MAV_LANDED_STATE_TAKEOFF if waiting else A.MAV_LANDED_STATE_ON_GROUND
            idle = self.t - max(self.landed_since, self.armed_at, self.lift_at)
            landing = name in ("LAND", "RTL", "SMART_RTL") or (
                name == "AUTO" and (self.auto_landing or self.mission_done)
            )
            delay = self.p.get("DISARM_DELAY", 10)
            if self.motor_down:
                pass  # down with a failed motor: ArduCopter stays armed in its mode, trying to climb
            elif not waiting and (landing and idle > 2.25 or (delay > 0 and idle > delay)):
                self.disarm("landed" if landing else "auto disarm")
        elif climbing or (self.landed_state == A.MAV_LANDED_STATE_TAKEOFF and self.vd < -0.1):
            self.landed_state = A.MAV_LANDED_STATE_TAKEOFF
        elif self.vd > 0.1 and (name == "LAND" or self.auto_landing or self.rtl_phase == "land"):
            self.landed_state = A.MAV_LANDED_STATE_LANDING
        else:
            self.landed_state = A.MAV_LANDED_STATE_IN_AIR

    def _hold_error(self, dt: float, name: str) -> None:
        """The transient error a change of wind causes while the position is held (``HoldError``),
        carried in the reported positions (``hold_dn``, ``hold_de``)."""
        if self.flying and (self.wind.active or not self.hold.idle):
            self.hold.update(self.wind.sn, self.wind.se, dt)
        elif not self.flying and not self.hold.idle:
            self.hold = HoldError()
        holding = self.flying and name not in DRIFTING and self.position_ok
        self.hold_dn, self.hold_de = (self.hold.dn, self.hold.de) if holding else (0.0, 0.0)

    def _drift(self, dt: float) -> None:
        """Level, no position hold: the drag brings the ground velocity to the wind's."""
        un, ue = self.vn - self.wind.n, self.ve - self.wind.e
        k = 1 - math.exp(-dt / drift_tau(math.hypot(self.wind.n, self.wind.e)))
        self.vn -= un * k
        self.ve -= ue * k

    def _airspeed_limited(self, want: tuple[float, float, float]) -> tuple[float, float, float]:
        """A wanted ground velocity the lean limit (ANGLE_MAX) can hold against the wind: upwind
        the air-relative speed saturates, so the ground speed is that speed minus the wind."""
        wn, we = self.wind.n, self.wind.e
        umax = max_airspeed(self.p.get("ANGLE_MAX", 3000) / 100)
        vn, ve, vd = want
        if math.hypot(vn - wn, ve - we) <= umax:
            return want
        sp = math.hypot(vn, ve)
        if sp < 1e-6:  # holding in a wind stronger than it can fly: it goes downwind
            w = math.hypot(wn, we)
            return (wn / w * (w - umax), we / w * (w - umax), vd)
        dn, de = vn / sp, ve / sp
        b = dn * wn + de * we
        disc = b * b - (wn * wn + we * we - umax * umax)
        s = b + math.sqrt(disc) if disc >= 0 else -1.0
        if s < 0:
            return (wn + dn * umax, we + de * umax, vd)
        s = min(s, sp)
        return (dn * s, de * s, vd)

    def _lean(self, an: float, ae: float) -> None:
        """ATTITUDE roll and pitch from the horizontal thrust: acceleration plus the drag of the
        air moving past (tan(lean) = drag / g), limited by ANGLE_MAX."""
        un, ue = self.vn - self.wind.n, self.ve - self.wind.e
        u = math.hypot(un, ue)
        if u > 1e-3:
            k = G * drag_tan(u) / u
            an, ae = an + k * un, ae + k * ue
        h = math.radians(self.heading)
        fwd = an * math.cos(h) + ae * math.sin(h)
        right = -an * math.sin(h) + ae * math.cos(h)
        lim = self.p.get("ANGLE_MAX", 3000) / 100
        tilt = math.degrees(math.atan(math.hypot(fwd, right) / G))
        scale = min(1.0, lim / tilt) if tilt > 1e-6 else 1.0
        self.pitch = -math.degrees(math.atan(fwd / G)) * scale + self.fault_tilt[1]
        self.roll = math.degrees(math.atan(right / G)) * scale + self.fault_tilt[0]

    def _fall(self, dt: float, term: float, tau: float) -> None:
        """A failed motor brings it down (``faults.py``): descent towards ``term`` m/s, carried
        by the wind, tilted and spinning (set by ``Faults._motor``)."""
        if self.landed_since is not None:  # down: it stays there, armed
            self.vn = self.ve = self.vd = 0.0
            self.roll = self.pitch = 0.0
            self.landed_state = A.MAV_LANDED_STATE_ON_GROUND
            return
        self.vd += (term - self.vd) * (1 - math.exp(-dt / tau))
        self.roll, self.pitch = self.fault_tilt
        self._drift(dt)
        self.north += self.vn * dt
        self.east += self.ve * dt
        self.alt -= self.vd * dt
        self.heading = (self.heading + self.yaw_rate * dt) % 360
        self.landed_state = A.MAV_LANDED_STATE_IN_AIR
        if self.alt <= 0.0:
            self.alt = 0.0
            self.text(A.MAV_SEVERITY_INFO, f"SIM Hit ground at {self.vd:f} m/s")
            self.vn = self.ve = self.vd = 0.0
            self.landed_since = self.t
            self.motor_down = True
            self.roll = self.pitch = 0.0
            self.landed_state = A.MAV_LANDED_STATE_ON_GROUND

    def base_mode(self) -> int:
        m = (
            A.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED
            | A.MAV_MODE_FLAG_STABILIZE_ENABLED
            | A.MAV_MODE_FLAG_MANUAL_INPUT_ENABLED
        )
        if MODE_NAMES.get(self.mode) in (
            "AUTO",
            "AUTO_RTL",
            "RTL",
            "LOITER",
            "AVOID_ADSB",
            "FOLLOW",
            "GUIDED",
            "CIRCLE",
            "POSHOLD",
            "BRAKE",
            "SMART_RTL",
        ):
            m |= A.MAV_MODE_FLAG_GUIDED_ENABLED
        if self.armed:
            m |= A.MAV_MODE_FLAG_SAFETY_ARMED
        return m

    def ready(self) -> None:
        """End of boot ("ArduPilot Ready"): the initial mode replaces any mode a client set while
        the vehicle was booting (ACKed and shown meanwhile), as real ArduCopter does."""
        self.booting = False
        for sev, tx in BOOT_TEXTS:
            self.text(sev, tx)
        self.change_mode(int(self.p.get("INITIAL_MODE", 0)), "initialised")
        self.notify("on_ready")
        self.target = self.velocity = None
