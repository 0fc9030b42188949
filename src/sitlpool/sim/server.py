"""The simulator process: SITL's ports, one client per TCP port, the main loop."""

from __future__ import annotations

import math
import os
import selectors
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..instances import ports as instance_ports
from .copter import MODES, Copter, MissionItem, mavlink
from .params import Params

A = mavlink
TICK_S = 0.04  # wall seconds per main-loop tick (25 Hz)
MAX_SUBSTEP = 0.05  # sim seconds per physics sub-step
HEARTBEAT_HZ = 1.0
DEFAULT_RATES = {  # Hz of sim time, per link, until a client asks for others
    "SYS_STATUS": 1, "GPS_RAW_INT": 1, "GLOBAL_POSITION_INT": 4, "LOCAL_POSITION_NED": 4, "ATTITUDE": 4, "VFR_HUD": 4,
    "BATTERY_STATUS": 1, "SYSTEM_TIME": 1, "SIMSTATE": 1, "HOME_POSITION": 0.2, "MISSION_CURRENT": 1,
}
STREAMS = {  # REQUEST_DATA_STREAM ids, as ArduPilot groups them
    A.MAV_DATA_STREAM_EXTENDED_STATUS: ("SYS_STATUS", "GPS_RAW_INT", "MISSION_CURRENT"),
    A.MAV_DATA_STREAM_POSITION: ("GLOBAL_POSITION_INT", "LOCAL_POSITION_NED"),
    A.MAV_DATA_STREAM_EXTRA1: ("ATTITUDE", "SIMSTATE"),
    A.MAV_DATA_STREAM_EXTRA2: ("VFR_HUD",),
    A.MAV_DATA_STREAM_EXTRA3: ("BATTERY_STATUS", "SYSTEM_TIME", "HOME_POSITION"),
}
MSG_IDS = {name: getattr(A, f"MAVLINK_MSG_ID_{name}") for name in list(DEFAULT_RATES) + ["HEARTBEAT"]}
MSG_NAMES = {v: k for k, v in MSG_IDS.items()}
OUTBUF_LIMIT = 1 << 20


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass
class Link:
    """One served TCP client on one serial port."""

    name: str
    sock: socket.socket
    parser: object
    encoder: object
    rates: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_RATES))
    due: dict[str, float] = field(default_factory=dict)
    out: bytearray = field(default_factory=bytearray)
    upload: dict | None = None  # a mission upload in progress: count, items


@dataclass
class SimConfig:
    instance: int
    base_port: int
    rc_in_port: int | None
    speedup: float
    home: tuple[float, float, float, float]
    defaults: list[Path]
    wipe: bool
    sysid: int | None
    wait_for_client: bool
    ready_delay: float
    argv: list[str]


class Simulator:
    def __init__(self, cfg: SimConfig):
        self.cfg = cfg
        self.ports = instance_ports(cfg.instance, cfg.base_port)
        self.parent = os.getppid()
        self.sel = selectors.DefaultSelector()
        self.listeners: dict[str, socket.socket] = {}
        self.links: dict[str, Link] = {}
        self.reboot_requested = False
        self.rc_sock: socket.socket | None = None
        Path("logs").mkdir(exist_ok=True)
        self.params = Params(Path("eeprom.bin"), cfg.defaults, cfg.wipe, cfg.sysid, cfg.speedup)
        self.copter = Copter(self.params, cfg.home, cfg.ready_delay, self.send, self.request_reboot)

    # ---- sockets ----------------------------------------------------------------

    def listen(self, name: str, port: int) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        log(f"bind port {port} for {name.upper()}")
        try:
            s.bind(("0.0.0.0", port))  # SITL binds every address; there is no loopback option
            s.listen(5)
        except OSError:
            log(f"bind failed on port {port} - Address already in use")
            sys.exit(1)
        log(f"{name.upper()} on TCP port {port}")
        self.listeners[name] = s
        return s

    def boot_ports(self) -> None:
        self.listen("serial1", self.ports.serial1)
        self.listen("serial2", self.ports.serial2)
        rc = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rc_port = self.cfg.rc_in_port or self.ports.rc_in
        try:
            rc.bind(("0.0.0.0", rc_port))
        except OSError:
            log(f"bind failed on port {rc_port} - Address already in use")
            sys.exit(1)
        rc.setblocking(False)
        self.rc_sock = rc
        self.sel.register(rc, selectors.EVENT_READ, ("rc", None))
        for name, s in self.listeners.items():
            if name not in self.links:
                s.setblocking(False)
                self.sel.register(s, selectors.EVENT_READ, ("listen", name))

    def attach(self, name: str, conn: socket.socket) -> None:
        conn.setblocking(False)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sysid = int(self.params.get("SYSID_THISMAV", 1))
        parser = A.MAVLink(None, sysid, 1)
        parser.robust_parsing = True
        link = Link(name, conn, parser, A.MAVLink(None, sysid, 1))
        now = self.copter.t
        link.due = {k: now for k in link.rates}
        self.links[name] = link
        self.sel.register(conn, selectors.EVENT_READ, ("link", name))
        # one client per port: stop accepting until this one leaves (the kernel still
        # completes a second client's handshake into the backlog, but nobody serves it)
        try:
            self.sel.unregister(self.listeners[name])
        except KeyError:
            pass
        self.send(self.copter.message("HEARTBEAT"), link)

    def detach(self, link: Link) -> None:
        self.sel.unregister(link.sock)
        link.sock.close()
        del self.links[link.name]
        self.sel.register(self.listeners[link.name], selectors.EVENT_READ, ("listen", link.name))

    def send(self, msg, link: Link | None = None) -> None:
        if msg is None:
            return
        for lk in [link] if link else list(self.links.values()):
            if lk.name not in self.links:
                continue
            data = msg.pack(lk.encoder)
            if len(lk.out) < OUTBUF_LIMIT:  # a client that reads nothing loses telemetry, not us
                lk.out += data
            self.flush(lk)

    def flush(self, lk: Link) -> None:
        if not lk.out:
            return
        try:
            n = lk.sock.send(lk.out)
            del lk.out[:n]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            lk.out.clear()

    # ---- life -------------------------------------------------------------------

    def request_reboot(self) -> None:
        self.reboot_requested = True

    def run(self) -> None:
        cfg = self.cfg
        print("Starting sketch 'ArduCopter'", flush=True)
        print(f"Starting SITL input on instance {cfg.instance}", flush=True)
        s0 = self.listen("serial0", self.ports.serial0)
        if cfg.wait_for_client:
            print("Waiting for connection ....", flush=True)
            conn, _ = s0.accept()  # blocks (0% CPU), as SITL's tcp:0:wait does
            signal.signal(signal.SIGTERM, self._sigterm)  # before a client can see us booted
            print(f"Connection on serial port {self.ports.serial0}", flush=True)
            self.attach("serial0", conn)
        signal.signal(signal.SIGTERM, self._sigterm)
        self.boot_ports()
        self.copter.text(A.MAV_SEVERITY_INFO, "ArduCopter V4.7.0-dev (sitlpool sim)")
        self.copter.text(A.MAV_SEVERITY_INFO, f"Frame: QUAD/X  instance {cfg.instance}")
        self.loop()

    def _sigterm(self, *_):
        print("Exitting", flush=True)
        os._exit(0)

    def loop(self) -> None:
        last = time.monotonic()
        next_tick = last
        while True:
            timeout = max(0.0, next_tick - time.monotonic())
            for key, _ in self.sel.select(timeout):
                kind, name = key.data
                if kind == "listen":
                    if name not in self.links:
                        try:
                            conn, _ = self.listeners[name].accept()
                        except BlockingIOError:
                            continue
                        self.attach(name, conn)
                elif kind == "link":
                    self.read(self.links.get(name))
                elif kind == "rc":
                    self.read_rc()
            now = time.monotonic()
            if now < next_tick:
                continue
            next_tick = max(next_tick + TICK_S, now - TICK_S)
            if os.getppid() != self.parent:
                log("parent process exited; exiting")
                os._exit(1)
            sim_dt = (now - last) * self.cfg.speedup
            last = now
            while sim_dt > 1e-9:
                d = min(sim_dt, MAX_SUBSTEP)
                self.copter.step(d)
                sim_dt -= d
                self.telemetry()  # per sub-step: stream rates hold in sim time at any speedup
            if self.reboot_requested:
                self.reboot()

    def telemetry(self) -> None:
        t = self.copter.t
        for lk in list(self.links.values()):
            hb = lk.due.get("HEARTBEAT", 0.0)
            if t >= hb:
                lk.due["HEARTBEAT"] = t + 1.0 / HEARTBEAT_HZ
                self.send(self.copter.message("HEARTBEAT"), lk)
            for name, hz in lk.rates.items():
                if hz <= 0:
                    continue
                if t >= lk.due.get(name, 0.0):
                    lk.due[name] = max(lk.due.get(name, 0.0) + 1.0 / hz, t)
                    self.send(self.copter.message(name), lk)

    def read(self, lk: Link | None) -> None:
        if lk is None:
            return
        try:
            data = lk.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.detach(lk)  # a client leaving does not stop the vehicle
            return
        try:
            msgs = lk.parser.parse_buffer(data) or []
        except Exception:
            msgs = []
        for m in msgs:
            self.handle(m, lk)

    def read_rc(self) -> None:
        try:
            while True:
                data = self.rc_sock.recv(1024)
                if len(data) >= 6:
                    vals = struct.unpack(f"<{len(data) // 2}H", data[: len(data) // 2 * 2])
                    self.copter.rc_override(vals[2])
        except (BlockingIOError, OSError):
            pass

    def reboot(self) -> None:
        for lk in list(self.links.values()):
            try:
                lk.sock.setblocking(True)
                lk.sock.sendall(lk.out)
            except OSError:
                pass
        self.params.save()
        argv = [a for a in self.cfg.argv if a not in ("-w", "--wipe")]
        log("Rebooting")
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, "-m", "sitlpool.sim", *argv])

    # ---- MAVLink in -------------------------------------------------------------

    def handle(self, m, lk: Link) -> None:
        t = m.get_type()
        c = self.copter
        sysid = int(self.params.get("SYSID_THISMAV", 1))
        target = getattr(m, "target_system", None)
        if target not in (None, 0, sysid) and t not in ("PING", "TIMESYNC"):
            return
        if t == "COMMAND_LONG":
            self.command(m.command, [m.param1, m.param2, m.param3, m.param4, m.param5, m.param6, m.param7], lk, m)
        elif t == "COMMAND_INT":
            self.command(m.command, [m.param1, m.param2, m.param3, m.param4, m.x / 1e7, m.y / 1e7, m.z], lk, m)
        elif t == "SET_MODE":
            c.set_mode(m.custom_mode, lk)
        elif t == "PARAM_REQUEST_LIST":
            for i, name in enumerate(self.params.names):
                self.param_value(name, lk, i)
        elif t == "PARAM_REQUEST_READ":
            name = m.param_id if m.param_index < 0 else (self.params.names[m.param_index] if m.param_index < len(self.params.names) else None)
            name = name.rstrip("\x00") if isinstance(name, str) else name
            if name in self.params.values:
                self.param_value(name, lk)
        elif t == "PARAM_SET":
            name = m.param_id.rstrip("\x00") if isinstance(m.param_id, str) else m.param_id
            if self.params.set(name, m.param_value):
                if name == "SIM_SPEEDUP" and m.param_value > 0:
                    self.cfg.speedup = float(m.param_value)
                self.param_value(name, None)  # every GCS hears of a change
            else:
                c.text(A.MAV_SEVERITY_WARNING, f"Unknown parameter {name}", lk)
        elif t == "REQUEST_DATA_STREAM":
            ids = list(STREAMS) if m.req_stream_id == A.MAV_DATA_STREAM_ALL else [m.req_stream_id]
            for sid in ids:
                for name in STREAMS.get(sid, ()):
                    lk.rates[name] = float(m.req_message_rate) if m.start_stop else 0.0
                    lk.due[name] = c.t
        elif t == "SET_POSITION_TARGET_GLOBAL_INT":
            if not c.goto(m.lat_int / 1e7, m.lon_int / 1e7, self._rel_alt(m.coordinate_frame, m.alt)):
                c.text(A.MAV_SEVERITY_WARNING, "Guided target refused: not flying in GUIDED", lk)
        elif t == "SET_POSITION_TARGET_LOCAL_NED":
            if not self._local_target(m):
                c.text(A.MAV_SEVERITY_WARNING, "Guided target refused: not flying in GUIDED", lk)
        elif t in ("MISSION_COUNT", "MISSION_ITEM", "MISSION_ITEM_INT", "MISSION_REQUEST_LIST", "MISSION_REQUEST",
                   "MISSION_REQUEST_INT", "MISSION_CLEAR_ALL", "MISSION_SET_CURRENT") and not (
                   t.startswith("MISSION_ITEM") and m.current == 2):
            self.mission_protocol(t, m, lk)
        elif t == "MISSION_ITEM_INT" and m.current == 2:
            ok = c.goto(m.x / 1e7, m.y / 1e7, self._rel_alt(m.frame, m.z))
            self.send(A.MAVLink_mission_ack_message(m.get_srcSystem(), m.get_srcComponent(),
                                                    A.MAV_MISSION_ACCEPTED if ok else A.MAV_MISSION_ERROR, 0), lk)
        elif t == "RC_CHANNELS_OVERRIDE":
            c.rc_override(m.chan3_raw)
        elif t == "PING" and m.target_system == 0:
            self.send(A.MAVLink_ping_message(m.time_usec, m.seq, m.get_srcSystem(), m.get_srcComponent()), lk)
        elif t == "TIMESYNC" and m.tc1 == 0:
            self.send(A.MAVLink_timesync_message(time.monotonic_ns(), m.ts1), lk)

    def mission_protocol(self, t: str, m, lk: Link) -> None:
        """Mission upload, download, clear and set-current (mission_type 0 only)."""
        c = self.copter
        to = (m.get_srcSystem(), m.get_srcComponent())
        mtype = getattr(m, "mission_type", 0)

        def ack(result: int) -> None:
            self.send(A.MAVLink_mission_ack_message(*to, result, mtype), lk)

        if mtype != A.MAV_MISSION_TYPE_MISSION:
            ack(A.MAV_MISSION_UNSUPPORTED)
            return
        if t == "MISSION_COUNT":
            if m.count == 0:
                c.mission, c.mission_seq = [], 1
                ack(A.MAV_MISSION_ACCEPTED)
                return
            lk.upload = {"count": m.count, "items": []}
            self.send(A.MAVLink_mission_request_int_message(*to, 0, mtype), lk)
        elif t in ("MISSION_ITEM", "MISSION_ITEM_INT"):
            up = lk.upload
            if up is None:
                ack(A.MAV_MISSION_DENIED)
                return
            if m.seq == len(up["items"]):
                scale = 1e7 if t == "MISSION_ITEM_INT" else 1.0
                alt = self._rel_alt(m.frame, m.z)
                up["items"].append(MissionItem(m.command, m.x / scale, m.y / scale, alt,
                                               (m.param1, m.param2, m.param3, m.param4), m.frame))
            if len(up["items"]) < up["count"]:
                self.send(A.MAVLink_mission_request_int_message(*to, len(up["items"]), mtype), lk)
                return
            c.mission, c.mission_seq, lk.upload = up["items"], 1, None
            ack(A.MAV_MISSION_ACCEPTED)
        elif t == "MISSION_REQUEST_LIST":
            self.send(A.MAVLink_mission_count_message(*to, len(c.mission), mtype), lk)
        elif t in ("MISSION_REQUEST", "MISSION_REQUEST_INT"):
            if not 0 <= m.seq < len(c.mission):
                ack(A.MAV_MISSION_INVALID_SEQUENCE)
                return
            it = c.mission[m.seq]
            lat, lon, alt = (c.home_lat, c.home_lon, 0.0) if m.seq == 0 else (it.lat, it.lon, it.alt)
            self.send(A.MAVLink_mission_item_int_message(
                *to, m.seq, A.MAV_FRAME_GLOBAL_RELATIVE_ALT_INT if m.seq else A.MAV_FRAME_GLOBAL_INT, it.command,
                int(m.seq == c.mission_seq), 1, *it.params, int(lat * 1e7), int(lon * 1e7),
                alt if m.seq else c.home_alt, mtype), lk)
        elif t == "MISSION_CLEAR_ALL":
            c.mission, c.mission_seq = [], 1
            ack(A.MAV_MISSION_ACCEPTED)
        elif t == "MISSION_SET_CURRENT":
            if 0 < m.seq < len(c.mission):
                c.mission_seq = m.seq
            self.send(c.message("MISSION_CURRENT"), None)

    def _local_target(self, m) -> bool:
        """SET_POSITION_TARGET_LOCAL_NED: a position (LOCAL_NED from home; *_OFFSET_NED from
        here, BODY rotated by the heading) or, when positions are masked out, a velocity."""
        c = self.copter
        pos_ignored = (m.type_mask & 0b111) == 0b111
        vel_ignored = (m.type_mask & 0b111000) == 0b111000
        if m.coordinate_frame in (A.MAV_FRAME_BODY_OFFSET_NED, A.MAV_FRAME_BODY_NED, A.MAV_FRAME_BODY_FRD):
            h = math.radians(c.heading)
            rot = lambda x, y: (x * math.cos(h) - y * math.sin(h), x * math.sin(h) + y * math.cos(h))  # noqa: E731
        else:
            rot = lambda x, y: (x, y)  # noqa: E731
        if not pos_ignored:
            dn, de = rot(m.x, m.y)
            if m.coordinate_frame == A.MAV_FRAME_LOCAL_NED:
                return c.goto_local(dn, de, -m.z)
            return c.goto_local(c.north + dn, c.east + de, c.alt - m.z)
        if not vel_ignored:
            vn, ve = rot(m.vx, m.vy)
            return c.set_velocity(vn, ve, m.vz)
        return False

    def _rel_alt(self, frame: int, alt: float) -> float:
        if frame in (A.MAV_FRAME_GLOBAL, A.MAV_FRAME_GLOBAL_INT):
            return alt - self.copter.home_alt
        return alt

    def param_value(self, name: str, lk: Link | None, index: int | None = None) -> None:
        idx = self.params.names.index(name) if index is None else index
        self.send(A.MAVLink_param_value_message(name.encode(), self.params[name], self.params.types[name],
                                                len(self.params.names), idx), lk)

    def command(self, cmd: int, p: list[float], lk: Link, m) -> None:
        c = self.copter
        if cmd == A.MAV_CMD_COMPONENT_ARM_DISARM:
            force = int(p[1]) == 21196
            r = c.arm(force, lk) if p[0] >= 0.5 else c.disarm(force=force, link=lk)
        elif cmd == A.MAV_CMD_DO_SET_MODE:
            r = c.set_mode(int(p[1]), lk)
        elif cmd == A.MAV_CMD_NAV_TAKEOFF:
            r = c.takeoff(p[6], lk)
        elif cmd == A.MAV_CMD_NAV_LAND:
            r = c.set_mode(MODES["LAND"], lk)
        elif cmd == A.MAV_CMD_NAV_RETURN_TO_LAUNCH:
            r = c.set_mode(MODES["RTL"], lk)
        elif cmd == A.MAV_CMD_CONDITION_YAW:
            r = c.condition_yaw(p[0], bool(p[3]), int(p[2]) if p[2] else 1)
        elif cmd == A.MAV_CMD_DO_CHANGE_SPEED:
            r = c.change_speed(p[1])
        elif cmd == A.MAV_CMD_DO_REPOSITION:
            r = 0 if c.goto(p[4], p[5], p[6]) else 4
        elif cmd == A.MAV_CMD_PREFLIGHT_REBOOT_SHUTDOWN:
            r = c.reboot(lk) if int(p[0]) == 1 else A.MAV_RESULT_UNSUPPORTED
        elif cmd == A.MAV_CMD_SET_MESSAGE_INTERVAL:
            name = MSG_NAMES.get(int(p[0]))
            if name and name != "HEARTBEAT":
                us = p[1]
                lk.rates[name] = DEFAULT_RATES[name] if us == 0 else (0.0 if us < 0 else 1e6 / us)
                lk.due[name] = c.t
                r = A.MAV_RESULT_ACCEPTED
            else:
                r = A.MAV_RESULT_DENIED if name else A.MAV_RESULT_UNSUPPORTED
        elif cmd == A.MAV_CMD_REQUEST_MESSAGE:
            name = MSG_NAMES.get(int(p[0]))
            r = A.MAV_RESULT_ACCEPTED if name else A.MAV_RESULT_UNSUPPORTED
            if name:
                self.send(c.message(name), lk)
        else:
            r = A.MAV_RESULT_UNSUPPORTED
        self.send(A.MAVLink_command_ack_message(cmd, r, 0, 0, m.get_srcSystem(), m.get_srcComponent()), lk)
