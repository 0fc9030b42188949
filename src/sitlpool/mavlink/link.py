"""One MAVLink link per vehicle, on its own thread.

The thread sends a GCS heartbeat at 1 Hz, reads everything the vehicle sends (a slow
reader stalls SITL at speedup > 1), keeps the latest state and STATUSTEXTs, and turns
a lost vehicle into one log line and a ``lost`` state. Commands wait for their
COMMAND_ACK and report refusals with the vehicle's own STATUSTEXT reasons. A read-only
link refuses every command that would change the vehicle.
"""

from __future__ import annotations

import logging
import math
import os
import select
import socket
import struct
import threading
import time
from collections import deque

os.environ.setdefault("MAVLINK20", "1")
from pymavlink.dialects.v20 import ardupilotmega as mavlink  # noqa: E402

from ..errors import ConfigError, MavlinkError, ReadOnlyLink  # noqa: E402
from .commands import RESULTS, CommandRefused, cmd_name  # noqa: E402,F401  (re-exported)
from .endpoints import parse_endpoint  # noqa: E402
from .modes import mode_mapping, mode_name  # noqa: E402,F401  (not mavutil: it loads numpy and two dialects)
from .state import BOOTING, EKF_BAD, EKF_NEEDED, VehicleState  # noqa: E402,F401  (re-exported)
from .tlog import TlogWriter  # noqa: E402
from .wire import LOCATION_ALT_LIMIT_M, deg_e7, float32, integer, lat_lon  # noqa: E402

log = logging.getLogger("sitlpool.mavlink")
A = mavlink
FORCE_MAGIC = 21196
SETTLE_S = 0.1  # a command's STATUSTEXTs arrive within this of its COMMAND_ACK
SET_SETTLE_S = 0.5  # a PARAM_SET's answer, after a PARAM_VALUE of another value arrived


class VehicleLink:
    """A MAVLink client of one vehicle endpoint, running on its own daemon thread.

    ``state`` is one of: connecting, connected (a HEARTBEAT seen), lost (no HEARTBEAT
    for ``lost_after`` s), closed (the vehicle closed the connection), stopped.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        read_only: bool = False,
        name: str = "",
        lost_after: float = 3.0,
        connect_timeout: float | None = None,
        stream_hz: float = 4.0,
        source_system: int = 255,
        tlog: str | os.PathLike | None = None,
        request_version: bool = True,
    ):
        self.endpoint = endpoint
        self.proto, self.host, self.port = parse_endpoint(endpoint)
        self.read_only = read_only
        self.name = name or endpoint
        self.lost_after = lost_after
        self.connect_timeout = connect_timeout
        self.stream_hz = stream_hz
        self.vehicle = VehicleState()
        self.state = "connecting"
        self.error: str | None = None
        self.source_system = source_system  # our own MAVLink system id (the vehicle's is vehicle.sysid)
        self._mav = A.MAVLink(None, source_system, A.MAV_COMP_ID_MISSIONPLANNER)
        self._mav.robust_parsing = True
        self._sock: socket.socket | None = None
        self._peer = None  # udp: the vehicle's address, learnt from its first packet
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._params: dict[str, float] = {}
        self._acks: deque = deque(maxlen=20)
        self._command_lock = threading.Lock()  # one command in flight: its ACK and texts are its own
        self._last_ack = 0.0
        self._listeners: list = []  # copied on change, so the link thread iterates without a lock
        self.gcs_heartbeat = True  # False: our 1 Hz GCS HEARTBEAT stops (a lost ground station, as the vehicle sees it)
        # wall seconds between our GCS HEARTBEATs: at most 1 s of the vehicle's time, so a fast vehicle
        # (speedup 10: 10 s of sim time a wall second) never sees its ground station lost (FS_GCS_TIMEOUT 5 s)
        self.gcs_heartbeat_period = 1.0
        self.request_version = request_version  # ask for AUTOPILOT_VERSION once, after the first HEARTBEAT
        self.autopilot_version: str | None = None  # e.g. "4.7.0-dev (90700977)", once the vehicle said it
        self.tlog_path = None if tlog is None else os.fspath(tlog)
        self._tlog: TlogWriter | None = None  # every message received and sent, when asked for
        if tlog is not None:
            try:
                self._tlog = TlogWriter(tlog)
            except OSError as e:
                raise MavlinkError(f"cannot write the telemetry log {tlog}: {e.strerror or e}") from None
        self._thread = threading.Thread(target=self._run, name=f"mavlink {self.name}", daemon=True)

    # ---- life ---------------------------------------------------------------------

    def start(self) -> VehicleLink:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the thread and close the connection (the vehicle keeps running)."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(5)
        if self._tlog is not None:
            self._tlog.close()
        self._set_state("stopped")

    @property
    def connected(self) -> bool:
        return self.state == "connected"

    def _set_state(self, state: str, error: str | None = None) -> None:
        with self._cond:
            if self.state in ("stopped",) and state != "stopped":
                return
            if state != self.state and state in ("lost", "closed"):
                log.warning("%s: vehicle %s%s", self.name, state, f" ({error})" if error else "")
            self.state = state
            if error:
                self.error = error
            self._cond.notify_all()

    def _connect(self) -> socket.socket | None:
        deadline = None if self.connect_timeout is None else time.monotonic() + self.connect_timeout
        while not self._stop.is_set():
            try:
                if self.proto == "tcp":
                    s = socket.create_connection((self.host, self.port), timeout=2)
                elif self.proto == "udp":  # listen: the vehicle sends here; we answer its address
                    family, addr = _udp_address(self.host, self.port)
                    s = socket.socket(family, socket.SOCK_DGRAM)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind(addr)
                else:  # udpout: we send first, so a listening vehicle learns our address
                    family, addr = _udp_address(self.host, self.port)
                    s = socket.socket(family, socket.SOCK_DGRAM)
                    s.connect(addr)
                s.setblocking(False)
                if self.proto == "tcp":
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return s
            except OSError as e:
                if deadline is not None and time.monotonic() > deadline:
                    self._set_state("closed", f"cannot connect to {self.endpoint}: {e.strerror or e}")
                    return None
                self._stop.wait(0.01)
        return None

    def _run(self) -> None:
        try:
            s = self._connect()
            if s is None:
                return
            self._sock = s
            next_hb = 0.0
            while not self._stop.is_set():
                now = time.monotonic()
                if now >= next_hb:
                    next_hb = now + self.gcs_heartbeat_period
                    if self.gcs_heartbeat:
                        self._send(
                            A.MAVLink_heartbeat_message(
                                A.MAV_TYPE_GCS, A.MAV_AUTOPILOT_INVALID, 0, 0, A.MAV_STATE_ACTIVE, 3
                            )
                        )
                hb = self.vehicle.last_heartbeat
                if self.state == "connected" and hb is not None and now - hb > self.lost_after:
                    self._set_state("lost", f"no HEARTBEAT for {now - hb:.1f}s")
                r, _, _ = select.select([s], [], [], max(0.0, min(0.2, next_hb - now)))
                if not r:
                    continue
                try:
                    data, peer = s.recvfrom(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError as e:
                    self._set_state("closed", f"connection error: {e.strerror or e}")
                    return
                if not data and self.proto == "tcp":
                    self._set_state("closed", "the vehicle closed the connection")
                    return
                if self.proto == "udp":
                    self._peer = peer
                try:
                    msgs = self._mav.parse_buffer(data) or []
                except Exception:  # a corrupt frame: skip it, as robust parsing does
                    msgs = []
                tlog = self._tlog
                for m in msgs:
                    if tlog is not None and m.get_type() != "BAD_DATA":
                        tlog.write(m.get_msgbuf())
                    self._handle(m)
                    for fn in self._listeners:
                        try:
                            fn(m)
                        except Exception:  # a listener's bug must not kill the link
                            log.exception("%s: listener %r failed on %s", self.name, fn, m.get_type())
        finally:
            if self._sock is not None:
                self._sock.close()
            if self._tlog is not None:
                self._tlog.close()  # nothing more is received; a log collector may move it now

    def _send(self, msg) -> None:
        s = self._sock
        if s is None:
            raise MavlinkError(f"{self.name}: not connected to the vehicle yet")
        try:
            data = msg.pack(self._mav)
        except (struct.error, OverflowError, TypeError, ValueError) as e:
            # a value its MAVLink field cannot carry: refused here, before a byte is sent
            raise MavlinkError(
                f"{self.name}: {msg.get_type()} cannot be sent: a value does not fit its MAVLink field ({e})"
            ) from None
        with self._send_lock:
            try:
                if self.proto == "tcp":
                    s.setblocking(True)
                    s.settimeout(2)
                    s.sendall(data)
                    s.setblocking(False)
                elif self.proto == "udp":
                    if self._peer is not None:  # nothing to answer before the vehicle spoke
                        s.sendto(data, self._peer)
                else:
                    s.send(data)
            except OSError as e:
                raise MavlinkError(f"{self.name}: send failed: {e.strerror or e}") from None
            if self._tlog is not None:
                self._tlog.write(data)

    def send(self, msg) -> None:
        """Send a pymavlink message object on this link (checks nothing: call
        ``require_writable`` first for anything that changes the vehicle)."""
        self._send(msg)

    def add_listener(self, fn) -> None:
        """Call ``fn(msg)`` on the link thread for every message received. ``fn`` must not
        block (the reader stalls SITL); its exceptions are logged and never stop the link."""
        with self._cond:
            self._listeners = [*self._listeners, fn]

    def remove_listener(self, fn) -> None:
        with self._cond:
            self._listeners = [f for f in self._listeners if f is not fn]

    # ---- what the vehicle says ------------------------------------------------------

    def _handle(self, m) -> None:
        t = m.get_type()
        with self._cond:
            first = self.vehicle.last_heartbeat is None
            if self.vehicle.update(m):  # the vehicle's HEARTBEAT (not another GCS's)
                if self.state != "connected":
                    self.state = "connected"
                    if first and (self.stream_hz > 0 or self.request_version):
                        threading.Thread(target=self._request_streams, daemon=True).start()
            elif t == "PARAM_VALUE":
                self._params[m.param_id] = m.param_value
                if m.param_id == "SIM_SPEEDUP" and m.param_value > 0:  # whoever set it: keep beating each sim second
                    self.gcs_heartbeat_period = min(1.0, 1.0 / m.param_value)
            elif t == "COMMAND_ACK":
                self._acks.append((m.command, m.result, time.monotonic()))
            elif t == "AUTOPILOT_VERSION" and m.get_srcSystem() == self.vehicle.sysid:
                self.autopilot_version = version_text(m)
            self._cond.notify_all()

    def _request_streams(self) -> None:
        try:
            if self.stream_hz > 0:
                self._send(
                    A.MAVLink_request_data_stream_message(
                        self.vehicle.sysid or 1, 1, A.MAV_DATA_STREAM_ALL, int(self.stream_hz), 1
                    )
                )
            if self.request_version and self.autopilot_version is None:
                # once, unacknowledged: the answer (if any) lands in autopilot_version
                want = (A.MAVLINK_MSG_ID_AUTOPILOT_VERSION, 0, 0, 0, 0, 0, 0)
                self._send(
                    A.MAVLink_command_long_message(self.vehicle.sysid or 1, 1, A.MAV_CMD_REQUEST_MESSAGE, 0, *want)
                )
        except MavlinkError:
            pass

    def wait(self, pred, timeout: float) -> bool:
        """Wait until ``pred(self.vehicle)`` is true (re-checked on every message)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not pred(self.vehicle):
                left = deadline - time.monotonic()
                if left <= 0 or self.state in ("closed", "stopped"):
                    return bool(pred(self.vehicle))
                self._cond.wait(min(left, 0.2))
            return True

    def wait_heartbeat(self, timeout: float) -> bool:
        return self.wait(lambda v: v.last_heartbeat is not None, timeout)

    def texts_since(self, t0: float) -> list[str]:
        return [t for when, _, t in list(self.vehicle.texts) if when >= t0]

    def reasons_since(self, t0: float, settle: float = SETTLE_S) -> list[str]:
        """The reasons the vehicle gave at or after unix time ``t0`` (a command's send time):
        its NOTICE-or-worse texts (ArduPilot's Arm:/PreArm:/Mode change failed texts; its
        INFO texts, e.g. "Arming motors", are news, not reasons). They follow the ACK, so
        wait up to ``settle`` s for one. Never a text from before ``t0``."""

        def reasons():
            return [t for when, sev, t in list(self.vehicle.texts) if when >= t0 and sev <= A.MAV_SEVERITY_NOTICE]

        self.wait(lambda _v: bool(reasons()), settle)
        return list(dict.fromkeys(reasons()))[-3:]

    # ---- commands -------------------------------------------------------------------

    def require_writable(self, what: str) -> None:
        """Raise ReadOnlyLink (read-only attach) or MavlinkError (not connected) before ``what``."""
        self._writable(what)

    def _writable(self, what: str) -> None:
        if self.read_only:
            raise ReadOnlyLink(
                f"{self.name} is attached read-only: '{what}' would change a vehicle that someone else runs; "
                "attach with control=True if you own it"
            )
        if self.state != "connected":
            raise MavlinkError(
                f"{self.name}: vehicle not connected ({self.state}{': ' + self.error if self.error else ''})"
            )

    def command(self, cmd: int, *params: float, timeout: float = 5.0, what: str = "") -> None:
        """COMMAND_LONG and wait for its ACK; raise CommandRefused (a MavlinkError) with the
        vehicle's reasons, said after the command was sent, if refused."""
        what = what or cmd_name(cmd)
        if len(params) > 7:
            raise MavlinkError(f"{what}: COMMAND_LONG carries 7 parameters, not {len(params)}")
        p = [float32(x, f"{what}: parameter {i}") for i, x in enumerate(params, 1)] + [0.0] * (7 - len(params))
        self._command(
            cmd, what, timeout, lambda: A.MAVLink_command_long_message(self.vehicle.sysid or 1, 1, cmd, 0, *p)
        )

    def command_int(
        self,
        cmd: int,
        frame: int,
        p1: float = 0,
        p2: float = 0,
        p3: float = 0,
        p4: float = 0,
        x: int = 0,
        y: int = 0,
        z: float = 0,
        what: str = "",
        timeout: float = 5.0,
    ) -> None:
        """COMMAND_INT (positions as degE7 integers, as DO_REPOSITION needs), acknowledged as ``command``."""
        what = what or cmd_name(cmd)
        p1, p2, p3, p4, z = (
            float32(v, f"{what}: {n}")
            for n, v in zip(("param1", "param2", "param3", "param4", "z"), (p1, p2, p3, p4, z))
        )
        x, y = (integer(v, f"{what}: {n}", "int32") for n, v in (("x", x), ("y", y)))
        self._command(
            cmd,
            what,
            timeout,
            lambda: A.MAVLink_command_int_message(
                self.vehicle.sysid or 1,
                1,
                frame,
                cmd,
                0,
                0,
                float(p1),
                float(p2),
                float(p3),
                float(p4),
                int(x),
                int(y),
                float(z),
            ),
        )

    def _command(self, cmd: int, what: str, timeout: float, make) -> None:
        self._writable(what)
        # the texts of the previous command follow its ACK: let them arrive before this one is
        # sent, so that they are never taken for this command's reasons
        with self._command_lock:
            quiet = self._last_ack + SETTLE_S - time.monotonic()
            if quiet > 0:
                time.sleep(quiet)
            try:
                self._command_once(cmd, what, timeout, make)
            finally:
                self._last_ack = time.monotonic()

    def _command_once(self, cmd: int, what: str, timeout: float, make) -> None:
        t0, t0_wall = time.monotonic(), time.time()  # texts stamped at or after this came after the command
        self._send(make())
        got: list = []

        def acked(_v):
            for c, r, when in self._acks:
                if c == cmd and when >= t0:
                    got.append(r)
                    return True
            return False

        if not self.wait(acked, timeout):
            raise MavlinkError(
                f"{self.name}: no COMMAND_ACK for {what} within {timeout:g}s; is the vehicle still there?"
            )
        result = got[0]
        if result != A.MAV_RESULT_ACCEPTED:
            reasons = self.reasons_since(t0_wall)
            why = "; ".join(reasons) or "no reason given"
            raise CommandRefused(
                f"{what} refused by the vehicle ({RESULTS.get(result, result)}): {why}", what, result, reasons
            )

    def arm(self, force: bool = False) -> None:
        self.command(A.MAV_CMD_COMPONENT_ARM_DISARM, 1, FORCE_MAGIC if force else 0, what="arm")

    def disarm(self, force: bool = False) -> None:
        self.command(A.MAV_CMD_COMPONENT_ARM_DISARM, 0, FORCE_MAGIC if force else 0, what="disarm")

    def set_mode(self, mode: str) -> None:
        mapping = mode_mapping(self.vehicle.vehicle_type)
        key = mode.upper().strip()
        if key not in mapping:
            raise MavlinkError(f"unknown mode {mode!r}; this vehicle has: {', '.join(sorted(mapping))}")
        self.command(A.MAV_CMD_DO_SET_MODE, A.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED, mapping[key], what=f"mode {key}")
        self.wait(lambda v: v.mode == key, 3.0)  # the HEARTBEAT that shows it

    def takeoff(self, altitude_m: float) -> None:
        altitude_m = float32(altitude_m, "takeoff altitude", 0, LOCATION_ALT_LIMIT_M, "m")
        self.command(A.MAV_CMD_NAV_TAKEOFF, 0, 0, 0, 0, 0, 0, altitude_m, what=f"takeoff to {altitude_m:g} m")

    def goto(self, lat: float, lon: float, altitude_m: float) -> None:
        lat, lon = lat_lon(lat, lon, "goto")
        altitude_m = float32(altitude_m, "goto altitude", -LOCATION_ALT_LIMIT_M, LOCATION_ALT_LIMIT_M, "m")
        self._writable("goto")
        self._send(
            A.MAVLink_set_position_target_global_int_message(
                0,
                self.vehicle.sysid or 1,
                1,
                A.MAV_FRAME_GLOBAL_RELATIVE_ALT_INT,
                0b110111111000,
                deg_e7(lat),
                deg_e7(lon),
                altitude_m,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
            )
        )

    def land(self) -> None:
        self.command(A.MAV_CMD_NAV_LAND, what="land")

    def rtl(self) -> None:
        self.command(A.MAV_CMD_NAV_RETURN_TO_LAUNCH, what="rtl")

    def get_param(self, name: str, timeout: float = 3.0) -> float:
        key = name.upper()
        if self.state != "connected":
            raise MavlinkError(f"{self.name}: vehicle not connected ({self.state})")
        with self._cond:
            self._params.pop(key, None)
        self._send(A.MAVLink_param_request_read_message(self.vehicle.sysid or 1, 1, key.encode(), -1))
        if not self.wait(lambda _v: key in self._params, timeout):
            raise MavlinkError(
                f"parameter {key} did not answer within {timeout:g}s: the vehicle has no such parameter; check the name"
            )
        return self._params[key]

    def set_param(self, name: str, value: float, timeout: float = 3.0) -> float:
        key = name.upper()
        try:
            value = float(value)
        except (TypeError, ValueError, OverflowError):
            raise MavlinkError(f"parameter {key}: {value!r} is not a number") from None
        if not math.isfinite(value):
            raise MavlinkError(f"parameter {key}: {value} is not a finite number; give a real value")
        try:
            value = float32(value, f"parameter {key}")
        except ConfigError as e:
            raise MavlinkError(str(e)) from None
        self._writable(f"set parameter {key}")
        self.get_param(key, timeout)  # refuse unknown names clearly: ArduPilot ignores them silently
        with self._cond:
            self._params.pop(key, None)
        self._send(
            A.MAVLink_param_set_message(self.vehicle.sysid or 1, 1, key.encode(), float(value), A.MAV_PARAM_TYPE_REAL32)
        )
        # a PARAM_VALUE of the old value may still be on its way (a parameter list someone
        # asked for, a watcher's read): the set's own answer is awaited a little longer
        other: list[float] = []

        def answered(_v) -> bool:
            if key not in self._params:
                return False
            if math.isclose(self._params[key], float(value), rel_tol=1e-5, abs_tol=1e-6):
                return True
            other[:] = other or [time.monotonic()]
            return time.monotonic() - other[0] > SET_SETTLE_S

        if not self.wait(answered, timeout) and key not in self._params:
            raise MavlinkError(f"parameter {key}: no PARAM_VALUE after setting it")
        got = self._params[key]
        if not math.isclose(got, float(value), rel_tol=1e-5, abs_tol=1e-6):
            raise MavlinkError(f"parameter {key}: the vehicle kept {got:g} instead of {value:g} (out of range?)")
        return got

    def reboot(self) -> None:
        self.command(A.MAV_CMD_PREFLIGHT_REBOOT_SHUTDOWN, 1, what="reboot")


_VERSION_TYPES = {0: "-dev", 64: "-alpha", 128: "-beta", 192: "-rc", 255: ""}


def version_text(m) -> str:
    """AUTOPILOT_VERSION's firmware version as ArduPilot's banner shows it: ``4.7.0-dev (90700977)``."""
    v = int(m.flight_sw_version)
    text = f"{v >> 24 & 0xFF}.{v >> 16 & 0xFF}.{v >> 8 & 0xFF}{_VERSION_TYPES.get(v & 0xFF, f'-type{v & 0xFF}')}"
    git = bytes(int(b) & 0xFF for b in m.flight_custom_version).split(b"\0")[0].decode("ascii", "replace")
    git = "".join(c for c in git if c.isalnum())
    return f"{text} ({git})" if git else text


def _udp_address(host: str, port: int):
    """The family and address of a UDP endpoint (IPv4 or IPv6)."""
    family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    return family, addr
