"""Is a port busy, which process holds it, who is connected to it.

Everything here only looks (``/proc/net`` and ``/proc/<pid>/fd``): it never binds or
connects, so probing cannot disturb a SITL that someone else runs.
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass, field

from .instances import Ports

TCP_LISTEN = 0x0A
TCP_ESTABLISHED = 0x01
UDP_UNCONNECTED = 0x07

#: process names (``/proc/<pid>/comm``, 15 chars) that are a SITL: ArduPilot's binaries and ours
SITL_NAMES = frozenset(
    {"arducopter", "arduplane", "ardurover", "ardusub", "antennatracker", "blimp", "arducopter-heli", "sitlpool-sim"}
)


@dataclass(frozen=True)
class Sock:
    proto: str  # "tcp" or "udp"
    local_port: int
    remote_addr: str
    remote_port: int
    state: int
    uid: int
    inode: int
    local_addr: str = ""


@dataclass
class PortHolder:
    """A process that holds a socket, or what we know when we cannot see it."""

    pid: int | None
    name: str | None
    uid: int

    def describe(self) -> str:
        if self.pid is None:
            return f"a process this user cannot see (uid {self.uid})"
        return f"{self.name} pid {self.pid}"


@dataclass
class BusyPort:
    proto: str
    port: int
    inodes: list[int] = field(default_factory=list)
    uid: int = -1
    holder: PortHolder | None = None

    def describe(self) -> str:
        who = f" ({self.holder.describe()})" if self.holder else ""
        return f"{self.proto}:{self.port}{who}"


# The socket table comes from the kernel's sock_diag netlink interface (what `ss`
# uses), not /proc/net/tcp: reading that walks every established-connection bucket
# (~4 ms on a big-memory machine even when it is empty), while a dump of listening
# TCP sockets walks only the listening table.
NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
ALL_STATES = 0xFFFFFFFF
_HDR = struct.Struct("=IHHII")
_REQ = struct.Struct("=BBBBI48s")


def _diag_dump(family: int, proto: int, states: int) -> list[Sock]:
    name = "tcp" if proto == socket.IPPROTO_TCP else "udp"
    req = _REQ.pack(family, proto, 0, 0, states, b"\0" * 48)
    out: list[Sock] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, NETLINK_SOCK_DIAG) as nl:
        nl.send(_HDR.pack(_HDR.size + len(req), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + req)
        while True:
            data = nl.recv(1 << 16)
            off = 0
            while off + _HDR.size <= len(data):
                length, mtype, _, _, _ = _HDR.unpack_from(data, off)
                if mtype == NLMSG_DONE:
                    return out
                if mtype == NLMSG_ERROR:
                    raise OSError(f"sock_diag dump of {name} failed")
                m = off + _HDR.size
                state = data[m + 1]
                sport, dport = struct.unpack_from(">HH", data, m + 4)
                src, dst = data[m + 8 : m + 24], data[m + 24 : m + 40]
                v4 = family == socket.AF_INET
                raddr = socket.inet_ntop(family, dst[:4] if v4 else dst)
                uid, inode = struct.unpack_from("=II", data, m + 64)
                out.append(Sock(name, sport, raddr, dport, state, uid, inode, socket.inet_ntop(family, src[:4] if v4 else src)))
                off += (length + 3) & ~3
            if not data:
                return out


def read_sockets(protos=("tcp", "udp"), tcp_states: int = 1 << TCP_LISTEN) -> list[Sock]:
    """IPv4 and IPv6 sockets of this network namespace: TCP ones in ``tcp_states`` (a
    bit mask, listening by default) and every UDP socket."""
    out: list[Sock] = []
    for proto in protos:
        ipproto = socket.IPPROTO_TCP if proto == "tcp" else socket.IPPROTO_UDP
        states = tcp_states if proto == "tcp" else ALL_STATES
        for fam in (socket.AF_INET, socket.AF_INET6):
            out += _diag_dump(fam, ipproto, states)
    return out


def _bound(s: Sock) -> bool:
    return s.state == TCP_LISTEN if s.proto == "tcp" else True


def bound(want: set[tuple[str, int]], socks: list[Sock] | None = None) -> list[BusyPort]:
    """Which of ``{(proto, port)}`` something has bound (TCP listening or UDP bound, any address)."""
    if socks is None:
        socks = read_sockets(tuple(sorted({proto for proto, _ in want})))
    found: dict[tuple[str, int], BusyPort] = {}
    for s in socks:
        key = (s.proto, s.local_port)
        if key in want and _bound(s):
            bp = found.setdefault(key, BusyPort(s.proto, s.local_port, uid=s.uid))
            bp.inodes.append(s.inode)
    return [found[k] for k in sorted(found, key=lambda k: (k[0] != "tcp", k[1]))]


def busy_ports(p: Ports, socks: list[Sock] | None = None) -> list[BusyPort]:
    """The ports of instance ``p`` that something has bound."""
    return bound({("tcp", port) for port in p.tcp} | {("udp", port) for port in p.udp}, socks)


def proc_name(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return f.read().strip().decode(errors="replace")
    except OSError:
        return None


def likely_sitl_pids() -> list[int]:
    """Pids whose process name is a SITL's: looked at first when naming a port's holder."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and proc_name(int(d)) in SITL_NAMES:
            out.append(int(d))
    return out


def _scan_fds(pid: int, inodes: set[int], found: dict[int, int]) -> None:
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return
    for fd in fds:
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            ino = int(target[8:-1])
            if ino in inodes and ino not in found:
                found[ino] = pid


def socket_owners(inodes, first=()) -> dict[int, int]:
    """Map socket inodes to a pid holding them: the pids in ``first`` are searched before all others."""
    want = set(inodes)
    found: dict[int, int] = {}
    if not want:
        return found
    for pid in first:
        _scan_fds(pid, want, found)
        if len(found) == len(want):
            return found
    for d in os.listdir("/proc"):
        if d.isdigit():
            pid = int(d)
            if pid in first:
                continue
            _scan_fds(pid, want, found)
            if len(found) == len(want):
                break
    return found


def name_holders(busy: list[BusyPort], first=None) -> list[BusyPort]:
    """Fill in ``holder`` of each busy port (SITL-named processes are searched first)."""
    if not busy:
        return busy
    if first is None:
        first = likely_sitl_pids()
    owners = socket_owners([i for b in busy for i in b.inodes], first)
    for b in busy:
        pid = next((owners[i] for i in b.inodes if i in owners), None)
        b.holder = PortHolder(pid, proc_name(pid) if pid else None, b.uid)
    return busy


def probe(p: Ports) -> str | None:
    """Why instance ``p.instance`` cannot be used because of its ports, or None if all are free."""
    busy = busy_ports(p)
    if not busy:
        return None
    name_holders(busy)
    return f"instance {p.instance} is not leased but its ports are taken: " + ", ".join(b.describe() for b in busy)


@dataclass(frozen=True)
class Client:
    """One established TCP connection to a local listening port."""

    port: int
    remote_addr: str
    remote_port: int
    pid: int | None

    def describe(self) -> str:
        """``pid 1811 (mavproxy.py)``, or the peer address when its process is not visible."""
        return f"pid {self.pid} ({proc_name(self.pid)})" if self.pid else f"{self.remote_addr}:{self.remote_port}"


def clients(port: int, socks: list[Sock] | None = None, name_pids: bool = True) -> list[Client]:
    """Who is connected to the local TCP ``port`` (the server side of each connection)."""
    if socks is None:
        socks = read_sockets(("tcp",), tcp_states=1 << TCP_ESTABLISHED)
    server_side = [s for s in socks if s.proto == "tcp" and s.local_port == port and s.state == TCP_ESTABLISHED]
    if not server_side:
        return []
    pids: dict[int, int] = {}
    if name_pids:
        # the client's own socket has the server port as its remote port
        peer = {s.local_port: s.inode for s in socks if s.proto == "tcp" and s.remote_port == port and s.state == TCP_ESTABLISHED}
        by_inode = socket_owners(peer.values())
        pids = {lp: by_inode[ino] for lp, ino in peer.items() if ino in by_inode}
    return [Client(port, s.remote_addr, s.remote_port, pids.get(s.remote_port)) for s in server_side]
