"""The flight recorder: what one link saw, kept for pictures and for mission status.

It is a listener on the session's one ``VehicleLink`` (no second MAVLink path): positions
(at most 5 a second, two hours of them), mode changes and arm/disarm, and mission progress
(MISSION_CURRENT, MISSION_ITEM_REACHED). ``recorder_for(link)`` attaches one per link on
first use; sessions attach it when they open, so the picture starts with the session.
Listeners run on the link thread: every update here is a few appends, never a wait.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field

MIN_POINT_S = 0.2  # record at most 5 positions a second
MAX_POINTS = 36_000  # two hours of them
MISSION_STATE_ACTIVE, MISSION_STATE_COMPLETE = 3, 5
MAV_TYPE_GCS, MAV_AUTOPILOT_INVALID = 6, 8

_recorders: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()


def recorder_for(link) -> FlightRecorder:
    """The recorder of ``link``, attached as its listener on first use."""
    with _registry_lock:
        rec = _recorders.get(link)
        if rec is None:
            rec = _recorders[link] = FlightRecorder(link)
            link.add_listener(rec)
        return rec


def attach(link) -> FlightRecorder:
    """What sessions call when a session opens: start recording its link now."""
    return recorder_for(link)


@dataclass
class MissionProgress:
    """Mission progress since the last upload, clear or start."""

    since: float = field(default_factory=time.monotonic)
    current: int | None = None  # MISSION_CURRENT.seq (1 = the first item after home)
    highest: int = 0  # the highest current item seen (ArduCopter goes back to item 1 when it disarms)
    total: int | None = None  # items after home, from MISSION_CURRENT or our upload/download
    state: int = 0  # MISSION_CURRENT.mission_state (0 when the vehicle does not say)
    reached: dict = field(default_factory=dict)  # seq -> monotonic time of MISSION_ITEM_REACHED
    active_seen: bool = False
    complete_seen: bool = False
    disarmed_after_armed: bool = False
    was_armed: bool = False


class FlightRecorder:
    def __init__(self, link):
        self.link = link
        self.track: deque = deque(maxlen=MAX_POINTS)  # (monotonic t, lat, lon, rel_alt m, alt amsl m)
        self.events: deque = deque(maxlen=5000)  # (monotonic t, kind, text): kind "mode", "armed", "disarmed"
        self.mission: list[dict] | None = None  # the plain records last uploaded or downloaded
        self.progress = MissionProgress()
        self.home: tuple[float, float, float] | None = None
        self.lock = threading.Lock()  # one mission exchange at a time on this link
        self._mode: str | None = None
        self._armed: bool | None = None
        self._last_point = 0.0

    def __call__(self, m) -> None:
        t = m.get_type()
        if t == "GLOBAL_POSITION_INT":
            now = time.monotonic()
            if now - self._last_point >= MIN_POINT_S and (m.lat or m.lon):
                self._last_point = now
                self.track.append((now, m.lat / 1e7, m.lon / 1e7, m.relative_alt / 1000, m.alt / 1000))
        elif t == "HEARTBEAT":
            if m.type == MAV_TYPE_GCS or m.autopilot == MAV_AUTOPILOT_INVALID:  # another GCS, routed to us
                return
            v = self.link.vehicle
            now = time.monotonic()
            if v.mode != self._mode:
                self._mode = v.mode
                self.events.append((now, "mode", v.mode))
            if v.armed != self._armed:
                if self._armed is not None or v.armed:
                    self.events.append((now, "armed" if v.armed else "disarmed", ""))
                self._armed = v.armed
                p = self.progress
                if v.armed:
                    p.was_armed = True
                elif p.was_armed:
                    p.disarmed_after_armed = True
        elif t == "HOME_POSITION":
            self.home = (m.latitude / 1e7, m.longitude / 1e7, m.altitude / 1000)
        elif t == "MISSION_CURRENT":
            p = self.progress
            p.current = m.seq
            if p.was_armed:  # a disarmed vehicle's current item is only where it would start
                p.highest = max(p.highest, m.seq)
            if m.total:
                p.total = m.total
            state = getattr(m, "mission_state", 0) or 0
            p.state = state
            if state == MISSION_STATE_ACTIVE:
                p.active_seen = True
            elif state == MISSION_STATE_COMPLETE and p.active_seen:
                p.complete_seen = True
        elif t == "MISSION_ITEM_REACHED":
            self.progress.reached.setdefault(m.seq, time.monotonic())

    # ---- reading ------------------------------------------------------------------

    def reset_progress(self, total: int | None = None) -> None:
        """A new mission (uploaded, cleared) or a new start: progress counts from now."""
        v = self.link.vehicle
        self.progress = MissionProgress(total=total if total is not None else self.progress.total, was_armed=v.armed)

    def home_or_first(self) -> tuple[float, float, float] | None:
        """Home (HOME_POSITION, else the link's), else the first recorded position."""
        if self.home is not None:
            return self.home
        if self.link.vehicle.home is not None:
            return self.link.vehicle.home
        if self.track:
            _, lat, lon, rel, amsl = self.track[0]
            return (lat, lon, amsl - rel)
        return None

    def points(self, last_s: float | None = None) -> list[tuple]:
        pts = list(self.track)
        if last_s is not None and pts:
            cut = time.monotonic() - last_s
            pts = [p for p in pts if p[0] >= cut]
        return pts

    def events_between(self, t0: float, t1: float | None = None) -> list[tuple]:
        return [e for e in list(self.events) if e[0] >= t0 and (t1 is None or e[0] <= t1)]
