"""The flight recorder: what one link saw, kept for pictures and for mission status, and
what it was asked, kept for a session's recipe.

It is a listener on the session's one ``VehicleLink`` (no second MAVLink path): positions
(at most 5 a second, two hours of them), mode changes and arm/disarm, mission progress
(MISSION_CURRENT, MISSION_ITEM_REACHED), the vehicle's clock (``time_boot_ms``), and the
flight calls sent on the link (``calls``: arm, disarm, set_mode, takeoff, land, rtl as the
vehicle accepted them, goto and set_param as sent), each stamped with the vehicle's sim time,
so that a session can be flown again as a step program. ``recorder_for(link)`` attaches one
per link on first use; sessions attach it when they open, so the picture starts with the
session. Listeners run on the link thread: every update here is a few appends, never a wait.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field

from pymavlink.dialects.v20 import ardupilotmega as A

from .modes import mode_name

MIN_POINT_S = 0.2  # record at most 5 positions a second
MAX_POINTS = 36_000  # two hours of them
MISSION_STATE_ACTIVE, MISSION_STATE_COMPLETE = 3, 5
MAV_TYPE_GCS, MAV_AUTOPILOT_INVALID = 6, 8
MAX_CALLS = 20_000
FORCE_MAGIC = 21196  # MAV_CMD_COMPONENT_ARM_DISARM's param2 that forces it
GOTO_MASK = 0b110111111000  # SET_POSITION_TARGET_GLOBAL_INT with a position only: the goto tool's
log = logging.getLogger("sitlpool.recorder")

_recorders: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()


def recorder_for(link) -> FlightRecorder:
    """The recorder of ``link``, attached as its listener on first use."""
    with _registry_lock:
        rec = _recorders.get(link)
        if rec is None:
            rec = _recorders[link] = FlightRecorder(link)
            link.add_listener(rec)
            _listen_to_sends(link, rec.sent)
        return rec


def _listen_to_sends(link, fn) -> None:
    """``fn(msg)`` for each message the link sends, just before it goes (the link's
    ``add_send_listener`` where it has one; else its ``_send`` wrapped on this link object alone)."""
    hook = getattr(link, "add_send_listener", None)
    if hook is not None:
        hook(fn)
        return
    send = getattr(link, "_send", None)
    if send is None:
        return

    def sending(msg) -> None:
        try:  # before it goes: a command's ACK may come back before send returns
            fn(msg)
        except Exception:  # the recorder's bug must never fail a send
            log.exception("recording a sent %s", msg.get_type())
        send(msg)

    link._send = sending


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
        self.calls: deque = deque(maxlen=MAX_CALLS)  # {"sim_time_s", "tool", arguments...}
        self.sim_ms: int | None = None  # the vehicle's time_boot_ms, the latest
        self.first_sim_ms: int | None = None  # ... the first this link saw
        self._pending: dict[int, dict] = {}  # command id -> its call, until the vehicle's ACK
        self._calls_lock = threading.Lock()

    def __call__(self, m) -> None:
        t = m.get_type()
        tb = getattr(m, "time_boot_ms", None)
        if tb is not None and t in ("SYSTEM_TIME", "GLOBAL_POSITION_INT", "ATTITUDE"):
            self.sim_ms = tb
            if self.first_sim_ms is None:
                self.first_sim_ms = tb
        if t == "COMMAND_ACK":
            self._acked(m.command, m.result)
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

    # ---- what was asked ------------------------------------------------------------

    def sim_time_s(self) -> float | None:
        return None if self.sim_ms is None else round(self.sim_ms / 1000, 3)

    def _call(self, tool: str, **args) -> dict:
        return {"sim_time_s": self.sim_time_s(), "tool": tool, **args}

    def sent(self, msg) -> None:
        """A message the link is sending: the flight call it is, if it is one (on the sender's
        thread, before it goes: a command waits here for its ACK to be kept)."""
        t = msg.get_type()
        call = None
        if t in ("COMMAND_LONG", "COMMAND_INT"):
            c = msg.command
            if t == "COMMAND_LONG" and getattr(msg, "confirmation", 0):
                return  # a retransmission of a command already pending
            if c == A.MAV_CMD_COMPONENT_ARM_DISARM:
                force = round(msg.param2) == FORCE_MAGIC
                call = self._call("arm" if msg.param1 >= 0.5 else "disarm", **({"force": True} if force else {}))
            elif c == A.MAV_CMD_DO_SET_MODE:
                call = self._call("set_mode", mode=mode_name(self.link.vehicle.vehicle_type, int(msg.param2)))
            elif c == A.MAV_CMD_NAV_TAKEOFF and t == "COMMAND_LONG":
                call = self._call("takeoff", altitude_m=round(float(msg.param7), 3))
            elif c == A.MAV_CMD_NAV_LAND:
                call = self._call("land")
            elif c == A.MAV_CMD_NAV_RETURN_TO_LAUNCH:
                call = self._call("rtl")
            if call is not None:
                with self._calls_lock:
                    self._pending[c] = call  # kept once the vehicle accepts it
            return
        if t == "SET_POSITION_TARGET_GLOBAL_INT" and msg.type_mask == GOTO_MASK:
            call = self._call("goto", lat=msg.lat_int / 1e7, lon=msg.lon_int / 1e7, altitude_m=round(float(msg.alt), 3))
        elif t == "PARAM_SET":
            name = msg.param_id.decode() if isinstance(msg.param_id, bytes) else str(msg.param_id)
            call = self._call("set_param", name=name.rstrip("\x00"), value=float(msg.param_value))
        if call is not None:
            with self._calls_lock:
                self.calls.append(call)

    def _acked(self, command: int, result: int) -> None:
        if result == A.MAV_RESULT_IN_PROGRESS:
            return
        with self._calls_lock:
            call = self._pending.pop(command, None)
            if call is not None and result == A.MAV_RESULT_ACCEPTED:
                self.calls.append(call)  # a refused call changed nothing: not one to fly again

    def recorded_calls(self) -> list[dict]:
        with self._calls_lock:
            return list(self.calls)

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
