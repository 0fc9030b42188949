"""The MAVLink mission protocol as ArduPilot 4.7 answers it: upload (pulled item by item with
MISSION_REQUEST, asked again after a second of silence, cancelled after 8 s), download, clear,
set-current. Fence and rally lists are empty.

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
# b 1 when not 0, 0 dropped (measured: 1.5, 2.5, 3.5, 4.5 uploaded, downloaded back)
STORED_PARAMS = {
    16: "i000",  # NAV_WAYPOINT: hold time (s)
    17: "00i0",  # NAV_LOITER_UNLIM
    18: "i0ib",  # NAV_LOITER_TURNS
    19: "i0bb",  # NAV_LOITER_TIME
    20: "0000",  # NAV_RETURN_TO_LAUNCH
    21: "i00b",  # NAV_LAND
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


def _f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def _param(op: str, value: float) -> float:
    if op == "f":
        return _f32(value)
    if op == "i":
        return float(int(value)) if value == value and abs(value) < 2**31 else 0.0
    if op == "b":
        return 1.0 if value else 0.0
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

    def timers(self, lk: Link, t: float) -> None:
        """As ArduPilot: ask again every second of silence; give up after 8 s (OPERATION_CANCELLED)."""
        up = lk.upload
        if up is None:
            return
        if t - up.last >= 8.0:
            lk.upload = None
            self.host.send(A.MAVLink_mission_ack_message(*up.to, A.MAV_MISSION_OPERATION_CANCELLED, 0), lk)
            self.host.copter.text(A.MAV_SEVERITY_WARNING, "Mission upload timeout")
        elif t - up.asked >= 1.0:
            up.asked = t
            self.host.send(A.MAVLink_mission_request_message(*up.to, len(up.items), 0), lk)

    def handle(self, t: str, m: Any, lk: Link) -> None:
        c = self.host.copter
        send = self.host.send
        to = (m.get_srcSystem(), m.get_srcComponent())
        mtype = getattr(m, "mission_type", 0)

        def ack(result: int) -> None:
            send(A.MAVLink_mission_ack_message(*to, result, mtype), lk)

        def warn_once(text: str) -> None:
            if text not in lk.warned:
                lk.warned.add(text)
                c.text(A.MAV_SEVERITY_WARNING, text)

        if mtype != A.MAV_MISSION_TYPE_MISSION:
            if t == "MISSION_REQUEST_LIST":
                send(A.MAVLink_mission_count_message(*to, 0, mtype), lk)
            elif t in ("MISSION_CLEAR_ALL",) or (t == "MISSION_COUNT" and m.count == 0):
                ack(A.MAV_MISSION_ACCEPTED)
            elif t in ("MISSION_COUNT", "MISSION_ITEM", "MISSION_ITEM_INT", "MISSION_REQUEST", "MISSION_REQUEST_INT"):
                ack(A.MAV_MISSION_UNSUPPORTED)
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
                        *to, m.seq, it.frame, it.command, 0, it.autocontinue, *it.params, it.lat, it.lon, it.alt, mtype
                    ),
                    lk,
                )
                warn_once("got MISSION_REQUEST; use MISSION_REQUEST_INT!")
        elif t == "MISSION_CLEAR_ALL":
            c.set_mission([])
            ack(A.MAV_MISSION_ACCEPTED)
        elif t == "MISSION_SET_CURRENT":
            if 0 < m.seq < len(c.mission):
                c.mission_seq = m.seq
                c.mission_done = False
                send(c.mission_current())

    def _item(self, t: str, m: Any, lk: Link, ack: Any, warn_once: Any) -> None:
        up = lk.upload
        if up is None:
            ack(A.MAV_MISSION_DENIED)
            return
        if t == "MISSION_ITEM":
            warn_once("got MISSION_ITEM; GCS should send MISSION_ITEM_INT")
        if m.seq == len(up.items):
            item = stored_item(m, t == "MISSION_ITEM_INT")
            if not isinstance(item, MissionItem):  # refused: the upload ends where it is
                lk.upload = None
                ack(item)
                return
            up.items.append(item)
            self.host.copter.store_item(m.seq, item)
        c = self.host.copter
        if len(up.items) < up.count:
            up.last = up.asked = c.t
            self.host.send(A.MAVLink_mission_request_message(*up.to, len(up.items), 0), lk)
            return
        c.set_mission(up.items)
        lk.upload = None
        ack(A.MAV_MISSION_ACCEPTED)
        c.text(A.MAV_SEVERITY_INFO, "Flight plan received")
