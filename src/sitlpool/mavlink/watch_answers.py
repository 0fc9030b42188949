"""What a read-only watcher's messages get (``sitlpool.mavlink.forward``'s other half).

Commands that would change the vehicle are dropped, answered with a COMMAND_ACK ``DENIED``
(or a MISSION_ACK ``DENIED``) where the protocol has one, and the watcher is told why in a
STATUSTEXT (one every ``TEXT_EVERY_S``). Requests that change nothing are answered without a
second exchange racing the agent's on the same link:

- parameters from a cache of every PARAM_VALUE the link saw; an incomplete cache is filled
  once by reading the list over the link (read-only; the values pass through the agent's
  link as any PARAM_VALUE does: ``VehicleLink.set_param`` waits for its own answer);
- the mission, fence and rally points by a download under the link's mission lock
  (``FlightRecorder.lock``), the lock every mission exchange of the agent takes: the two never
  interleave (an agent's upload waits for a download of a few hundred ms at most);
- MAVLink FTP is refused with a NAK (its sessions are the link's, shared with the agent):
  ground stations fall back to the parameter and mission protocols.
"""

from __future__ import annotations

import copy
import logging
import queue
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

from ..errors import MavlinkError
from . import mission, params
from .link import A, VehicleLink
from .recorder import recorder_for

log = logging.getLogger("sitlpool.watch")

ASKS_PER_S = 5  # requests of one watcher passed on to the vehicle
TEXT_EVERY_S = 2.0  # refusal STATUSTEXTs to one watcher
MISSION_LOCK_S = 30.0  # wait at most this for the agent's mission exchange to end
PARAM_BURST = 25  # cached PARAM_VALUEs sent at once, then a pause of PARAM_PAUSE_S
PARAM_PAUSE_S = 0.01
FTP_NAK, FTP_ERR_FAIL = 129, 1
OWN_COMPONENT = 1  # answers from sitlpool come as the autopilot's (the watcher asked it)

# messages that would change the vehicle: dropped read-only, the watcher told why
CHANGES = set(
    """
    COMMAND_LONG COMMAND_INT SET_MODE PARAM_SET PARAM_EXT_SET MISSION_COUNT MISSION_ITEM
    MISSION_ITEM_INT MISSION_CLEAR_ALL MISSION_SET_CURRENT MISSION_WRITE_PARTIAL_LIST
    RC_CHANNELS_OVERRIDE MANUAL_CONTROL SET_POSITION_TARGET_LOCAL_NED SET_POSITION_TARGET_GLOBAL_INT
    SET_ATTITUDE_TARGET SET_ACTUATOR_CONTROL_TARGET SET_HOME_POSITION SET_GPS_GLOBAL_ORIGIN
    FENCE_POINT RALLY_POINT LOG_ERASE GPS_INJECT_DATA GPS_RTCM_DATA
    MOUNT_CONTROL DIGICAM_CONTROL LED_CONTROL
    """.split()
)
# commands that only ask the vehicle to say something: forwarded read-only (their answer and
# ACK reach every client of the link; the agent matches ACKs by command, never these)
ASKS = {
    A.MAV_CMD_REQUEST_MESSAGE,
    A.MAV_CMD_REQUEST_AUTOPILOT_CAPABILITIES,
    A.MAV_CMD_REQUEST_PROTOCOL_VERSION,
    A.MAV_CMD_GET_HOME_POSITION,
}
# commands read-only refuses without a STATUSTEXT: stream rates are the link's, shared with the agent
QUIET_REFUSALS = {A.MAV_CMD_SET_MESSAGE_INTERVAL, A.MAV_CMD_GET_MESSAGE_INTERVAL}


@dataclass(eq=False)
class Watcher:
    """One ground station: a UDP output, or one TCP connection to a tcpin output."""

    sock: socket.socket
    name: str
    tcp: bool
    parser: A.MAVLink = field(default_factory=lambda: _parser())
    out: bytearray = field(default_factory=bytearray)  # TCP bytes not yet sent
    sysid: int = 0  # what the watcher calls itself (from its messages)
    compid: int = 0
    window: float = 0.0  # the start of the current second of reading
    read: int = 0  # bytes read in it
    paused_until: float = 0.0  # a flood: unread until then
    last_text: float = 0.0
    texts_sent: int = 0  # STATUSTEXTs of ours to it: each long one's chunks carry this as their id
    ask_window: float = 0.0  # the start of the current second of requests passed on
    asked: int = 0
    refused: int = 0  # messages dropped read-only
    missions: dict = field(default_factory=dict)  # mission type -> the vehicle's items as downloaded
    closed: bool = False


TEXT_CHUNK = 50  # STATUSTEXT's text field


def statustexts(severity: int, text: str, msg_id: int) -> list:
    """``text`` as STATUSTEXT messages: one if it fits, else MAVLink 2's chunks of 50 bytes
    sharing a nonzero ``id`` with ``chunk_seq`` 0, 1, ... (ground stations join them; a text
    that fills its last chunk exactly is ended by an empty one, as the spec's reader expects a NUL)."""
    data = text.encode()
    if len(data) <= TEXT_CHUNK:
        return [A.MAVLink_statustext_message(severity, data)]
    chunks = [data[i : i + TEXT_CHUNK] for i in range(0, len(data), TEXT_CHUNK)]
    if len(chunks[-1]) == TEXT_CHUNK:
        chunks.append(b"")
    msg_id = (msg_id - 1) % 65535 + 1  # never 0: that means a text of one message
    return [A.MAVLink_statustext_message(severity, c, msg_id, i) for i, c in enumerate(chunks)]


def _parser():
    p = A.MAVLink(None)
    p.robust_parsing = True
    return p


class Answers:
    """The read-only half of ``Forwarder``: what it does with a watcher's messages."""

    link: VehicleLink
    control: bool
    _stop: threading.Event
    _jobs: queue.Queue
    _params: dict[str, tuple[float, int, int, int]]
    _by_index: dict[int, str]
    _param_count: int | None

    def _send_to(self, w: Watcher, msg) -> None:
        raise NotImplementedError

    # ---- what a watcher sends -------------------------------------------------------

    def _from_watcher(self, w: Watcher, m) -> None:
        t = m.get_type()
        if t == "HEARTBEAT":
            return  # never: the vehicle's GCS failsafe watches the agent's heartbeat, not ours
        if self.control:
            self.link.send(m)
            return
        if t == "PARAM_REQUEST_LIST":
            self._job(("params", w))
        elif t == "PARAM_REQUEST_READ":
            self._param_read(w, m)
        elif t == "MISSION_REQUEST_LIST":
            self._job(("mission", w, getattr(m, "mission_type", 0) or 0))
        elif t in ("MISSION_REQUEST_INT", "MISSION_REQUEST"):
            self._mission_item(w, m, t == "MISSION_REQUEST_INT")
        elif t in ("COMMAND_LONG", "COMMAND_INT") and m.command in ASKS and self._may_ask(w):
            self.link.send(m)
        elif t in ("COMMAND_LONG", "COMMAND_INT"):
            self._send_to(w, A.MAVLink_command_ack_message(m.command, A.MAV_RESULT_DENIED, 0, 0, w.sysid, w.compid))
            if m.command not in QUIET_REFUSALS and m.command not in ASKS:
                name = A.enums["MAV_CMD"][m.command].name if m.command in A.enums["MAV_CMD"] else str(m.command)
                self._refuse(w, name.removeprefix("MAV_CMD_"))
        elif t == "FILE_TRANSFER_PROTOCOL":
            self._ftp_nak(w, m)
        elif t in CHANGES:
            self._refuse(w, t)
            if t in ("MISSION_COUNT", "MISSION_CLEAR_ALL"):
                mtype = getattr(m, "mission_type", 0) or 0
                ack = A.MAVLink_mission_ack_message(w.sysid, w.compid, A.MAV_MISSION_DENIED, mtype)
                self._send_to(w, ack)
        # anything else (REQUEST_DATA_STREAM, TIMESYNC, SYSTEM_TIME, ...) is the watcher's own business

    @staticmethod
    def _may_ask(w: Watcher) -> bool:
        """A request passed on to the vehicle: at most ASKS_PER_S a second per watcher (the
        answers share the agent's link; the link keeps its last 20 COMMAND_ACKs)."""
        now = time.monotonic()
        if now - w.ask_window >= 1.0:
            w.ask_window, w.asked = now, 0
        w.asked += 1
        return w.asked <= ASKS_PER_S

    def _refuse(self, w: Watcher, what: str) -> None:
        w.refused += 1
        now = time.monotonic()
        if now - w.last_text < TEXT_EVERY_S:
            return
        w.last_text = now
        w.texts_sent += 1
        for msg in statustexts(A.MAV_SEVERITY_WARNING, f"sitlpool: read-only watch, {what} dropped", w.texts_sent):
            self._send_to(w, msg)

    def _ftp_nak(self, w: Watcher, m) -> None:
        """MAVLink FTP is refused (NAK, ERR_Fail): its sessions are the link's, which the agent
        shares; ground stations then read parameters and missions by their own protocols."""
        req = bytes(m.payload[:12]).ljust(12, b"\0")
        seq, session, opcode = struct.unpack_from("<HBB", req)
        head = struct.pack("<HBBBBBBI", (seq + 1) % 65536, session, FTP_NAK, 1, opcode, 0, 0, 0)
        payload = list(head + bytes([FTP_ERR_FAIL])) + [0] * (251 - len(head) - 1)
        self._send_to(w, A.MAVLink_file_transfer_protocol_message(0, w.sysid, w.compid, payload))

    def _job(self, job) -> None:
        try:
            self._jobs.put_nowait(job)
        except queue.Full:  # a watcher asking again and again: its earlier requests will answer
            pass

    def _param_message(self, w: Watcher, name: str):
        value, ptype, idx, cnt = self._params[name]
        return A.MAVLink_param_value_message(name.encode(), value, ptype, self._param_count or cnt, idx)

    def _param_read(self, w: Watcher, m) -> None:
        name = m.param_id.decode(errors="replace") if isinstance(m.param_id, bytes) else m.param_id
        name = name.rstrip("\x00")
        if m.param_index >= 0:
            name = self._by_index.get(m.param_index, "")
        if name and name in self._params:
            self._send_to(w, self._param_message(w, name))
            return
        if not self._may_ask(w):
            return
        # not known yet: the vehicle is asked (it changes nothing); its answer passes through the link
        pid = m.param_id.encode() if isinstance(m.param_id, str) else m.param_id
        self.link.send(A.MAVLink_param_request_read_message(self.link.vehicle.sysid or 1, 1, pid, m.param_index))

    def _mission_item(self, w: Watcher, m, as_int: bool) -> None:
        items = w.missions.get(getattr(m, "mission_type", 0) or 0)
        if items is None or not 0 <= m.seq < len(items):
            return
        item = copy.copy(items[m.seq])
        item.target_system, item.target_component = w.sysid, w.compid
        if as_int != (item.get_type() == "MISSION_ITEM_INT"):
            scale = 1e7 if as_int else 1e-7
            x, y = (round(item.x * scale), round(item.y * scale)) if as_int else (item.x * scale, item.y * scale)
            make = A.MAVLink_mission_item_int_message if as_int else A.MAVLink_mission_item_message
            item = make(
                w.sysid, w.compid, item.seq, item.frame, item.command, item.current, item.autocontinue,
                item.param1, item.param2, item.param3, item.param4, x, y, item.z, item.mission_type,
            )  # fmt: skip
        self._send_to(w, item)

    # ---- the answering thread: parameter lists and mission downloads ---------------

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                job = self._jobs.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                if job[0] == "params":
                    self._serve_params(job[1])
                else:
                    self._serve_mission(job[1], job[2])
            except MavlinkError as e:
                log.info("%s: a watcher's request was not answered: %s", self.link.name, e)
            except Exception:  # pragma: no cover - never the link's problem
                log.exception("%s: answering a watcher failed", self.link.name)

    def _complete(self) -> bool:
        n = self._param_count
        return n is not None and len(self._by_index) >= n

    def _serve_params(self, w: Watcher) -> None:
        if not self._complete():
            # the whole list, once, over the link (read-only): its values reach the watcher as they come
            params.get_all(self.link)
            return
        names = [self._by_index[i] for i in sorted(self._by_index)]
        for i, name in enumerate(names):
            if self._stop.is_set() or w.closed:
                return
            self._send_to(w, self._param_message(w, name))
            if i % PARAM_BURST == PARAM_BURST - 1:
                time.sleep(PARAM_PAUSE_S)

    def _serve_mission(self, w: Watcher, mtype: int) -> None:
        if mtype not in mission.LISTS:
            self._send_to(w, A.MAVLink_mission_ack_message(w.sysid, w.compid, A.MAV_MISSION_UNSUPPORTED, mtype))
            return
        rec = recorder_for(self.link)
        if not rec.lock.acquire(timeout=MISSION_LOCK_S):  # the agent's exchange first, never interleaved
            raise MavlinkError("the agent's mission exchange did not end")
        try:
            items = mission._download_raw(self.link, time.monotonic() + mission.DOWNLOAD_TIMEOUT_S, mtype)
        finally:
            rec.lock.release()
        w.missions[mtype] = items
        self._send_to(w, A.MAVLink_mission_count_message(w.sysid, w.compid, len(items), mtype))
