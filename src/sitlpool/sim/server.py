"""The simulator process: SITL's ports, one client per TCP port, the main loop, and MAVLink in
(a table from message type to handler; commands in ``commands``, missions in
``mission_protocol``)."""

from __future__ import annotations

import math
import os
import selectors
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..instances import ports as instance_ports
from . import commands, telemetry
from .copter import Copter, mavlink
from .dataflash_observer import DataFlashObserver
from .ftp import FtpServer
from .links import Link
from .mission_protocol import MissionProtocol
from .params import SYSID, Params

A = mavlink
TICK_S = 0.04  # wall seconds per main-loop tick (25 Hz)
BOOT_S = 0.45  # wall seconds from the first client to "ArduPilot Ready" (as real SITL)
MAX_SUBSTEP = 0.05  # sim seconds per physics sub-step
FAST_SHARE = 0.8  # SIM_SPEEDUP 0: the share of each tick spent stepping (the rest reads sockets)
STREAMS = telemetry.STREAMS
OUTBUF_LIMIT = 1 << 20
STATUSTEXT_ID = A.MAVLINK_MSG_ID_STATUSTEXT
# a PARAM_SET of this name seeds the wind's turbulence live (a sitlpool extra: no such parameter
# exists, so, as ArduPilot does for any unknown name, nothing answers and real SITL ignores it)
WIND_SEED = "SIM_WIND_SEED"

STREAM_PARAMS = {
    "RAW_SENS": A.MAV_DATA_STREAM_RAW_SENSORS,
    "EXT_STAT": A.MAV_DATA_STREAM_EXTENDED_STATUS,
    "RC_CHAN": A.MAV_DATA_STREAM_RC_CHANNELS,
    "POSITION": A.MAV_DATA_STREAM_POSITION,
    "EXTRA1": A.MAV_DATA_STREAM_EXTRA1,
    "EXTRA2": A.MAV_DATA_STREAM_EXTRA2,
    "EXTRA3": A.MAV_DATA_STREAM_EXTRA3,
}


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


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
    wind_seed: int = 0


class Simulator:
    HANDLERS: dict[str, Handler]  # below the class

    def __init__(self, cfg: SimConfig):
        self.cfg = cfg
        self.ports = instance_ports(cfg.instance, cfg.base_port)
        self.parent = os.getppid()
        self.sel = selectors.DefaultSelector()
        self.listeners: dict[str, socket.socket] = {}
        self.links: dict[str, Link] = {}
        self.reboot_requested = False
        self.rc_sock: socket.socket | None = None
        self.started = 0.0  # wall time of the first client (boot starts)
        self.boot_heartbeat = False
        Path("logs").mkdir(exist_ok=True)
        self.params = Params(Path("eeprom.bin"), cfg.defaults, cfg.wipe, cfg.sysid, cfg.speedup)
        self.copter = Copter(self.params, cfg.home, cfg.ready_delay, self.send, self.request_reboot)
        self.copter.wind.reseed(cfg.wind_seed)
        # logs/NNNNNNNN.BIN as ArduCopter writes them: from arming (or boot with LOG_DISARMED)
        self.copter.observers.append(DataFlashObserver(Path("logs")))
        self.ftp_server: FtpServer | None = None  # made at a client's first MAVFTP request
        self.missions = MissionProtocol(self)
        self.copter.fence_items = lambda: list(getattr(self.missions, "fence", []))  # FENCE_TYPE bit 4
        self.copter.on_home = self._home_changed
        self.copter.on_health_change = lambda: self.send(self.msg("SYS_STATUS"))

    def msg(self, name: str) -> Any:
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

    def send(self, msg: Any, link: Link | None = None) -> None:
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
            if self.cfg.speedup > 0:
                sim_dt = (now - last) * self.cfg.speedup
            else:  # SIM_SPEEDUP 0: unthrottled, as real SITL (sub-steps for most of the tick)
                sim_dt = math.inf
            # at any speedup at most most of a tick is spent stepping: what does not fit is dropped
            # (a SIM_SPEEDUP of 1e9 runs as fast as it can, as 0 does, and the links stay read)
            budget = now + TICK_S * FAST_SHARE
            last = now
            while sim_dt > 1e-9:
                d = min(sim_dt, MAX_SUBSTEP)
                self.copter.step(d)
                sim_dt -= d
                self.telemetry()  # per sub-step: stream rates hold in sim time at any speedup
                if time.monotonic() > budget:
                    break
            if self.reboot_requested:
                self.reboot()

    def telemetry(self) -> None:
        t = self.copter.t
        for lk in list(self.links.values()):
            self.missions.timers(lk, t)
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
        if self.rc_sock is None:
            return
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

    def handle(self, m: Any, lk: Link) -> None:
        t = m.get_type()
        target = getattr(m, "target_system", None)
        if target not in (None, 0, int(self.params.get(SYSID, 1))) and t not in ("PING", "TIMESYNC"):
            return
        if t in MissionProtocol.MESSAGES and not (t in ("MISSION_ITEM", "MISSION_ITEM_INT") and m.current == 2):
            self.missions.handle(t, m, lk)
            return
        handler = self.HANDLERS.get(t)
        if handler is not None:
            handler(self, m, lk)

    def _command_long(self, m: Any, lk: Link) -> None:
        p = [m.param1, m.param2, m.param3, m.param4, m.param5, m.param6, m.param7]
        self.command(commands.Call(m.command, p, lk), m)

    def _command_int(self, m: Any, lk: Link) -> None:
        p = [m.param1, m.param2, m.param3, m.param4, m.x / 1e7, m.y / 1e7, m.z]
        self.command(commands.Call(m.command, p, lk, frame=m.frame), m)

    def command(self, call: commands.Call, m: Any) -> None:
        """COMMAND_LONG / COMMAND_INT: the handler's result in a COMMAND_ACK, then what it left to send."""
        c = self.copter
        # what the command says goes out after its ACK, as ArduPilot queues texts (while it boots
        # it sends them at once, before the ACK)
        c.held_texts = None if c.booting else []
        try:
            r = commands.handle(self, call)
        finally:
            held, c.held_texts = c.held_texts, None
        self.send(A.MAVLink_command_ack_message(call.cmd, r, 0, 0, m.get_srcSystem(), m.get_srcComponent()), call.link)
        if call.after is not None:
            self.send(call.after, call.link)
        for severity, text in held or ():
            c.text(severity, text)

    def _set_mode(self, m: Any, lk: Link) -> None:
        self.copter.set_mode(m.custom_mode, lk)

    def _param_request_list(self, m: Any, lk: Link) -> None:
        self.banner()  # ArduPilot sends its banner when a GCS fetches the parameters
        for i, name in enumerate(self.params.names):
            self.param_value(name, lk, i)

    def _param_request_read(self, m: Any, lk: Link) -> None:
        names = self.params.names
        name = m.param_id if m.param_index < 0 else (names[m.param_index] if m.param_index < len(names) else None)
        name = name.rstrip("\x00") if isinstance(name, str) else name
        if name in self.params.values:
            self.param_value(name, lk)

    def _param_set(self, m: Any, lk: Link) -> None:
        if not math.isfinite(m.param_value):
            return  # NaN or inf: ignored, the old value kept (as ArduCopter 4.7 does, measured)
        name = m.param_id.rstrip("\x00") if isinstance(m.param_id, str) else m.param_id
        if name == WIND_SEED:  # not a parameter (ArduPilot ignores it too): the turbulence's seed
            self.copter.wind.reseed(int(m.param_value))
            return
        if not self.params.set(name, m.param_value):
            return
        if name == "SIM_SPEEDUP" and m.param_value >= 0:
            self.cfg.speedup = float(m.param_value)  # live, as SITL: 0 = as fast as it can
        if name[:3] == "MAV" and name[3:4].isdigit() and name[5:] in STREAM_PARAMS:
            link = self.links.get(f"serial{int(name[3]) - 1}")
            if link is not None:
                self.apply_stream_params(link)
        self.param_value(name, None)  # every GCS hears of a change
        self.copter.notify("on_param", name, self.params[name])

    def _request_data_stream(self, m: Any, lk: Link) -> None:
        ids = list(STREAMS) if m.req_stream_id == A.MAV_DATA_STREAM_ALL else [m.req_stream_id]
        hz = float(m.req_message_rate) if m.start_stop else 0.0
        for sid in ids:
            for name in STREAMS.get(sid, ()):
                lk.rates[name] = hz
                lk.due[name] = self.copter.t
        # ArduPilot keeps the asked rate in the port's MAVn_ parameters (in RAM: not after a reboot)
        n = int(lk.name[-1]) + 1
        suffixes = [k for k, sid in STREAM_PARAMS.items() if sid in ids]
        if m.req_stream_id == A.MAV_DATA_STREAM_ALL:
            suffixes += ["RAW_CTRL", "ADSB"]
        self.params.set_in_ram({f"MAV{n}_{k}": hz for k in suffixes})

    def _global_target(self, m: Any, lk: Link) -> None:
        c = self.copter
        if (m.type_mask & 0b111) != 0b111:
            c.goto(m.lat_int / 1e7, m.lon_int / 1e7, c.alt_from(m.coordinate_frame, m.alt))
        elif (m.type_mask & 0b111000) != 0b111000:
            c.set_velocity(m.vx, m.vy, m.vz)

    def _guided_mission_item(self, m: Any, lk: Link) -> None:
        """A MISSION_ITEM(_INT) with current=2: a guided go-to (dronekit's simple_goto)."""
        c = self.copter
        scale = 1e7 if m.get_type() == "MISSION_ITEM_INT" else 1.0
        ok = c.goto(m.x / scale, m.y / scale, c.alt_from(m.frame, m.z))
        result = A.MAV_MISSION_ACCEPTED if ok else A.MAV_MISSION_ERROR
        self.send(A.MAVLink_mission_ack_message(m.get_srcSystem(), m.get_srcComponent(), result, 0), lk)

    def _ping(self, m: Any, lk: Link) -> None:
        if m.target_system == 0:
            self.send(A.MAVLink_ping_message(m.time_usec, m.seq, m.get_srcSystem(), m.get_srcComponent()), lk)

    def _timesync(self, m: Any, lk: Link) -> None:
        if m.tc1 == 0:  # answered on sim time, as SITL's clock is
            self.send(A.MAVLink_timesync_message(int(self.copter.t * 1e9), m.ts1), lk)

    def _heartbeat(self, m: Any, lk: Link) -> None:
        if m.get_srcSystem() == int(self.params.get("MAV_GCS_SYSID", 255)):
            self.copter.gcs_heartbeat()  # the GCS failsafe's clock (FS_GCS_ENABLE)

    def banner(self) -> None:
        for tx in (*telemetry.BANNER, telemetry.frame_text(self.copter)):
            self.copter.text(A.MAV_SEVERITY_INFO, tx)

    def ftp(self, m: Any, lk: Link) -> None:
        if self.ftp_server is None:
            self.ftp_server = FtpServer(self.params)
        for reply in self.ftp_server.handle(bytes(m.payload)):
            self.send(
                A.MAVLink_file_transfer_protocol_message(0, m.get_srcSystem(), m.get_srcComponent(), list(reply)), lk
            )

    def _local_target(self, m: Any, lk: Link | None = None) -> bool:
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


Handler = Callable[[Simulator, Any, Link], Any]
Simulator.HANDLERS = {  # MAVLink message type -> handler (MISSION_* go to MissionProtocol first)
    "COMMAND_LONG": Simulator._command_long,
    "COMMAND_INT": Simulator._command_int,
    "SET_MODE": Simulator._set_mode,
    "PARAM_REQUEST_LIST": Simulator._param_request_list,
    "PARAM_REQUEST_READ": Simulator._param_request_read,
    "PARAM_SET": Simulator._param_set,
    "REQUEST_DATA_STREAM": Simulator._request_data_stream,
    "SET_POSITION_TARGET_GLOBAL_INT": Simulator._global_target,
    "SET_POSITION_TARGET_LOCAL_NED": Simulator._local_target,
    "MISSION_ITEM": Simulator._guided_mission_item,
    "MISSION_ITEM_INT": Simulator._guided_mission_item,
    "FILE_TRANSFER_PROTOCOL": Simulator.ftp,
    "RC_CHANNELS_OVERRIDE": lambda sim, m, lk: sim.copter.rc_override(m.chan3_raw),
    "PING": Simulator._ping,
    "TIMESYNC": Simulator._timesync,
    "HEARTBEAT": Simulator._heartbeat,
}
