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
from . import telemetry
from .copter import FORCE_MAGIC, MODES, Copter, MissionItem, mavlink
from .params import SYSID, Params

A = mavlink
TICK_S = 0.04  # wall seconds per main-loop tick (25 Hz)
BOOT_S = 0.45  # wall seconds from the first client to "ArduPilot Ready" (as real SITL)
MAX_SUBSTEP = 0.05  # sim seconds per physics sub-step
STREAMS = telemetry.STREAMS
MSG_IDS, MSG_NAMES = telemetry.MSG_IDS, telemetry.MSG_NAMES
OUTBUF_LIMIT = 1 << 20
# ArduPilot stores mission frames in their float form: an _INT frame comes back as its twin
STORED_FRAME = {
    A.MAV_FRAME_GLOBAL_INT: A.MAV_FRAME_GLOBAL,
    A.MAV_FRAME_GLOBAL_RELATIVE_ALT_INT: A.MAV_FRAME_GLOBAL_RELATIVE_ALT,
    A.MAV_FRAME_GLOBAL_TERRAIN_ALT_INT: A.MAV_FRAME_GLOBAL_TERRAIN_ALT,
}
STATUSTEXT_ID = A.MAVLINK_MSG_ID_STATUSTEXT
TEXTED_RESULTS = {  # ArduCopter's answer on the ground: result and the texts it says
    A.MAV_CMD_DO_MOTOR_TEST: (
        0,
        [(A.MAV_SEVERITY_INFO, "starting motor test"), (A.MAV_SEVERITY_INFO, "finished motor test")],
    ),
    A.MAV_CMD_CONTROL_HIGH_LATENCY: (0, [(A.MAV_SEVERITY_INFO, "High Latency disabled")]),
    A.MAV_CMD_DO_LAND_START: (
        4,
        [
            (A.MAV_SEVERITY_WARNING, "Unable to start landing sequence"),
            (A.MAV_SEVERITY_WARNING, "Mode change to AUTO RTL failed: No landing sequence found"),
        ],
    ),
}
STREAM_PARAMS = {
    "RAW_SENS": A.MAV_DATA_STREAM_RAW_SENSORS,
    "EXT_STAT": A.MAV_DATA_STREAM_EXTENDED_STATUS,
    "RC_CHAN": A.MAV_DATA_STREAM_RC_CHANNELS,
    "POSITION": A.MAV_DATA_STREAM_POSITION,
    "EXTRA1": A.MAV_DATA_STREAM_EXTRA1,
    "EXTRA2": A.MAV_DATA_STREAM_EXTRA2,
    "EXTRA3": A.MAV_DATA_STREAM_EXTRA3,
}
# results ArduCopter 4.7 SITL gives, disarmed on the ground, for commands the sim has nothing
# to simulate for (measured with all parameters 0); anything not listed is UNSUPPORTED
PASSIVE_RESULTS = {
    A.MAV_CMD_DO_SET_RELAY: 0,
    A.MAV_CMD_DO_REPEAT_RELAY: 0,
    A.MAV_CMD_DO_SET_ROI_LOCATION: 0,
    A.MAV_CMD_DO_SET_ROI: 0,
    A.MAV_CMD_DO_DIGICAM_CONFIGURE: 0,
    A.MAV_CMD_DO_DIGICAM_CONTROL: 0,
    A.MAV_CMD_DO_SET_CAM_TRIGG_DIST: 0,
    A.MAV_CMD_DO_FENCE_ENABLE: 0,
    A.MAV_CMD_DO_PARACHUTE: 0,
    A.MAV_CMD_DO_SPRAYER: 0,
    A.MAV_CMD_START_RX_PAIR: 0,
    A.MAV_CMD_BATTERY_RESET: 0,
    43004: 0,
    A.MAV_CMD_NAV_LOITER_UNLIM: 0,
    A.MAV_CMD_NAV_VTOL_LAND: 0,
    A.MAV_CMD_DO_SET_ROI_NONE: 0,
    A.MAV_CMD_AIRFRAME_CONFIGURATION: 0,
    A.MAV_CMD_DO_FLIGHTTERMINATION: 4,
    A.MAV_CMD_DO_GRIPPER: 4,
    A.MAV_CMD_DO_MOUNT_CONFIGURE: 4,
    A.MAV_CMD_DO_MOUNT_CONTROL: 4,
    A.MAV_CMD_IMAGE_START_CAPTURE: 4,
    A.MAV_CMD_VIDEO_START_CAPTURE: 4,
    A.MAV_CMD_VIDEO_STOP_CAPTURE: 4,
    A.MAV_CMD_ACCELCAL_VEHICLE_POS: 4,
    A.MAV_CMD_DO_WINCH: 4,
    A.MAV_CMD_NAV_VTOL_TAKEOFF: 4,
    A.MAV_CMD_IMAGE_STOP_CAPTURE: 0,
    42001: 0,
    42003: 0,
    42006: 0,  # the Solo buttons, FIXED_MAG_CAL_YAW
    A.MAV_CMD_PREFLIGHT_STORAGE: 2,
}


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass
class Link:
    """One served TCP client on one serial port."""

    name: str
    sock: socket.socket
    parser: object
    encoder: object
    # ArduCopter 4.7 streams nothing but HEARTBEAT on any port until a client asks
    # (REQUEST_DATA_STREAM, SET_MESSAGE_INTERVAL): Hz of sim time per message name
    rates: dict[str, float] = field(default_factory=dict)
    due: dict[str, float] = field(default_factory=dict)
    hb_interval: float = 1.0
    out: bytearray = field(default_factory=bytearray)
    upload: dict | None = None  # a mission upload in progress: count, items, type
    active: bool = False  # has sent us MAVLink: ArduPilot sends STATUSTEXTs only to such links
    warned: set = field(default_factory=set)


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
        self.ftp_server = None  # created on a client's first MAVFTP request (keeps start-up short)
        self.copter.on_home = self._home_changed
        self.copter.on_health_change = lambda: self.send(self.msg("SYS_STATUS"))

    def msg(self, name: str):
        return telemetry.build(self.copter, name)

    def _home_changed(self) -> None:
        # as ArduPilot: every port hears of a new home (and the EKF origin) at once
        self.send(self.msg("GPS_GLOBAL_ORIGIN"))
        self.send(self.msg("HOME_POSITION"))

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
        # the RC input first: once SERIAL1/2 listen, every port a client can look for is bound
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
        self.listen("serial1", self.ports.serial1)
        self.listen("serial2", self.ports.serial2)
        for name, s in self.listeners.items():
            if name not in self.links:
                s.setblocking(False)
                self.sel.register(s, selectors.EVENT_READ, ("listen", name))

    def attach(self, name: str, conn: socket.socket) -> None:
        conn.setblocking(False)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sysid = int(self.params.get(SYSID, 1))
        parser = A.MAVLink(None, sysid, 1)
        parser.robust_parsing = True
        link = Link(name, conn, parser, A.MAVLink(None, sysid, 1))
        now = self.copter.t
        link.due = {"HEARTBEAT": now + link.hb_interval}
        self.apply_stream_params(link)
        self.links[name] = link
        self.sel.register(conn, selectors.EVENT_READ, ("link", name))
        # one client per port: stop accepting until this one leaves (the kernel still
        # completes a second client's handshake into the backlog, but nobody serves it)
        try:
            self.sel.unregister(self.listeners[name])
        except KeyError:
            pass
        self.send(self.msg("HEARTBEAT"), link)

    def apply_stream_params(self, link: Link) -> None:
        """A port's MAVn_ stream-rate parameters (SRn_ before 4.7), as ArduPilot applies them:
        SERIAL0 is MAV1, SERIAL1 MAV2, SERIAL2 MAV3; 0 (the default) streams nothing."""
        n = int(link.name[-1]) + 1
        for suffix, sid in STREAM_PARAMS.items():
            hz = self.params.get(f"MAV{n}_{suffix}", 0.0)
            for name in STREAMS[sid]:
                if hz > 0 or name in link.rates:
                    link.rates[name] = hz
                    link.due.setdefault(name, self.copter.t)

    def detach(self, link: Link) -> None:
        self.sel.unregister(link.sock)
        link.sock.close()
        del self.links[link.name]
        self.sel.register(self.listeners[link.name], selectors.EVENT_READ, ("listen", link.name))

    def send(self, msg, link: Link | None = None) -> None:
        if msg is None:
            return
        text = link is None and msg.get_msgId() == STATUSTEXT_ID
        for lk in [link] if link else list(self.links.values()):
            if lk.name not in self.links or (text and not lk.active):
                continue
            data = msg.pack(lk.encoder)
            lk.encoder.seq = (lk.encoder.seq + 1) % 256  # each link numbers its packets, as ArduPilot does
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
        self.started = time.monotonic()
        self.boot_heartbeat = False
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
            if self.copter.booting:
                # real SITL sets up for ~0.45 s after its first client, its clock at 0 meanwhile
                if now - self.started < BOOT_S:
                    if not self.boot_heartbeat and now - self.started > BOOT_S / 2:
                        self.boot_heartbeat = True  # real SITL's one HEARTBEAT while booting
                        self.send(self.msg("HEARTBEAT"))
                    last = now
                    continue
                self.copter.ready()
            sim_dt = (now - last) * self.cfg.speedup
            last = now
            while sim_dt > 1e-9:
                d = min(sim_dt, MAX_SUBSTEP)
                self.copter.step(d)
                sim_dt -= d
                self.telemetry()  # per sub-step: stream rates hold in sim time at any speedup
            if self.reboot_requested:
                self.reboot()

    def upload_timers(self, lk: Link, t: float) -> None:
        """As ArduPilot: ask again every second of silence; give up after 8 s (OPERATION_CANCELLED)."""
        up = lk.upload
        if t - up["last"] >= 8.0:
            lk.upload = None
            self.send(A.MAVLink_mission_ack_message(*up["to"], A.MAV_MISSION_OPERATION_CANCELLED, 0), lk)
            self.copter.text(A.MAV_SEVERITY_WARNING, "Mission upload timeout")
        elif t - up["asked"] >= 1.0:
            up["asked"] = t
            self.send(A.MAVLink_mission_request_message(*up["to"], len(up["items"]), 0), lk)

    def telemetry(self) -> None:
        t = self.copter.t
        for lk in list(self.links.values()):
            if lk.upload is not None:
                self.upload_timers(lk, t)
            if lk.hb_interval > 0 and t >= lk.due.get("HEARTBEAT", 0.0):
                lk.due["HEARTBEAT"] = t + lk.hb_interval
                self.send(self.msg("HEARTBEAT"), lk)
            if t >= lk.due.setdefault("TIMESYNC", t + 1.0):  # ArduPilot asks each port every 10 s, unasked
                lk.due["TIMESYNC"] = t + 10.0
                self.send(A.MAVLink_timesync_message(0, int(t * 1e9)), lk)
            for name, hz in lk.rates.items():
                if hz <= 0:
                    continue
                if t >= lk.due.get(name, 0.0):
                    lk.due[name] = max(lk.due.get(name, 0.0) + 1.0 / hz, t)
                    self.send(self.msg(name), lk)

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
            if m.get_type() != "BAD_DATA":
                lk.active = True
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
        sysid = int(self.params.get(SYSID, 1))
        target = getattr(m, "target_system", None)
        if target not in (None, 0, sysid) and t not in ("PING", "TIMESYNC"):
            return
        if t == "COMMAND_LONG":
            self.command(m.command, [m.param1, m.param2, m.param3, m.param4, m.param5, m.param6, m.param7], lk, m)
        elif t == "COMMAND_INT":
            self.command(
                m.command, [m.param1, m.param2, m.param3, m.param4, m.x / 1e7, m.y / 1e7, m.z], lk, m, frame=m.frame
            )
        elif t == "SET_MODE":
            c.set_mode(m.custom_mode, lk)
        elif t == "PARAM_REQUEST_LIST":
            self.banner()  # ArduPilot sends its banner when a GCS fetches the parameters
            for i, name in enumerate(self.params.names):
                self.param_value(name, lk, i)
        elif t == "PARAM_REQUEST_READ":
            name = (
                m.param_id
                if m.param_index < 0
                else (self.params.names[m.param_index] if m.param_index < len(self.params.names) else None)
            )
            name = name.rstrip("\x00") if isinstance(name, str) else name
            if name in self.params.values:
                self.param_value(name, lk)
        elif t == "PARAM_SET":
            name = m.param_id.rstrip("\x00") if isinstance(m.param_id, str) else m.param_id
            if self.params.set(name, m.param_value):
                if name == "SIM_SPEEDUP" and m.param_value > 0:
                    self.cfg.speedup = float(m.param_value)
                if name[:3] == "MAV" and name[3:4].isdigit() and name[5:] in STREAM_PARAMS:
                    link = self.links.get(f"serial{int(name[3]) - 1}")
                    if link is not None:
                        self.apply_stream_params(link)
                self.param_value(name, None)  # every GCS hears of a change
        elif t == "REQUEST_DATA_STREAM":
            ids = list(STREAMS) if m.req_stream_id == A.MAV_DATA_STREAM_ALL else [m.req_stream_id]
            hz = float(m.req_message_rate) if m.start_stop else 0.0
            for sid in ids:
                for name in STREAMS.get(sid, ()):
                    lk.rates[name] = hz
                    lk.due[name] = c.t
            # ArduPilot keeps the asked rate in the port's MAVn_ parameters (in RAM: not after a reboot)
            n = int(lk.name[-1]) + 1
            suffixes = [k for k, sid in STREAM_PARAMS.items() if sid in ids]
            if m.req_stream_id == A.MAV_DATA_STREAM_ALL:
                suffixes += ["RAW_CTRL", "ADSB"]
            self.params.set_in_ram({f"MAV{n}_{k}": hz for k in suffixes})
        elif t == "SET_POSITION_TARGET_GLOBAL_INT":
            if (m.type_mask & 0b111) != 0b111:
                c.goto(m.lat_int / 1e7, m.lon_int / 1e7, c.alt_from(m.coordinate_frame, m.alt))
            elif (m.type_mask & 0b111000) != 0b111000:
                c.set_velocity(m.vx, m.vy, m.vz)
        elif t == "SET_POSITION_TARGET_LOCAL_NED":
            self._local_target(m)
        elif t in ("MISSION_ITEM", "MISSION_ITEM_INT") and m.current == 2:
            scale = 1e7 if t == "MISSION_ITEM_INT" else 1.0  # a guided go-to (dronekit's simple_goto)
            ok = c.goto(m.x / scale, m.y / scale, c.alt_from(m.frame, m.z))
            self.send(
                A.MAVLink_mission_ack_message(
                    m.get_srcSystem(), m.get_srcComponent(), A.MAV_MISSION_ACCEPTED if ok else A.MAV_MISSION_ERROR, 0
                ),
                lk,
            )
        elif t in (
            "MISSION_COUNT",
            "MISSION_ITEM",
            "MISSION_ITEM_INT",
            "MISSION_REQUEST_LIST",
            "MISSION_REQUEST",
            "MISSION_REQUEST_INT",
            "MISSION_CLEAR_ALL",
            "MISSION_SET_CURRENT",
        ):
            self.mission_protocol(t, m, lk)
        elif t == "FILE_TRANSFER_PROTOCOL":
            self.ftp(m, lk)
        elif t == "RC_CHANNELS_OVERRIDE":
            c.rc_override(m.chan3_raw)
        elif t == "PING" and m.target_system == 0:
            self.send(A.MAVLink_ping_message(m.time_usec, m.seq, m.get_srcSystem(), m.get_srcComponent()), lk)
        elif t == "TIMESYNC" and m.tc1 == 0:
            self.send(A.MAVLink_timesync_message(time.monotonic_ns(), m.ts1), lk)

    def banner(self) -> None:
        for tx in (*telemetry.BANNER, telemetry.frame_text(self.copter)):
            self.copter.text(A.MAV_SEVERITY_INFO, tx)

    def ftp(self, m, lk: Link) -> None:
        if self.ftp_server is None:
            from .ftp import FtpServer

            self.ftp_server = FtpServer(self.params)
        for reply in self.ftp_server.handle(bytes(m.payload)):
            self.send(
                A.MAVLink_file_transfer_protocol_message(0, m.get_srcSystem(), m.get_srcComponent(), list(reply)), lk
            )

    def mission_protocol(self, t: str, m, lk: Link) -> None:
        """Mission upload, download, clear and set-current, as ArduPilot 4.7 answers them:
        items kept exactly as uploaded (frames and altitudes), item 0 is home, uploads are
        pulled with MISSION_REQUEST, a MISSION_REQUEST is answered with MISSION_ITEM plus a
        warning. Fence and rally lists are empty."""
        c = self.copter
        to = (m.get_srcSystem(), m.get_srcComponent())
        mtype = getattr(m, "mission_type", 0)

        def ack(result: int) -> None:
            self.send(A.MAVLink_mission_ack_message(*to, result, mtype), lk)

        def warn_once(text: str) -> None:
            if text not in lk.warned:
                lk.warned.add(text)
                c.text(A.MAV_SEVERITY_WARNING, text)

        if mtype != A.MAV_MISSION_TYPE_MISSION:
            if t == "MISSION_REQUEST_LIST":
                self.send(A.MAVLink_mission_count_message(*to, 0, mtype), lk)
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
            lk.upload = {"count": m.count, "items": [], "to": to, "last": c.t, "asked": c.t}
            self.send(A.MAVLink_mission_request_message(*to, 0, mtype), lk)
        elif t in ("MISSION_ITEM", "MISSION_ITEM_INT"):
            up = lk.upload
            if up is None:
                ack(A.MAV_MISSION_DENIED)
                return
            if t == "MISSION_ITEM":
                warn_once("got MISSION_ITEM; GCS should send MISSION_ITEM_INT")
            if m.seq == len(up["items"]):
                if t == "MISSION_ITEM_INT":
                    lat, lon = m.x / 1e7, m.y / 1e7
                else:  # ArduPilot converts float degrees in single precision: keep what it keeps
                    lat, lon = _f32(_f32(m.x) * 1e7) / 1e7, _f32(_f32(m.y) * 1e7) / 1e7
                up["items"].append(
                    MissionItem(
                        m.command,
                        lat,
                        lon,
                        float(m.z),
                        (m.param1, m.param2, m.param3, m.param4),
                        STORED_FRAME.get(m.frame, m.frame),
                        m.autocontinue,
                    )
                )
            if len(up["items"]) < up["count"]:
                up["last"] = up["asked"] = c.t
                self.send(A.MAVLink_mission_request_message(*to, len(up["items"]), mtype), lk)
                return
            c.set_mission(up["items"])
            lk.upload = None
            ack(A.MAV_MISSION_ACCEPTED)
            c.text(A.MAV_SEVERITY_INFO, "Flight plan received")
        elif t == "MISSION_REQUEST_LIST":
            self.send(A.MAVLink_mission_count_message(*to, len(c.mission), mtype), lk)
        elif t in ("MISSION_REQUEST", "MISSION_REQUEST_INT"):
            if not 0 <= m.seq < len(c.mission):
                ack(A.MAV_MISSION_INVALID_SEQUENCE)
                return
            it = c.mission[m.seq]
            if m.seq == 0:  # home, as ArduPilot reports it
                it = MissionItem(A.MAV_CMD_NAV_WAYPOINT, *c.latlon(home=True), c.home_alt, frame=A.MAV_FRAME_GLOBAL)
            if t == "MISSION_REQUEST_INT":
                self.send(
                    A.MAVLink_mission_item_int_message(
                        *to,
                        m.seq,
                        it.frame,
                        it.command,
                        0,
                        it.autocontinue,
                        *it.params,
                        int(round(it.lat * 1e7)),
                        int(round(it.lon * 1e7)),
                        it.alt,
                        mtype,
                    ),
                    lk,
                )
            else:
                self.send(
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
                self.send(c.mission_current())

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

    def param_value(self, name: str, lk: Link | None, index: int | None = None) -> None:
        idx = self.params.names.index(name) if index is None else index
        self.send(
            A.MAVLink_param_value_message(
                name.encode(), self.params[name], self.params.types[name], len(self.params.names), idx
            ),
            lk,
        )

    def command(self, cmd: int, p: list[float], lk: Link, m, frame: int | None = None) -> None:
        """COMMAND_LONG / COMMAND_INT (``frame`` given; p[4], p[5] in degrees)."""
        c = self.copter
        after = None  # something to send after the ACK
        if cmd == A.MAV_CMD_COMPONENT_ARM_DISARM:
            force = int(p[1]) == FORCE_MAGIC
            r = c.arm(force, lk) if p[0] >= 0.5 else c.disarm(force=force, link=lk)
        elif cmd == A.MAV_CMD_DO_SET_MODE:
            r = c.set_mode(int(p[1]), lk) if int(p[0]) & A.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED else A.MAV_RESULT_DENIED
        elif cmd == A.MAV_CMD_NAV_TAKEOFF:
            r = c.takeoff(0.0 if math.isnan(p[6]) else p[6], lk)
        elif cmd == A.MAV_CMD_NAV_LAND:
            r = c.set_mode(MODES["LAND"], lk)
        elif cmd == A.MAV_CMD_NAV_RETURN_TO_LAUNCH:
            r = c.set_mode(MODES["RTL"], lk)
        elif cmd == A.MAV_CMD_CONDITION_YAW:
            r = (
                A.MAV_RESULT_DENIED
                if math.isnan(p[0])
                else c.condition_yaw(p[0], bool(p[3] == p[3] and p[3]), -1 if p[2] == -1 else 1)
            )
        elif cmd == A.MAV_CMD_DO_CHANGE_SPEED:
            r = c.change_speed(p[1])
        elif cmd == A.MAV_CMD_DO_REPOSITION:
            if frame is None:
                r = A.MAV_RESULT_UNSUPPORTED  # ArduCopter takes DO_REPOSITION only as COMMAND_INT
            else:
                if int(p[1]) & 1 and c.mode != MODES["GUIDED"]:
                    c.set_mode(MODES["GUIDED"], lk)
                # NaN or 0 latitude/longitude and NaN altitude mean "where it is", as on ArduPilot
                lat, lon = (p[4], p[5]) if (p[4] or p[5]) and not math.isnan(p[4] + p[5]) else c.latlon()
                alt = c.alt if math.isnan(p[6]) else c.alt_from(frame, p[6])
                r = A.MAV_RESULT_ACCEPTED if c.goto(lat, lon, alt) else A.MAV_RESULT_FAILED
        elif cmd == A.MAV_CMD_PREFLIGHT_REBOOT_SHUTDOWN:
            r = c.reboot(lk) if int(p[0]) == 1 else A.MAV_RESULT_UNSUPPORTED
        elif cmd == A.MAV_CMD_SET_MESSAGE_INTERVAL:
            name = MSG_NAMES.get(int(p[0]))
            r = A.MAV_RESULT_ACCEPTED if name else A.MAV_RESULT_FAILED
            us = p[1]
            if name == "HEARTBEAT":
                lk.hb_interval = 1.0 if us == 0 else (0.0 if us < 0 else us / 1e6)
            elif name:
                lk.rates[name] = 0.0 if us <= 0 else 1e6 / us
                lk.due[name] = c.t
        elif cmd == A.MAV_CMD_GET_MESSAGE_INTERVAL:
            name = MSG_NAMES.get(int(p[0]))
            r = A.MAV_RESULT_ACCEPTED if name else A.MAV_RESULT_FAILED
            if name:
                hz = (
                    (1.0 / lk.hb_interval if lk.hb_interval else 0.0)
                    if name == "HEARTBEAT"
                    else lk.rates.get(name, 0.0)
                )
                after = A.MAVLink_message_interval_message(int(p[0]), int(1e6 / hz) if hz > 0 else -1)
        elif cmd in (A.MAV_CMD_REQUEST_MESSAGE, A.MAV_CMD_GET_HOME_POSITION, A.MAV_CMD_REQUEST_AUTOPILOT_CAPABILITIES):
            mid = {
                A.MAV_CMD_GET_HOME_POSITION: A.MAVLINK_MSG_ID_HOME_POSITION,
                A.MAV_CMD_REQUEST_AUTOPILOT_CAPABILITIES: A.MAVLINK_MSG_ID_AUTOPILOT_VERSION,
            }.get(cmd, int(p[0]))
            name = MSG_NAMES.get(mid)
            if cmd == A.MAV_CMD_REQUEST_AUTOPILOT_CAPABILITIES and int(p[0]) != 1:
                name = None
            r = A.MAV_RESULT_ACCEPTED if name or mid == A.MAVLINK_MSG_ID_PARAM_VALUE else A.MAV_RESULT_FAILED
            after = self.msg(name) if name else None  # None (e.g. no home yet): accepted, nothing sent
        elif cmd == A.MAV_CMD_MISSION_START:
            r = c.set_mode(MODES["AUTO"], lk)
            first = int(p[0])
            if r == A.MAV_RESULT_ACCEPTED:
                if 0 < first < len(c.mission):
                    c.mission_seq, c.mission_done = first, False
                c.mission_started = True
        elif cmd == A.MAV_CMD_DO_SET_MISSION_CURRENT:
            seq = int(p[0])
            r = A.MAV_RESULT_ACCEPTED if 0 < seq < len(c.mission) else A.MAV_RESULT_FAILED
            if r == A.MAV_RESULT_ACCEPTED:
                c.mission_seq, c.mission_done = seq, False
                after = c.mission_current()
        elif cmd == A.MAV_CMD_DO_SET_HOME:
            if int(p[0]) == 1 or not (p[4] or p[5]):
                if c.home_set:
                    c.set_home_here()
            else:
                c.home_n, c.home_e = c.local(p[4], p[5])
                c.home_up = c.alt_from(frame if frame is not None else A.MAV_FRAME_GLOBAL, p[6])
                c.home_changed()
            r = A.MAV_RESULT_ACCEPTED
        elif cmd == A.MAV_CMD_DO_SEND_BANNER:
            self.banner()
            r = A.MAV_RESULT_ACCEPTED
        elif cmd in (A.MAV_CMD_DO_SET_SERVO, A.MAV_CMD_DO_REPEAT_SERVO):
            # channels 1-4 drive the motors: refused; any other output takes the value
            r = A.MAV_RESULT_ACCEPTED if 5 <= int(p[0]) <= 32 else A.MAV_RESULT_FAILED
        elif cmd == A.MAV_CMD_SET_EKF_SOURCE_SET:
            r = A.MAV_RESULT_ACCEPTED if 1 <= int(p[0]) <= 3 else A.MAV_RESULT_DENIED
        elif cmd in TEXTED_RESULTS:
            r, texts = TEXTED_RESULTS[cmd]
            for sev, tx in texts:
                c.text(sev, tx)
        elif cmd == A.MAV_CMD_DO_PAUSE_CONTINUE:
            r = c.pause(int(p[0]) == 0)
        elif cmd == A.MAV_CMD_DO_AUX_FUNCTION:
            c.text(A.MAV_SEVERITY_INFO, f"Invalid channel option ({int(p[0])})")
            r = A.MAV_RESULT_FAILED
        else:
            r = PASSIVE_RESULTS.get(cmd, A.MAV_RESULT_UNSUPPORTED)
        self.send(A.MAVLink_command_ack_message(cmd, r, 0, 0, m.get_srcSystem(), m.get_srcComponent()), lk)
        if after is not None:
            self.send(after, lk)
