"""Ground stations watching a vehicle through sitlpool's own link (no serial port taken).

A ``Forwarder`` is a listener on one ``VehicleLink``: every message the vehicle sends is
copied, byte for byte, to each output (``udp:HOST:PORT``: sent there, as MAVProxy's
``--out``; ``tcpin:HOST:PORT``: ground stations connect). The link thread appends each message
to a bounded queue and, at the last message of each read from the vehicle (the link hands out
every message its parser counted: ``total_packets_received``), sends them all at once, packed
into datagrams, with non-blocking sends that never wait for a watcher. (Waking the forwarder's
thread to send instead cost a hop through the scheduler and the GIL per partial batch: a p99
of 20-40 ms on a loaded machine.) Everything that may wait is the forwarder thread's: reading
the watchers, accepting TCP watchers, writing a TCP watcher's backlog, and sending what a read
left queued should the count ever disagree. So a slow, flooding or vanished watcher never
holds the link (a full queue drops the oldest messages, a TCP watcher that stops reading is
disconnected, a flood is no longer read until its second ends).

Read-only (the default), nothing a watcher sends reaches the vehicle except requests that
change nothing, and requests for parameters and missions are answered by sitlpool
(``watch_answers``). ``control=True`` (only on a writable link: the caller checks the lease,
as ``attach`` does) forwards everything except the watcher's HEARTBEATs (a watcher must never
hide the loss of the agent's ground station from the vehicle's failsafe); the vehicle's
mission-protocol messages then reach the watchers too.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import queue
import select
import socket
import threading
import time
from collections import deque
from typing import Any

from ..errors import ConfigError, MavlinkError
from . import params
from .endpoints import parse_endpoint
from .link import A, VehicleLink
from .watch_answers import OWN_COMPONENT, Answers, Watcher

log = logging.getLogger("sitlpool.watch")

MAX_QUEUE = 4000  # vehicle messages waiting for the forwarder thread; beyond, the oldest go
TCP_BUFFER = 512 * 1024  # bytes waiting for one TCP watcher; beyond, it stopped reading: disconnected
TCP_SNDBUF = 64 * 1024  # the kernel's share of it
DATAGRAM = 1400  # bytes of messages sent in one UDP datagram (below any path's MTU)
MAX_TCP_CLIENTS = 8  # per tcpin output
IN_BYTES_PER_S = 64 * 1024  # read from one watcher per second; beyond, unread until the next second
SAFETY_S = 0.1  # the forwarder thread sends what is still queued at least this often

MISSION_PROTOCOL = set(
    """
    MISSION_COUNT MISSION_ITEM MISSION_ITEM_INT MISSION_REQUEST MISSION_REQUEST_INT MISSION_ACK
    """.split()
)


def parse_output(text: str, allow_remote: bool = False) -> tuple[str, str, int]:
    """``udp:HOST:PORT`` (``udpout:`` too: sent there) or ``tcpin:HOST:PORT`` (listened on)
    -> (proto, host, port). A host that is not this machine's loopback needs ``allow_remote``."""
    if not isinstance(text, str):
        raise ConfigError(f"watch output {text!r} is not udp:HOST:PORT or tcpin:HOST:PORT")
    proto, _, rest = text.partition(":")
    if proto not in ("udp", "udpout", "tcpin"):
        raise ConfigError(
            f"watch output {text!r}: use udp:HOST:PORT (sent to a ground station listening there) "
            "or tcpin:HOST:PORT (ground stations connect), e.g. udp:127.0.0.1:14550"
        )
    any_port = proto == "tcpin" and rest.endswith(":0")  # tcpin:HOST:0: any free port (``address`` says which)
    try:
        _, host, port = parse_endpoint(f"tcp:{rest[:-1] + '1' if any_port else rest}")
        port = 0 if any_port else port
    except ConfigError:
        raise ConfigError(f"watch output {text!r} is not {proto}:HOST:PORT (e.g. {proto}:127.0.0.1:14550)") from None
    if not allow_remote and not is_loopback(host):
        raise ConfigError(
            f"watch output {text!r}: {host} is not this machine's loopback; the vehicle's telemetry leaves "
            "this machine only if you allow it (--allow-remote, or allow_remote=True)"
        )
    return ("udp" if proto == "udpout" else proto), host, port


def is_loopback(host: str) -> bool:
    """Every address ``host`` resolves to is a loopback address."""
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError, ValueError):
        return False
    addrs = set()
    for _, _, _, _, sockaddr in infos:
        try:
            ip = ipaddress.ip_address(str(sockaddr[0]).partition("%")[0])
        except ValueError:
            return False
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        addrs.add(mapped or ip)
    return bool(addrs) and all(ip.is_loopback for ip in addrs)


class Forwarder(Answers):
    """Forward ``link``'s vehicle to ``outputs``; ``close()`` stops (the link keeps running)."""

    def __init__(
        self,
        link: VehicleLink,
        outputs: list[str],
        *,
        control: bool = False,
        allow_remote: bool = False,
    ):
        if isinstance(outputs, str):
            outputs = [outputs]
        if not outputs:
            raise ConfigError("watch needs at least one output, e.g. udp:127.0.0.1:14550")
        if control and link.read_only:
            raise ConfigError(f"{link.name} is attached read-only: a watcher cannot control it through this link")
        self.link = link
        self.control = control
        self.outputs = [parse_output(o, allow_remote) for o in outputs]
        self.texts = list(outputs)
        self.watchers: list[Watcher] = []
        self._listeners: list[socket.socket] = []  # tcpin sockets
        self._lock = threading.Lock()  # watchers and their buffers (the worker sends too)
        self._q: deque = deque(maxlen=MAX_QUEUE)
        self.dropped = 0  # vehicle messages dropped because the forwarder fell behind
        self.forwarded = 0  # messages taken from the queue and sent to the watchers
        self._pending = False
        # the link's parser: how many messages it returned so far; we were handed _handed of them
        self._parser = getattr(link, "_mav", None)
        self._handed: int | None = None  # None: not counted yet (we may join in the middle of a read)
        self._read_sends = 0  # sends from the link's thread, at the end of a read
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._stop = threading.Event()
        self._params: dict[str, tuple[float, int, int, int]] = {}  # name -> value, type, index, count
        self._by_index: dict[int, str] = {}
        self._param_count: int | None = None
        self._jobs: queue.Queue = queue.Queue(maxsize=32)
        self._answers = A.MAVLink(None, 1, OWN_COMPONENT)  # our own answers, as the vehicle's
        try:
            self._open_outputs()
        except BaseException:
            self._close_sockets()
            raise
        self._thread = threading.Thread(target=self._run, name=f"watch {link.name}", daemon=True)
        self._worker = threading.Thread(target=self._work, name=f"watch answers {link.name}", daemon=True)
        self._thread.start()
        self._worker.start()
        link.add_listener(self)

    # ---- outputs --------------------------------------------------------------------

    def _open_outputs(self) -> None:
        for (proto, host, port), text in zip(self.outputs, self.texts):
            family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
            try:
                if proto == "udp":
                    s = socket.socket(family, socket.SOCK_DGRAM)
                    s.connect(addr)  # replies come from there only
                    s.setblocking(False)
                    self.watchers.append(Watcher(s, text, tcp=False))
                else:
                    s = socket.socket(family, socket.SOCK_STREAM)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    self._listeners.append(s)
                    s.bind(addr)
                    s.listen(MAX_TCP_CLIENTS)
                    s.setblocking(False)
            except OSError as e:
                raise ConfigError(f"watch output {text}: {e.strerror or e}") from None

    def _close_sockets(self) -> None:
        for s in [w.sock for w in self.watchers] + self._listeners:
            try:
                s.close()
            except OSError:
                pass
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    @property
    def address(self) -> list[tuple[str, int]]:
        """Where each tcpin output listens (its port, when 0 was asked)."""
        return [s.getsockname()[:2] for s in self._listeners]

    def close(self) -> None:
        self.link.remove_listener(self)
        self._stop.set()
        self._wake()
        if threading.current_thread() not in (self._thread, self._worker):
            self._thread.join(5)
            self._worker.join(5)
        with self._lock:
            self._close_sockets()
            self.watchers = []

    def info(self) -> dict:
        with self._lock:
            ws = list(self.watchers)
        return {
            "outputs": self.texts,
            "control": self.control,
            "watchers": [w.name for w in ws if not w.closed],
            "forwarded": self.forwarded,
            "dropped": self.dropped,
            "refused": sum(w.refused for w in ws),
        }

    # ---- the link thread: one append per message ------------------------------------

    def __call__(self, m) -> None:
        t = m.get_type()
        if t != "BAD_DATA":
            if t == "PARAM_VALUE":
                self._keep_param(m)
            if t not in MISSION_PROTOCOL or self.control:  # else the link's own exchange: watchers get theirs from us
                if len(self._q) == MAX_QUEUE:
                    self.dropped += 1
                self._q.append(m.get_msgbuf())
        if self._parser is None:  # a link without a parser we can count on: the forwarder thread sends
            if self._q and not self._pending:
                self._pending = True
                self._wake()
            return
        parsed = self._parser.total_packets_received
        self._handed = parsed if self._handed is None else self._handed + 1
        if self._handed >= parsed:  # the last message of this read (BAD_DATA counted too)
            self._handed = parsed
            if self._q:
                self._send_queued()  # non-blocking sends, from the link's thread
                self._read_sends += 1
                if any(w.tcp and w.out for w in self.watchers):
                    self._wake()  # its thread waits for the socket to take the rest

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass  # already awake, or closed

    def _keep_param(self, m) -> None:
        name = m.param_id.decode(errors="replace") if isinstance(m.param_id, bytes) else m.param_id
        name = name.rstrip("\x00")
        if m.param_count > params.MAX_LIST:
            return
        if 0 <= m.param_index < m.param_count:
            self._param_count = m.param_count
            self._by_index[m.param_index] = name
        elif name in self._params:  # a read by name: the index is the one we knew
            _, _, idx, cnt = self._params[name]
            self._params[name] = (m.param_value, m.param_type, idx, cnt)
            return
        self._params[name] = (m.param_value, m.param_type, m.param_index, m.param_count)

    # ---- the forwarder thread -------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                with self._lock:
                    ws = [w for w in self.watchers if not w.closed]
                readable = [w.sock for w in ws if w.paused_until <= now]
                writable = [w.sock for w in ws if w.tcp and w.out]
                # every SAFETY_S at least: what the link's thread left queued (never, while the count holds)
                wait = min([SAFETY_S] + [w.paused_until - now for w in ws if w.paused_until > now])
                rlist: list[Any] = [self._wake_r, *self._listeners, *readable]
                try:
                    r, wr, _ = select.select(rlist, writable, [], max(0.0, wait))
                except (OSError, ValueError):  # a watcher closed meanwhile (by the answering thread)
                    continue
                if self._wake_r in r:
                    try:
                        while os.read(self._wake_r, 4096):
                            pass
                    except (BlockingIOError, OSError):
                        pass
                self._pending = False
                self._send_queued()  # the link's thread sends at the end of each read: usually nothing left
                by_sock = {w.sock: w for w in ws}
                for s in wr:
                    with self._lock:
                        self._flush(by_sock[s])
                for s in r:
                    if s in self._listeners:
                        self._accept(s)
                    elif s in by_sock:
                        self._receive(by_sock[s])
        except Exception:  # pragma: no cover - a bug here must not touch the link
            log.exception("%s: the forwarder stopped", self.link.name)

    def _send_queued(self) -> None:
        """Send what is queued, in order (under the lock: taking and sending are one step,
        whichever thread does it)."""
        q = self._q
        if not q:
            return
        with self._lock:
            chunks = []
            while q:
                try:
                    chunks.append(q.popleft())
                except IndexError:
                    break
            if not chunks:
                return
            self.forwarded += len(chunks)
            datagrams, cur = [], bytearray()  # several messages a datagram, as ArduPilot's own UDP sends them
            for c in chunks:
                if cur and len(cur) + len(c) > DATAGRAM:
                    datagrams.append(bytes(cur))
                    cur = bytearray()
                cur += c
            datagrams.append(bytes(cur))
            for w in self.watchers:
                if w.closed:
                    continue
                if w.tcp:
                    self._send_tcp(w, b"".join(datagrams))
                else:
                    for d in datagrams:
                        self._send_udp(w, d)

    def _send_udp(self, w: Watcher, data) -> None:
        try:
            w.sock.send(data)
        except OSError:  # nobody listens there (yet, or any more), a full buffer: dropped
            pass

    def _send_tcp(self, w: Watcher, data) -> None:
        if len(w.out) + len(data) > TCP_BUFFER:
            log.warning("%s: watcher %s stopped reading; disconnected", self.link.name, w.name)
            self._drop(w)
            return
        w.out += data
        self._flush(w)

    def _flush(self, w: Watcher) -> None:
        if w.closed or not w.out:
            return
        try:
            n = w.sock.send(w.out)
            del w.out[:n]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._drop(w)

    def _send_to(self, w: Watcher, msg) -> None:
        """One message of ours (an answer, a STATUSTEXT) to one watcher, as the vehicle's."""
        with self._lock:
            if w.closed:
                return
            self._answers.srcSystem = self.link.vehicle.sysid or 1
            data = bytes(msg.pack(self._answers))
            if w.tcp:
                self._send_tcp(w, data)
            else:
                self._send_udp(w, data)

    def _drop(self, w: Watcher) -> None:
        w.closed = True
        try:
            w.sock.close()
        except OSError:
            pass
        if w.tcp and w in self.watchers:
            self.watchers.remove(w)

    def _accept(self, listener: socket.socket) -> None:
        try:
            s, addr = listener.accept()
        except OSError:
            return
        with self._lock:
            if sum(1 for w in self.watchers if w.tcp) >= MAX_TCP_CLIENTS * len(self._listeners):
                s.close()
                return
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, TCP_SNDBUF)  # a stalled reader is seen in seconds
            self.watchers.append(Watcher(s, f"tcp {addr[0]}:{addr[1]}", tcp=True))

    def _receive(self, w: Watcher) -> None:
        try:
            data = w.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # UDP: the watcher is not listening (ICMP unreachable); TCP: reset
            if w.tcp:
                with self._lock:
                    self._drop(w)
            return
        if not data:
            if w.tcp:
                with self._lock:
                    self._drop(w)
            return
        now = time.monotonic()
        if now - w.window >= 1.0:
            w.window, w.read = now, 0
        w.read += len(data)
        if w.read > IN_BYTES_PER_S:  # a flood: not read (nor parsed) until its second ends
            w.paused_until = w.window + 1.0
            return
        try:
            msgs = w.parser.parse_buffer(data) or []
        except Exception:  # a corrupt frame: skipped, as robust parsing does
            msgs = []
        for m in msgs:
            if m.get_type() == "BAD_DATA":
                continue
            w.sysid, w.compid = m.get_srcSystem(), m.get_srcComponent()
            try:
                self._from_watcher(w, m)
            except MavlinkError:  # the link is not connected (yet, or any more): nothing to send on
                pass
            except Exception:  # a message we failed to answer: logged, the forwarding goes on
                log.exception("%s: a watcher's %s failed", self.link.name, m.get_type())
