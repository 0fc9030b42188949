"""Is a port busy, which process holds it, who is connected to it.

Everything here only looks (the kernel's sock_diag socket tables and ``/proc/<pid>/fd``):
it never binds or connects, so probing cannot disturb a SITL that someone else runs.

- ``probe``/``reachable``: exact lookups (hash tables, no walk) at the wildcard and loopback
  addresses, IPv4 and IPv6: what a local client would reach. The lease probe.
- ``bound``/``busy_ports``/``read_sockets``: dumps of the socket tables, filtered in the
  kernel to the ports asked about; they also see sockets bound to any other address.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from ..instances import Ports
from ._sockdiag import _NL, ALL_STATES, Sock, _diag_dump, _Lookups, port_filter  # noqa: F401  (port_filter: public)

TCP_LISTEN = 0x0A
TCP_ESTABLISHED = 0x01
UDP_UNCONNECTED = 0x07

#: process names (``/proc/<pid>/comm``, 15 chars) that are a SITL: ArduPilot's binaries and ours
SITL_NAMES = frozenset(
    {"arducopter", "arduplane", "ardurover", "ardusub", "antennatracker", "blimp", "arducopter-heli", "sitlpool-sim"}
)


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


def reachable(want) -> list[BusyPort]:
    """Which of ``{(proto, port)}`` a client on this machine would reach a process on:
    a TCP listener, or a bound UDP socket, on the wildcard or loopback address, IPv4 or
    IPv6. Two exact lookups per port (IPv4, IPv6) in the kernel's hash tables: the cost
    does not grow with the machine's socket count, and nothing is bound. A socket bound
    only to another of the machine's addresses is not seen (``bound`` sees it)."""
    return _busy(_NL.lookup(_Lookups(_lookup_keys(want))))


def _lookup_keys(want) -> tuple:
    return tuple(
        (proto, fam, port)
        for proto, port in sorted(want, key=lambda k: (k[0] != "tcp", k[1]))
        for fam in (socket.AF_INET, socket.AF_INET6)
    )


def _busy(socks: list[Sock]) -> list[BusyPort]:
    found: dict[tuple[str, int], BusyPort] = {}
    for s in socks:
        bp = found.setdefault((s.proto, s.local_port), BusyPort(s.proto, s.local_port, uid=s.uid))
        if s.inode not in bp.inodes:  # a dual-stack socket answers both lookups
            bp.inodes.append(s.inode)
    return [found[k] for k in sorted(found, key=lambda k: (k[0] != "tcp", k[1]))]


def read_sockets(protos=("tcp", "udp"), tcp_states: int = 1 << TCP_LISTEN, ports=None) -> list[Sock]:
    """IPv4 and IPv6 sockets of this network namespace: TCP ones in ``tcp_states`` (a
    bit mask, listening by default) and every UDP socket. With ``ports``, the kernel
    returns only sockets whose local port is in or near them (check the exact port)."""
    bytecode = port_filter(ports) if ports else b""
    out: list[Sock] = []
    for proto in protos:
        ipproto = socket.IPPROTO_TCP if proto == "tcp" else socket.IPPROTO_UDP
        states = tcp_states if proto == "tcp" else ALL_STATES
        for fam in (socket.AF_INET, socket.AF_INET6):
            out += _diag_dump(fam, ipproto, states, bytecode)
    return out


def _bound(s: Sock) -> bool:
    return s.state == TCP_LISTEN if s.proto == "tcp" else True


def bound(want: set[tuple[str, int]], socks: list[Sock] | None = None) -> list[BusyPort]:
    """Which of ``{(proto, port)}`` something has bound (TCP listening or UDP bound, any address)."""
    if socks is None:
        socks = read_sockets(tuple(sorted({proto for proto, _ in want})), ports={port for _, port in want})
    found: dict[tuple[str, int], BusyPort] = {}
    for s in socks:
        key = (s.proto, s.local_port)
        if key in want and _bound(s):
            bp = found.setdefault(key, BusyPort(s.proto, s.local_port, uid=s.uid))
            bp.inodes.append(s.inode)
    return [found[k] for k in sorted(found, key=lambda k: (k[0] != "tcp", k[1]))]


def _want(p: Ports) -> set[tuple[str, int]]:
    return {("tcp", port) for port in p.tcp} | {("udp", port) for port in p.udp}


def busy_ports(p: Ports, socks: list[Sock] | None = None) -> list[BusyPort]:
    """The ports of instance ``p`` that something has bound."""
    return bound(_want(p), socks)


def taken(many: list[Ports]) -> dict[int, list[BusyPort]]:
    """``{instance: its taken ports}`` for those of ``many`` with any, as the probe sees
    them (``reachable``), in batched lookups (holders not named)."""
    busy = {(b.proto, b.port): b for b in reachable(set().union(*(_want(p) for p in many)) if many else set())}
    out: dict[int, list[BusyPort]] = {}
    for p in many:
        mine = [busy[k] for k in sorted(_want(p), key=lambda k: (k[0] != "tcp", k[1])) if k in busy]
        if mine:
            out[p.instance] = mine
    return out


def explain(instance: int, busy: list[BusyPort]) -> str:
    """Why ``instance`` cannot be used: its taken ports, each with the process holding it."""
    name_holders(busy)
    return f"instance {instance} is not leased but its ports are taken: " + ", ".join(b.describe() for b in busy)


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
    plan = _PROBES.get(p)
    if plan is None:
        plan = _Lookups(_lookup_keys(_want(p)))
        if len(_PROBES) < 4096:  # every instance there is: 6449
            _PROBES[p] = plan
    socks = _NL.lookup(plan)
    return explain(p.instance, _busy(socks)) if socks else None


_PROBES: dict[Ports, _Lookups] = {}


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
        peer = {
            s.local_port: s.inode
            for s in socks
            if s.proto == "tcp" and s.remote_port == port and s.state == TCP_ESTABLISHED
        }
        by_inode = socket_owners(peer.values())
        pids = {lp: by_inode[ino] for lp, ino in peer.items() if ino in by_inode}
    return [Client(port, s.remote_addr, s.remote_port, pids.get(s.remote_port)) for s in server_side]
