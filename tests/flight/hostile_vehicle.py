"""A small MAVLink vehicle on a real TCP socket (pymavlink), for the protocol exchanges a
real vehicle will not misbehave in on demand: it keeps parameters and a mission as
ArduPilot does (an upload replaces the stored mission item by item, so a failed one leaves
it mixed) and can be told to be hostile: refuse a parameter, fail an upload at an item,
ask for item 0 forever, announce 65,535 items, send the wrong item again and again."""

from __future__ import annotations

import os
import socket
import threading
import time

os.environ.setdefault("MAVLINK20", "1")
from pymavlink.dialects.v20 import ardupilotmega as A  # noqa: E402


class HostileVehicle:
    def __init__(self, params: dict[str, tuple[float, int]] | None = None):
        self.params = {k: [v, t] for k, (v, t) in (params or {}).items()}
        self.param_sets: list[tuple[str, float]] = []  # every PARAM_SET received, in order
        self.refuse: set[str] = set()  # PARAM_SET of these names is ignored (the old value answered)
        self.mission: list = []  # stored MISSION_ITEM_INT messages, home first
        self.counts: list[int] = []  # every MISSION_COUNT received
        self.fail_upload_at: int | None = None  # answer this item with MAV_MISSION_ERROR (once)
        self.ask_item0_forever = False
        self.announce: int | None = None  # MISSION_COUNT to announce on a download
        self.param_count: int | None = None  # param_count to announce in every PARAM_VALUE
        self.wrong_item_forever = False  # once asked for an item: item 0, again and again
        self._flooding = False
        self.requests = 0  # MISSION_REQUESTs sent
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(1)
        self.port = self.srv.getsockname()[1]
        self.endpoint = f"tcp:127.0.0.1:{self.port}"
        self.mav = A.MAVLink(None, 1, 1)
        self.conn: socket.socket | None = None
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self._expect: int | None = None  # the upload's item count
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.srv.close()
        if self.conn is not None:
            self.conn.close()
        self.thread.join(5)

    def home_and(self, n: int) -> None:
        """Store home and ``n`` waypoints (the vehicle's mission before a test)."""
        self.mission = [self._item(0, 0)] + [self._item(i, 10 + i) for i in range(1, n + 1)]

    def _item(self, seq: int, alt: float):
        return A.MAVLink_mission_item_int_message(
            255,
            190,
            seq,
            A.MAV_FRAME_GLOBAL_RELATIVE_ALT if seq else A.MAV_FRAME_GLOBAL,
            A.MAV_CMD_NAV_WAYPOINT,
            0,
            1,
            0,
            0,
            0,
            0,
            -353632621 + seq,
            1491652374,
            alt,
            A.MAV_MISSION_TYPE_MISSION,
        )

    def mission_alts(self) -> list[float]:
        return [round(m.z, 3) for m in self.mission]

    def send(self, msg) -> None:
        if self.conn is not None:
            with self.lock:
                try:
                    self.conn.sendall(msg.pack(self.mav))
                except OSError:
                    pass

    def _run(self) -> None:
        try:
            self.conn, _ = self.srv.accept()
        except OSError:
            return
        self.conn.settimeout(0.05)
        next_hb = 0.0
        while not self.stop.is_set():
            if time.monotonic() >= next_hb:
                next_hb = time.monotonic() + 0.5
                self.send(
                    A.MAVLink_heartbeat_message(
                        A.MAV_TYPE_QUADROTOR, A.MAV_AUTOPILOT_ARDUPILOTMEGA, 0, 0, A.MAV_STATE_STANDBY, 3
                    )
                )
            if self._flooding:
                self._send_item(0)
            try:
                data = self.conn.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            for m in self.mav.parse_buffer(data) or []:
                self._handle(m)

    def _param_value(self, name: str) -> None:
        v, t = self.params[name]
        names = sorted(self.params)
        count = self.param_count if self.param_count is not None else len(names)
        self.send(A.MAVLink_param_value_message(name.encode(), v, t, count, names.index(name)))

    def _request(self, seq: int) -> None:
        self.requests += 1
        self.send(A.MAVLink_mission_request_int_message(255, 190, seq, A.MAV_MISSION_TYPE_MISSION))

    def _send_item(self, seq: int) -> None:
        item = self.mission[seq] if seq < len(self.mission) else self._item(seq, 5)
        item.seq, item.target_system, item.target_component = seq, 255, 190  # to the asking GCS
        self.send(item)

    def _handle(self, m) -> None:
        t = m.get_type()
        if t == "PARAM_REQUEST_READ":
            name = m.param_id.rstrip("\x00") if isinstance(m.param_id, str) else m.param_id.decode()
            if name in self.params:
                self._param_value(name)
        elif t == "PARAM_SET":
            name = m.param_id.rstrip("\x00") if isinstance(m.param_id, str) else m.param_id.decode()
            self.param_sets.append((name, m.param_value))
            if name in self.params:
                if name not in self.refuse:
                    self.params[name][0] = m.param_value
                self._param_value(name)
        elif t == "PARAM_REQUEST_LIST":
            for name in sorted(self.params):
                self._param_value(name)
        elif t == "MISSION_COUNT":
            self.counts.append(m.count)
            self._expect = m.count
            del self.mission[m.count :]  # as ArduPilot: truncated now, replaced item by item
            self._request(0)
        elif t in ("MISSION_ITEM_INT", "MISSION_ITEM") and self._expect is not None:
            if self.ask_item0_forever:
                self._request(0)
                return
            if self.fail_upload_at is not None and m.seq == self.fail_upload_at:
                self.fail_upload_at = None
                self._expect = None
                self.send(A.MAVLink_mission_ack_message(255, 190, A.MAV_MISSION_ERROR, A.MAV_MISSION_TYPE_MISSION))
                return
            if m.seq < len(self.mission):
                self.mission[m.seq] = m
            else:
                self.mission.append(m)
            if m.seq + 1 < self._expect:
                self._request(m.seq + 1)
            else:
                self._expect = None
                self.send(A.MAVLink_mission_ack_message(255, 190, A.MAV_MISSION_ACCEPTED, A.MAV_MISSION_TYPE_MISSION))
        elif t == "MISSION_REQUEST_LIST":
            n = self.announce if self.announce is not None else len(self.mission)
            self.send(A.MAVLink_mission_count_message(255, 190, n, A.MAV_MISSION_TYPE_MISSION))
        elif t in ("MISSION_REQUEST_INT", "MISSION_REQUEST"):
            self._flooding = self.wrong_item_forever and m.seq > 0
            self._send_item(0 if self._flooding else m.seq)
        elif t == "MISSION_CLEAR_ALL":
            self.mission = []
            self.send(A.MAVLink_mission_ack_message(255, 190, A.MAV_MISSION_ACCEPTED, A.MAV_MISSION_TYPE_MISSION))
