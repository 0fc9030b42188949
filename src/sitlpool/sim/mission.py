"""Missions as AP_Mission keeps and flies them: item 0 is home, AUTO flies TAKEOFF, WAYPOINT,
LOITER_*, LAND and RETURN_TO_LAUNCH (inside AUTO, as Copter does), MISSION_CURRENT's states."""

from __future__ import annotations

import math

from .navigation import Navigation
from .rules import CMD_NAMES, MODE_NAMES, SPOOL_S, A, mavlink
from .state import MissionItem


class MissionRunner(Navigation):
    def _auto(self, vh, ah, vup, vdn, az) -> tuple[float, float, float] | None:
        """Fly the mission from ``mission_seq``: TAKEOFF, WAYPOINT, LOITER_*, LAND and
        RETURN_TO_LAUNCH (flown inside AUTO, as Copter does); DO_CHANGE_SPEED applies; other
        commands are passed over. At its end the vehicle holds (or stays landed)."""
        if self.mission_done or self.paused:
            return None
        radius = max(0.5, self.p.get("WPNAV_RADIUS", 200) / 100)
        while 0 < self.mission_seq < len(self.mission):
            it = self.mission[self.mission_seq]
            c = it.command
            if self.started_seq != self.mission_seq:  # as AP_Mission announces each command it starts
                self.started_seq = self.mission_seq
                self.text(A.MAV_SEVERITY_INFO, f"Mission: {self.mission_seq} {CMD_NAMES.get(c, str(c))}")
                self.notify("on_mission_item", self.mission_seq, "started")
            here = it.lat == 0 and it.lon == 0  # latitude and longitude 0 mean "where the vehicle is"
            n, e = (self.north, self.east) if here else self.local(it.lat, it.lon)
            if c == A.MAV_CMD_NAV_TAKEOFF:
                ta = self.alt_from(it.frame, it.alt)
                if self.landed_since is not None and self.lift_at <= self.armed_at:
                    self.lift_at = self.t + SPOOL_S
                    self.landed_state = A.MAV_LANDED_STATE_TAKEOFF
                if self.alt >= ta - 0.1:
                    self._reached()
                    continue
                return self._toward(self.north, self.east, ta, vh, ah, vup, vdn, az)
            if c in (
                A.MAV_CMD_NAV_WAYPOINT,
                A.MAV_CMD_NAV_SPLINE_WAYPOINT,
                A.MAV_CMD_NAV_LOITER_TIME,
                A.MAV_CMD_NAV_LOITER_UNLIM,
                A.MAV_CMD_NAV_LOITER_TURNS,
            ):
                ta = self.alt if it.alt == 0 and here else self.alt_from(it.frame, it.alt)
                dist = math.hypot(n - self.north, e - self.east)
                if dist <= radius and abs(ta - self.alt) < 0.5:
                    if c == A.MAV_CMD_NAV_LOITER_UNLIM:
                        return self._toward(n, e, ta, vh, ah, vup, vdn, az)
                    hold = it.params[0] if c in (A.MAV_CMD_NAV_WAYPOINT, A.MAV_CMD_NAV_LOITER_TIME) else 0.0
                    if self.hold_until is None:
                        self.hold_until = self.t + max(0.0, hold)
                    if self.t < self.hold_until:
                        return self._toward(n, e, ta, vh, ah, vup, vdn, az)
                    self.hold_until = None
                    self._reached()
                    continue
                return self._toward(n, e, ta, vh, ah, vup, vdn, az)
            if c == A.MAV_CMD_NAV_LAND:
                if math.hypot(n - self.north, e - self.east) > 0.5 and not self.auto_landing:
                    return self._toward(n, e, self.alt, vh, ah, vup, vdn, az)
                self.auto_landing = True
                return 0.0, 0.0, self._land_speed()
            if c == A.MAV_CMD_NAV_RETURN_TO_LAUNCH:
                if not self.rtl_phase:
                    self.rtl_phase = "climb"
                if self.rtl_phase == "land":
                    self.auto_landing = True
                return self._rtl(vh, ah, vup, vdn, az)
            if c == A.MAV_CMD_DO_CHANGE_SPEED and it.params[1] > 0:
                self.guided_speed = float(it.params[1])
            self.mission_seq += 1  # other DO_/CONDITION_ commands: nothing to simulate
            self.send(self.mission_current())
        if self.mission_seq >= len(self.mission) > 1:
            self._complete()
            self.send(self.mission_current())
        self.mission_done = True
        return None

    def _reached(self) -> None:
        self.send(mavlink.MAVLink_mission_item_reached_message(self.mission_seq))
        self.notify("on_mission_item", self.mission_seq, "reached")
        if self.mission[self.mission_seq].command != A.MAV_CMD_NAV_TAKEOFF:
            self.text(A.MAV_SEVERITY_INFO, f"Reached command #{self.mission_seq}")
        self.mission_seq += 1
        self.rtl_phase = ""
        if self.mission_seq >= len(self.mission):
            self._complete()
        self.send(self.mission_current())

    def _complete(self) -> None:
        self.mission_done = True
        self.mission_seq = 0  # ArduCopter reports a finished mission as seq 0, state COMPLETE

    def mission_current(self):
        count = len(self.mission)
        if count <= 1:
            state = A.MISSION_STATE_NO_MISSION
        elif self.mission_done:
            state = A.MISSION_STATE_COMPLETE
        elif MODE_NAMES.get(self.mode) == "AUTO" and self.mission_started:
            state = A.MISSION_STATE_ACTIVE
        elif self.mission_started:
            state = A.MISSION_STATE_PAUSED
        else:
            state = A.MISSION_STATE_NOT_STARTED
        return mavlink.MAVLink_mission_current_message(
            self.mission_seq, max(0, count - 1), state, int(MODE_NAMES.get(self.mode) == "AUTO")
        )

    def set_mission(self, items: list[MissionItem]) -> None:
        self.mission = items
        self.mission_seq = 1 if len(items) > 1 else 0
        self.mission_started = self.mission_done = False
        self.p.save_mission([it.row() for it in items])
        self.notify("on_mission", list(items))

    def store_item(self, seq: int, item: MissionItem) -> None:
        """One uploaded item written as it arrives, as AP_Mission does: it replaces item ``seq``
        or, one past the end, is added; where AUTO is in the mission stays."""
        if seq < len(self.mission):
            self.mission[seq] = item
        else:
            self.mission.append(item)
        self._stored()

    def truncate_mission(self, count: int) -> None:
        """An upload of ``count`` items begins: AP_Mission drops the items beyond it at once."""
        if count < len(self.mission):
            del self.mission[count:]
            self.mission_seq = min(self.mission_seq, max(0, len(self.mission) - 1))
            self._stored()

    def _stored(self) -> None:
        self.p.save_mission([it.row() for it in self.mission])
        self.notify("on_mission", list(self.mission))

    def set_home_here(self) -> None:
        self.home_n, self.home_e, self.home_up = self.north, self.east, self.alt
        self.home_set = True
        self.home_changed()

    def home_changed(self) -> None:
        """Home was (re)written: as AP_Mission, an empty mission gains item 0 (home); every GCS hears."""
        if not self.mission:
            self.mission = [MissionItem(A.MAV_CMD_NAV_WAYPOINT, 0.0, 0.0, 0.0, frame=A.MAV_FRAME_GLOBAL)]
            self.p.save_mission([it.row() for it in self.mission])
            self.notify("on_mission", list(self.mission))
        self.notify("on_home")
        self.on_home()
