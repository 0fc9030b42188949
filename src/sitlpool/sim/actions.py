"""What a ground station can ask of the vehicle, with ArduCopter 4.7's answers (COMMAND_ACK
results and texts): arm and disarm, modes, takeoff, GUIDED targets, yaw, pause, speed, reboot,
RC override."""

from __future__ import annotations

import math

from .fence import allows, shapes
from .mission import MissionRunner
from .rules import (
    AP_NAMES,
    GUIDED_LIKE,
    MODE_NAMES,
    MODE_REFUSALS,
    NEEDS_POSITION,
    NOT_ARMABLE,
    NOT_BUILT,
    PILOTED,
    R_ACCEPTED,
    R_DENIED,
    R_FAILED,
    SPOOL_S,
    TAKEOFF_MODES,
    A,
    mavlink,
)


class Actions(MissionRunner):
    def arm(self, force: bool, link) -> int:
        if self.armed:
            return R_ACCEPTED
        name = MODE_NAMES.get(self.mode, "")
        why = [] if force else [f"Arm: {w}" for w in self.prearm_failures()]
        if not why and not force and name in NEEDS_POSITION and not self.position_ok:
            why = ["Arm: Need Position Estimate"]
        if not why and not force and name in NOT_ARMABLE:
            why = [
                "Arm: Mode requires mission"
                if name == "AUTO" and len(self.mission) <= 1
                else f"Arm: {AP_NAMES.get(name, name)} mode not armable"
            ]
        if why:
            for w in why:
                self.text(A.MAV_SEVERITY_CRITICAL, w)
            return R_FAILED
        self.armed = True
        self.armed_at = self.t
        self.landed_since = self.t
        self.lift_at = self.t
        self.throttle = 1000
        self.target = None
        if self.gps_detected and self.reached(4):
            self.set_home_here()  # ArduCopter resets home where it arms
        self.text(A.MAV_SEVERITY_INFO, "Arming motors")
        self.notify("on_arming", True, "mavlink", force)
        return R_ACCEPTED

    def disarm(self, why: str = "", force: bool = False, link=None) -> int:
        if not self.armed:
            return R_ACCEPTED
        if self.flying and not force:
            return R_FAILED
        if MODE_NAMES.get(self.mode) == "AUTO" and self.auto_landing and 0 < self.mission_seq < len(self.mission):
            if self.mission[self.mission_seq].command == A.MAV_CMD_NAV_RETURN_TO_LAUNCH:
                self.send(mavlink.MAVLink_mission_item_reached_message(self.mission_seq))  # as Copter: not for LAND
            self._complete()
            self.send(self.mission_current())
        # ArduCopter's disarm resets the mission (AP_Mission::reset): MISSION_CURRENT seq 0, and
        # a stopped mission NOT_STARTED (a finished one stays COMPLETE)
        self.mission_seq, self.mission_started = 0, False
        self.armed = False
        self.target = None
        self.vn = self.ve = self.vd = 0.0
        if self.alt > 0:  # forced disarm in the air: it falls (simply: lands at once)
            self.alt = 0.0
        self.landed_since = self.t
        self.landed_state = A.MAV_LANDED_STATE_ON_GROUND
        self.text(A.MAV_SEVERITY_INFO, "Disarming motors")
        self.notify("on_arming", False, why or "mavlink", force)
        return R_ACCEPTED

    def set_mode(self, custom: int, link) -> int:
        result = self._set_mode(custom)
        if result != R_ACCEPTED:
            self.notify("on_mode_refused", custom)
        return result

    def _set_mode(self, custom: int) -> int:
        name = MODE_NAMES.get(custom)
        if name is None or name in NOT_BUILT:
            self.text(A.MAV_SEVERITY_WARNING, f"No such mode {custom}")
            return R_FAILED
        if name in MODE_REFUSALS:
            for tx in MODE_REFUSALS[name]:
                self.text(A.MAV_SEVERITY_WARNING, tx)
            return R_FAILED
        # ArduCopter accepts any mode while disarmed; armed, position modes need a position
        if self.armed and name in NEEDS_POSITION and not self.position_ok:
            self.text(A.MAV_SEVERITY_WARNING, f"Mode change to {AP_NAMES.get(name, name)} failed: requires position")
            return R_FAILED
        if self.armed and name == "AUTO" and len(self.mission) <= 1:
            self.text(A.MAV_SEVERITY_WARNING, "Mode change to AUTO failed: init failed")
            return R_FAILED
        if name == "AUTO" and self.armed and self.landed_since is not None:
            first = self.mission[1] if len(self.mission) > 1 else None
            if first is None or first.command != A.MAV_CMD_NAV_TAKEOFF:
                self.text(A.MAV_SEVERITY_WARNING, "Auto: Missing Takeoff Cmd")
                return R_FAILED
        self.enter_mode(custom, "gcs")
        return R_ACCEPTED

    def enter_mode(self, custom: int, reason: str) -> None:
        """Switch to mode ``custom`` (already accepted) for ``reason`` (see observers.py)."""
        name = MODE_NAMES.get(custom)
        if custom != self.mode:
            self.change_mode(custom, reason)
            self.paused = False
            self.velocity = self.yaw_target = None
            self.auto_landing = False
            self.hold_until = None
            if name == "AUTO":
                if self.mission_done or self.mission_seq < 1:
                    self.mission_seq = 1 if len(self.mission) > 1 else 0  # a finished mission starts over
                    self.mission_done = False
                self.started_seq = -1
                self.mission_started = self.armed
            self.target = (self.north, self.east, self.alt) if name in GUIDED_LIKE and self.flying else None
            self.rtl_phase = "climb" if name in ("RTL", "SMART_RTL") else ""

    def takeoff(self, alt: float, link) -> int:
        # ArduCopter refuses without a word: not armed, already flying, a mode without user takeoff
        name = MODE_NAMES.get(self.mode)
        if name not in TAKEOFF_MODES or not self.armed or self.flying:
            return R_FAILED
        if not alt > 0:
            return R_FAILED
        self.target = (self.north, self.east, self.alt + float(alt))
        self.lift_at = self.t + SPOOL_S  # still landed until it lifts off
        self.landed_state = A.MAV_LANDED_STATE_TAKEOFF
        return R_ACCEPTED

    def goto(self, lat: float, lon: float, alt: float | None) -> bool:
        """A GUIDED position target; ``alt`` in metres above the origin (see ``alt_from``)."""
        if MODE_NAMES.get(self.mode) not in GUIDED_LIKE or not self.flying:
            return False
        n, e = self.local(lat, lon)
        return self.goto_local(n, e, alt)

    def goto_local(self, north: float, east: float, alt: float | None) -> bool:
        """A position target in metres from the origin (NED, alt up)."""
        if MODE_NAMES.get(self.mode) not in GUIDED_LIKE or not self.flying:
            return False
        if math.isnan(north + east + (0.0 if alt is None else alt)):
            return False
        alt = self.alt if alt is None else alt
        if not self.fence_allows(north, east, alt):
            return False  # ArduCopter ignores a destination outside its fence, without a word
        self.target = (north, east, alt)
        self.velocity = None
        return True

    def fence_allows(self, north: float, east: float, alt: float) -> bool:
        """Whether a destination (``alt`` above the origin) is inside the fence (FENCE_ENABLE):
        the circle (FENCE_TYPE bit 2), under FENCE_ALT_MAX (bit 1), inside the uploaded inclusion
        zones and outside the exclusion ones (bit 4); measured on ArduCopter 4.7 (world3.py)."""
        g = self.p.get
        if not g("FENCE_ENABLE", 0):
            return True
        types = int(g("FENCE_TYPE", 7))
        if types & 2 and math.hypot(north - self.home_n, east - self.home_e) > g("FENCE_RADIUS", 150):
            return False
        if types & 1 and alt - self.home_up > g("FENCE_ALT_MAX", 100):
            return False
        return not types & 4 or allows(self.fence_zones(), north, east)

    _zones_key: tuple = ()
    _zones: list = []

    def fence_zones(self) -> list:
        """The uploaded fence as fence.py's shapes in local metres (kept until the fence or the
        origin changes: the fence and avoidance read it every step)."""
        items = self.fence_items()
        key = (self.origin_lat, self.origin_lon, *map(id, items))
        if key != self._zones_key:
            self._zones_key, self._zones = key, shapes(items, self.local)
        return self._zones

    def set_velocity(self, vn: float, ve: float, vd: float) -> bool:
        """A velocity target (m/s NED); like ArduCopter it stops after 3 s without a new one."""
        if MODE_NAMES.get(self.mode) not in GUIDED_LIKE or not self.flying or math.isnan(vn + ve + vd):
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
        base = self.heading if relative else 0.0
        self.yaw_target = (base + (angle if direction >= 0 else -angle)) % 360
        return R_ACCEPTED

    def pause(self, pause: bool) -> int:
        """DO_PAUSE_CONTINUE: in GUIDED (even on the ground, as ArduCopter's guided mode takes it)
        or in AUTO flying: pause holds here, continue resumes."""
        name = MODE_NAMES.get(self.mode)
        if not (name == "GUIDED" or (name == "AUTO" and self.flying)):
            self.text(A.MAV_SEVERITY_INFO, "Failed to pause" if pause else "Failed to resume")
            return R_FAILED
        if pause:
            if self.flying:
                self.paused_target, self.target = self.target, (self.north, self.east, self.alt)
            self.paused = True
        else:
            if MODE_NAMES.get(self.mode) == "GUIDED" and self.paused:
                self.target = self.paused_target or self.target
            self.paused = False
        return R_ACCEPTED

    def change_speed(self, speed: float) -> int:
        if not speed > 0:
            return R_DENIED
        if MODE_NAMES.get(self.mode) not in ("GUIDED", "AUTO", "RTL", "SMART_RTL", "AVOID_ADSB", "FOLLOW", "ZIGZAG"):
            return R_FAILED  # Copter takes a speed only in modes that fly to a target
        self.guided_speed = float(speed)
        return R_ACCEPTED

    def reboot(self, link) -> int:
        if self.armed:
            return R_FAILED
        self.request_reboot()
        return R_ACCEPTED

    def rc_override(self, chan3: int) -> None:
        # overrides count as RC input (no radio failsafe while they come); 0 releases the channel
        if chan3 == 0:
            self.fs.pop("rc_override", None)
        else:
            self.fs["rc_override"] = self.t
        if 800 <= chan3 <= 2200:
            self.throttle = chan3
            self.throttle_until = self.t + 1.0  # overrides time out, as RC_OVERRIDE_TIME does
        if (
            self.armed
            and self.landed_since is not None
            and self.throttle > 1350
            and MODE_NAMES.get(self.mode) in PILOTED
        ):
            self.landed_since = None
