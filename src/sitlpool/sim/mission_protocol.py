"""The MAVLink mission protocol as ArduPilot 4.7 answers it: upload (pulled item by item with
MISSION_REQUEST, asked again after a second of silence, cancelled after 8 s), download, clear,
set-current; the fence and rally point lists (MAV_MISSION_TYPE_FENCE and _RALLY) as ArduCopter
4.7 keeps them (measured on the real binary, ``tests/gcs/test_gcs_fence_rally.py``): a fence
upload is checked whole when its last item arrives (AC_PolyFence_loader's texts) and replaces the
fence only then; rally points are written as they arrive, as mission items are.

Items are stored as AP_Mission stores them (measured on ArduCopter 4.7, every frame and
command type): a command with a location (``LOCATION_COMMANDS``) keeps its position and takes
MAV_FRAME_GLOBAL, GLOBAL_RELATIVE_ALT or GLOBAL_TERRAIN_ALT (their _INT twins and
MAV_FRAME_MISSION come back as the float frame: MISSION as GLOBAL); any other frame is refused
with MAV_MISSION_UNSUPPORTED_FRAME. Any other command comes back in MAV_FRAME_GLOBAL with x, y
and z 0, whatever was sent. Each command keeps only the parameters AP_Mission stores, as it
stores them (``STORED_PARAMS``). A command AP_Mission does not know is refused with
MAV_MISSION_UNSUPPORTED. As on ArduPilot, an upload of N items cuts the stored mission to N at
once, and each item replaces (or adds) its number as it arrives: an upload refused or abandoned
midway leaves the new items before that point, then the old ones.
More than ``MAX_ITEMS`` items (any while the vehicle boots) are refused at once with
MAV_MISSION_NO_SPACE and "Only N items are supported"."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from .copter import MissionItem, mavlink
from .links import Host, Link, Upload

A = mavlink
FRAME_STORED = {  # frame sent -> frame stored, for commands with a location
    A.MAV_FRAME_GLOBAL: A.MAV_FRAME_GLOBAL,
    A.MAV_FRAME_MISSION: A.MAV_FRAME_GLOBAL,
    A.MAV_FRAME_GLOBAL_INT: A.MAV_FRAME_GLOBAL,
    A.MAV_FRAME_GLOBAL_RELATIVE_ALT: A.MAV_FRAME_GLOBAL_RELATIVE_ALT,
    A.MAV_FRAME_GLOBAL_RELATIVE_ALT_INT: A.MAV_FRAME_GLOBAL_RELATIVE_ALT,
    A.MAV_FRAME_GLOBAL_TERRAIN_ALT: A.MAV_FRAME_GLOBAL_TERRAIN_ALT,
    A.MAV_FRAME_GLOBAL_TERRAIN_ALT_INT: A.MAV_FRAME_GLOBAL_TERRAIN_ALT,
}
# AP_Mission::stored_in_location: the commands whose x, y, z are a position
LOCATION_COMMANDS = {16, 17, 18, 19, 21, 22, 30, 31, 82, 84, 85, 92, 94, 179, 188, 189, 191, 195, 201}
# What AP_Mission keeps of param1-4, per command: f as sent (float), i truncated to an integer,
# b 1 when not 0, d a direction (-1 below 0, else 1), 0 dropped (measured: 1.5, 2.5, 3.5, 4.5 uploaded, downloaded back)
STORED_PARAMS = {
    16: "i000",  # NAV_WAYPOINT: hold time (s)
    17: "00i0",  # NAV_LOITER_UNLIM
    18: "i0ib",  # NAV_LOITER_TURNS
    19: "i0db",  # NAV_LOITER_TIME (param3: direction, 1 for 0 too, as ArduCopter sends it back)
    20: "0000",  # NAV_RETURN_TO_LAUNCH
    21: "i00d",  # NAV_LAND (param4: a direction, 1 for 0 too)
    22: "i000",  # NAV_TAKEOFF
    82: "i000",  # NAV_SPLINE_WAYPOINT
    92: "i000",  # NAV_GUIDED_ENABLE
    93: "fiii",  # NAV_DELAY
    94: "f000",  # NAV_PAYLOAD_PLACE
    112: "f000",  # CONDITION_DELAY
    114: "f000",  # CONDITION_DISTANCE
    115: "ffii",  # CONDITION_YAW
    177: "ii00",  # DO_JUMP
    178: "iff0",  # DO_CHANGE_SPEED
    179: "i000",  # DO_SET_HOME
    181: "ii00",  # DO_SET_RELAY
    182: "iif0",  # DO_REPEAT_RELAY
    183: "ii00",  # DO_SET_SERVO
    184: "iiif",  # DO_REPEAT_SERVO
    189: "0000",  # DO_LAND_START
    195: "i000",  # DO_SET_ROI_LOCATION
    197: "i000",  # DO_SET_ROI_NONE
    201: "i000",  # DO_SET_ROI
    203: "iiii",  # DO_DIGICAM_CONTROL
    205: "fff0",  # DO_MOUNT_CONTROL
    206: "f0i0",  # DO_SET_CAM_TRIGG_DIST
    207: "i000",  # DO_FENCE_ENABLE
    208: "i000",  # DO_PARACHUTE
    211: "ii00",  # DO_GRIPPER
    212: "i000",  # DO_AUTOTUNE_ENABLE
    213: "ffi0",  # NAV_SET_YAW_SPEED
    215: "i000",  # DO_SET_RESUME_REPEAT_DIST
    216: "i000",  # DO_SPRAYER
    217: "ifff",  # DO_SEND_SCRIPT_MESSAGE
    218: "ii00",  # DO_AUX_FUNCTION
    222: "ifff",  # DO_GUIDED_LIMITS
    223: "ibf0",  # DO_ENGINE_CONTROL
    531: "if00",  # SET_CAMERA_ZOOM
    532: "if00",  # SET_CAMERA_FOCUS
    600: "i000",  # JUMP_TAG
    601: "ii00",  # DO_JUMP_TAG
    1000: "iiii",  # DO_GIMBAL_MANAGER_PITCHYAW
    2000: "ifii",  # IMAGE_START_CAPTURE
    2500: "i000",  # VIDEO_START_CAPTURE
    42600: "iiff",  # DO_WINCH
    42702: "iiff",  # NAV_SCRIPT_TIME
    42703: "iiii",  # NAV_ATTITUDE_TIME
}
MAX_ITEMS = 650  # what ArduCopter 4.7 SITL's storage holds (home included)
# commands AP_Mission knows that were not measured one by one: stored with every parameter
OTHER_KNOWN = {30, 31, 83, 84, 85, 188, 191, 202, 204, 210, 2001, 2501, 3000}


# ---- fence and rally points (measured on ArduCopter 4.7 SITL) ---------------------------------
FENCE_MAX_ITEMS = 70  # "Only 70 items are supported" (its storage's bytes / 8)
FENCE_STORAGE_BYTES = 560  # "Fence exceeds storage size" beyond: 4 bytes of header, the items, 1 byte of end
RALLY_MAX_ITEMS = 46  # "Only 46 items are supported"
FENCE_FRAMES = {0, 3, 5, 6, 10, 11}  # any global frame; stored and sent back as MAV_FRAME_GLOBAL
RALLY_FRAME_STORED = {0: 0, 5: 0, 3: 3, 6: 3, 10: 10, 11: 10}  # kept: absolute, relative or terrain
# NAV_FENCE_* -> AC_PolyFenceType (the numbers its texts name)
FENCE_TYPES = {5001: 98, 5002: 97, 5003: 92, 5004: 93, 5000: 95}
POLYGONS, CIRCLES, RETURN_POINT = {5001, 5002}, {5003, 5004}, 5000
LIST_NAMES = {0: "Mission", 1: "Fence", 2: "Rally"}


@dataclass
class TypedUpload(Upload):
    """An upload of one of the three lists (``mtype``: MAV_MISSION_TYPE)."""

    mtype: int = 0


def _latlon(m: Any, use_int: bool) -> tuple[float, float]:
    if use_int:
        return m.x / 1e7, m.y / 1e7
    # ArduPilot converts float degrees in single precision: keep what it keeps
    return _f32(_f32(m.x) * 1e7) / 1e7, _f32(_f32(m.y) * 1e7) / 1e7


def fence_item(m: Any, use_int: bool) -> MissionItem | int:
    """What AC_PolyFence_loader keeps of a fence item (vertex count or radius, position), or the
    MAV_MISSION_RESULT it refuses it with at once."""
    cmd = int(m.command)
    if cmd not in FENCE_TYPES:
        return A.MAV_MISSION_UNSUPPORTED
    if m.frame not in FENCE_FRAMES:
        return A.MAV_MISSION_UNSUPPORTED_FRAME
    p1 = m.param1 if m.param1 == m.param1 else 0.0
    p1 = float(int(p1)) if cmd in POLYGONS and abs(p1) < 2**31 else (_f32(p1) if cmd in CIRCLES else 0.0)
    return MissionItem(cmd, *_latlon(m, use_int), 0.0, (float(p1), 0.0, 0.0, 0.0), A.MAV_FRAME_GLOBAL, 0)


def fence_problem(items: list[MissionItem]) -> str | None:
    """AC_PolyFence_loader::validate_fence's text for a fence it refuses (MAV_MISSION_ERROR)."""
    left = want_count = want_type = 0
    seen_return = False
    for it in items:
        kind = FENCE_TYPES[it.command]
        if it.command in POLYGONS:
            count = int(it.params[0])
            if count < 3:
                return f"Invalid vertex count ({count})"
            if not left:
                left, want_count, want_type = count - 1, count, kind
            else:
                left -= 1
                if count != want_count:
                    return f"Unexpected vertex count want={want_count} got={count}"
                if kind != want_type:
                    return f"Received incorrect vertex type (want={want_type} got={kind})"
        else:
            if left:
                return f"Received incorrect type (want={want_type} got={kind})"
            if it.command in CIRCLES and not it.params[0] > 0:
                return "Non-positive circle radius"
            if it.command == RETURN_POINT:
                if seen_return:
                    return "Multiple return points"
                seen_return = True
        if not (abs(it.lat) <= 90 and abs(it.lon) <= 180):
            return "Bad lat or lon"
    if left:
        return "Incorrect item count"
    used = 4 + 1 + sum(13 if it.command in CIRCLES else (9 if it.command == RETURN_POINT else 0) for it in items)
    used += sum(2 + 8 * int(it.params[0]) for i, it in enumerate(items) if it.command in POLYGONS and _starts(items, i))
    return "Fence exceeds storage size" if used > FENCE_STORAGE_BYTES else None


def _starts(items: list[MissionItem], i: int) -> bool:
    """Item ``i`` is the first vertex of its polygon (a checked fence)."""
    j = 0
    while j < i:
        j += int(items[j].params[0]) if items[j].command in POLYGONS else 1
    return j == i


def rally_item(m: Any, use_int: bool) -> MissionItem | int:
    """What AP_Rally keeps of a rally point (position, whole metres in its frame), or the
    MAV_MISSION_RESULT it refuses it with."""
    if int(m.command) != A.MAV_CMD_NAV_RALLY_POINT:
        return A.MAV_MISSION_UNSUPPORTED
    frame = RALLY_FRAME_STORED.get(m.frame)
    if frame is None:
        return A.MAV_MISSION_UNSUPPORTED_FRAME
    lat, lon = _latlon(m, use_int)
    if not abs(lat) <= 90:
        return A.MAV_MISSION_INVALID_PARAM5_X
    if not abs(lon) <= 180:
        return A.MAV_MISSION_INVALID_PARAM6_Y
    if not -32768 <= m.z <= 32767:  # kept in an int16 of metres
        return A.MAV_MISSION_INVALID_PARAM7
    return MissionItem(A.MAV_CMD_NAV_RALLY_POINT, lat, lon, float(int(m.z)), (0.0, 0.0, 0.0, 0.0), frame, 0)


def _float_degrees(it: MissionItem) -> tuple[float, float]:
    """A stored position as ArduPilot sends it in a MISSION_ITEM: its degE7 integers made single
    precision floats, times 1e-7."""
    return _f32(_f32(round(it.lat * 1e7)) * 1e-7), _f32(_f32(round(it.lon * 1e7)) * 1e-7)


def _f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def _param(op: str, value: float) -> float:
    if op == "f":
        return _f32(value)
    if op == "i":
        return float(int(value)) if value == value and abs(value) < 2**31 else 0.0
    if op == "b":
        return 1.0 if value else 0.0
    if op == "d":
        return -1.0 if value < 0 else 1.0
    return 0.0


def stored_item(m: Any, use_int: bool) -> MissionItem | int:
    """The item AP_Mission would store for MISSION_ITEM(_INT) ``m``, or the MAV_MISSION_RESULT
    it refuses it with."""
    cmd = int(m.command)
    known = cmd in STORED_PARAMS or cmd in OTHER_KNOWN or cmd in LOCATION_COMMANDS
    if not known:
        return A.MAV_MISSION_UNSUPPORTED
    sent = (m.param1, m.param2, m.param3, m.param4)
    ops = STORED_PARAMS.get(cmd, "ffff")
    params = (_param(ops[0], sent[0]), _param(ops[1], sent[1]), _param(ops[2], sent[2]), _param(ops[3], sent[3]))
    if cmd not in LOCATION_COMMANDS:
        return MissionItem(cmd, 0.0, 0.0, 0.0, params, A.MAV_FRAME_GLOBAL, m.autocontinue)
    frame = FRAME_STORED.get(m.frame)
    if frame is None:
        return A.MAV_MISSION_UNSUPPORTED_FRAME
    if use_int:
        lat, lon = m.x / 1e7, m.y / 1e7
    else:  # ArduPilot converts float degrees in single precision: keep what it keeps
        lat, lon = _f32(_f32(m.x) * 1e7) / 1e7, _f32(_f32(m.y) * 1e7) / 1e7
    return MissionItem(cmd, lat, lon, _f32(m.z), params, frame, m.autocontinue)


class MissionProtocol:
    """Answers one simulator's MISSION_* messages (``handle``) and runs the upload timers."""

    MESSAGES = (
        "MISSION_COUNT",
        "MISSION_ITEM",
        "MISSION_ITEM_INT",
        "MISSION_REQUEST_LIST",
        "MISSION_REQUEST",
        "MISSION_REQUEST_INT",
        "MISSION_CLEAR_ALL",
        "MISSION_SET_CURRENT",
    )

    def __init__(self, host: Host):
        self.host = host
        self.fence: list[MissionItem] = []
        self.rally: list[MissionItem] = []
        host.copter.rally_items = lambda: list(self.rally)  # where RTL may go (navigation.py)

    def timers(self, lk: Link, t: float) -> None:
        """As ArduPilot: ask again every second of silence; give up after 8 s (OPERATION_CANCELLED)."""
        up = lk.upload
        if up is None:
            return
        mtype = getattr(up, "mtype", 0)
        if t - up.last >= 8.0:
            lk.upload = None
            self.host.send(A.MAVLink_mission_ack_message(*up.to, A.MAV_MISSION_OPERATION_CANCELLED, mtype), lk)
            self.host.copter.text(A.MAV_SEVERITY_WARNING, f"{LIST_NAMES[mtype]} upload timeout")
        elif t - up.asked >= 1.0:
            up.asked = t
            self.host.send(A.MAVLink_mission_request_message(*up.to, len(up.items), mtype), lk)

    def handle(self, t: str, m: Any, lk: Link) -> None:
        c = self.host.copter
        send = self.host.send
        to = (m.get_srcSystem(), m.get_srcComponent())
        mtype = getattr(m, "mission_type", 0)

        def ack(result: int) -> None:
            send(A.MAVLink_mission_ack_message(*to, result, mtype), lk)

        def warn_once(key: str) -> None:  # once per link and list (a key ends "#<mission type>")
            if key not in lk.warned:
                lk.warned.add(key)
                c.text(A.MAV_SEVERITY_WARNING, key.split("#")[0])

        if mtype not in LIST_NAMES:
            if t != "MISSION_SET_CURRENT":
                ack(A.MAV_MISSION_UNSUPPORTED)
            return
        if mtype != A.MAV_MISSION_TYPE_MISSION:
            self._fence_or_rally(t, m, lk, mtype, ack, warn_once)
            return
        if t == "MISSION_COUNT":
            if m.count == 0:
                c.set_mission([])
                ack(A.MAV_MISSION_ACCEPTED)
                return
            room = 0 if c.booting else MAX_ITEMS  # AP_Mission's storage is not ready while it boots
            if m.count > room:
                ack(A.MAV_MISSION_NO_SPACE)
                c.text(A.MAV_SEVERITY_WARNING, f"Only {room} items are supported")  # after the ACK, as ArduPilot
                return
            c.truncate_mission(m.count)
            lk.upload = Upload(m.count, to, c.t, c.t)
            send(A.MAVLink_mission_request_message(*to, 0, mtype), lk)
        elif t in ("MISSION_ITEM", "MISSION_ITEM_INT"):
            self._item(t, m, lk, ack, warn_once)
        elif t == "MISSION_REQUEST_LIST":
            send(A.MAVLink_mission_count_message(*to, len(c.mission), mtype), lk)
        elif t in ("MISSION_REQUEST", "MISSION_REQUEST_INT"):
            if not 0 <= m.seq < len(c.mission):
                ack(A.MAV_MISSION_INVALID_SEQUENCE)
                return
            it = c.mission[m.seq]
            if m.seq == 0:  # home, as ArduPilot reports it
                it = MissionItem(A.MAV_CMD_NAV_WAYPOINT, *c.latlon(home=True), c.home_alt, frame=A.MAV_FRAME_GLOBAL)
            if t == "MISSION_REQUEST_INT":
                lat, lon = int(round(it.lat * 1e7)), int(round(it.lon * 1e7))
                send(
                    A.MAVLink_mission_item_int_message(
                        *to, m.seq, it.frame, it.command, 0, it.autocontinue, *it.params, lat, lon, it.alt, mtype
                    ),
                    lk,
                )
            else:
                send(
                    A.MAVLink_mission_item_message(
                        *to,
                        m.seq,
                        it.frame,
                        it.command,
                        0,
                        it.autocontinue,
                        *it.params,
                        *_float_degrees(it),
                        it.alt,
                        mtype,
                    ),
                    lk,
                )
                warn_once("got MISSION_REQUEST; use MISSION_REQUEST_INT!#0")
        elif t == "MISSION_CLEAR_ALL":
            c.set_mission([])
            ack(A.MAV_MISSION_ACCEPTED)
        elif t == "MISSION_SET_CURRENT":
            if 0 < m.seq < len(c.mission):
                c.mission_seq = m.seq
                c.mission_done = False
                send(c.mission_current())

    def _fence_or_rally(self, t: str, m: Any, lk: Link, mtype: int, ack: Any, warn_once: Any) -> None:
        """The fence (checked whole, then stored at once) and rally point (stored as they come) lists."""
        c, send = self.host.copter, self.host.send
        to = (m.get_srcSystem(), m.get_srcComponent())
        fence = mtype == A.MAV_MISSION_TYPE_FENCE
        stored = self.fence if fence else self.rally
        if t == "MISSION_COUNT":
            room = FENCE_MAX_ITEMS if fence else RALLY_MAX_ITEMS
            if m.count > room:
                ack(A.MAV_MISSION_NO_SPACE)
                c.text(A.MAV_SEVERITY_WARNING, f"Only {room} items are supported")
                return
            if not fence:
                del self.rally[m.count :]
            if m.count == 0:
                if fence:
                    self.fence = []
                    c.text(A.MAV_SEVERITY_INFO, "Fence Indexed OK")
                ack(A.MAV_MISSION_ACCEPTED)
                return
            lk.upload = TypedUpload(m.count, to, c.t, c.t, mtype=mtype)
            send(A.MAVLink_mission_request_message(*to, 0, mtype), lk)
        elif t in ("MISSION_ITEM", "MISSION_ITEM_INT"):
            self._item(t, m, lk, ack, warn_once)
        elif t == "MISSION_REQUEST_LIST":
            send(A.MAVLink_mission_count_message(*to, len(stored), mtype), lk)
        elif t in ("MISSION_REQUEST", "MISSION_REQUEST_INT"):
            if not 0 <= m.seq < len(stored):
                ack(A.MAV_MISSION_INVALID_SEQUENCE)
                return
            it = stored[m.seq]
            head = (*to, m.seq, it.frame, it.command, 0, it.autocontinue, *it.params)
            if t == "MISSION_REQUEST_INT":
                lat, lon = int(round(it.lat * 1e7)), int(round(it.lon * 1e7))
                send(A.MAVLink_mission_item_int_message(*head, lat, lon, it.alt, mtype), lk)
            else:
                send(A.MAVLink_mission_item_message(*head, *_float_degrees(it), it.alt, mtype), lk)
                warn_once(f"got MISSION_REQUEST; use MISSION_REQUEST_INT!#{mtype}")
        elif t == "MISSION_CLEAR_ALL":
            if fence:
                self.fence = []
                c.text(A.MAV_SEVERITY_INFO, "Fence Indexed OK")
            else:
                self.rally = []
            ack(A.MAV_MISSION_ACCEPTED)

    def _item(self, t: str, m: Any, lk: Link, ack: Any, warn_once: Any) -> None:
        up = lk.upload
        mtype = getattr(m, "mission_type", 0)
        if up is None or getattr(up, "mtype", 0) != mtype:
            ack(A.MAV_MISSION_DENIED if mtype == A.MAV_MISSION_TYPE_MISSION else A.MAV_MISSION_ERROR)
            return
        if t == "MISSION_ITEM":
            warn_once(f"got MISSION_ITEM; GCS should send MISSION_ITEM_INT#{mtype}")
        if m.seq == len(up.items):
            read = {A.MAV_MISSION_TYPE_FENCE: fence_item, A.MAV_MISSION_TYPE_RALLY: rally_item}.get(mtype, stored_item)
            item = read(m, t == "MISSION_ITEM_INT")
            if not isinstance(item, MissionItem):  # refused: the upload ends where it is
                lk.upload = None
                ack(item)
                return
            up.items.append(item)
            if mtype == A.MAV_MISSION_TYPE_MISSION:
                self.host.copter.store_item(m.seq, item)
            elif mtype == A.MAV_MISSION_TYPE_RALLY:  # written as it comes, as AP_Rally does
                self.rally[m.seq : m.seq + 1] = [item]
        c = self.host.copter
        if len(up.items) < up.count:
            up.last = up.asked = c.t
            self.host.send(A.MAVLink_mission_request_message(*up.to, len(up.items), mtype), lk)
            return
        lk.upload = None
        if mtype == A.MAV_MISSION_TYPE_FENCE:
            problem = fence_problem(up.items)
            if problem:
                c.text(A.MAV_SEVERITY_WARNING, problem)
                ack(A.MAV_MISSION_ERROR)
                return
            self.fence = list(up.items)
            c.text(A.MAV_SEVERITY_INFO, "Fence Indexed OK")
        if mtype != A.MAV_MISSION_TYPE_MISSION:
            ack(A.MAV_MISSION_ACCEPTED)
            return
        c.set_mission(up.items)
        ack(A.MAV_MISSION_ACCEPTED)
        c.text(A.MAV_SEVERITY_INFO, "Flight plan received")
