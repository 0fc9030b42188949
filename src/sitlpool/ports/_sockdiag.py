"""The kernel's sock_diag socket tables (what ``ss`` reads), private to ``sitlpool.ports``:
the netlink socket, dump requests with in-kernel port filters, and batched exact lookups."""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import struct
import sys
import threading
from dataclasses import dataclass


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


# The socket table comes from the kernel's sock_diag netlink interface (what `ss`
# uses), not /proc/net/tcp: reading that walks every established-connection bucket
# (~4 ms on a big-memory machine even when it is empty), while a dump of listening
# TCP sockets walks only the listening table. When only some ports matter, a filter
# program (INET_DIAG_REQ_BYTECODE, as `ss sport = :N` sends) runs in the kernel, so
# a dump returns just those sockets whatever the machine's socket count.
NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
ALL_STATES = 0xFFFFFFFF
INET_DIAG_REQ_BYTECODE = 1
SOL_NETLINK, NETLINK_CAP_ACK = 270, 10
BC_JMP, BC_S_GE, BC_S_LE = 1, 2, 3
_HDR = struct.Struct("=IHHII")
_REPLY_HEAD = struct.Struct("=IHHIIi")  # a header and, in an error reply, the error code
_REQ = struct.Struct("=BBBBI48s")
_OP = struct.Struct("=BBH")
_ATTR = struct.Struct("=HH")
#: a filter ORs at most this many port ranges; close ports are merged into one range and
#: the exact ports checked here (a long program would cost every socket more in the kernel)
MAX_RANGES = 8


def port_filter(port_list) -> bytes:
    """An inet_diag filter program accepting sockets whose local port is in ``port_list``
    (as ranges: the caller still checks exact ports). Built as ss builds ``sport >= A and
    sport <= B or ...``: every op's ``yes`` leads to the next op (the kernel's audit walks
    that chain), a range's failure jumps to the next range, a JMP after each range skips
    the rest on success; jumping exactly to the end accepts, past it rejects."""
    ranges = _ranges(sorted(set(port_list)))
    blocks = []
    for lo, hi in ranges:
        # S_GE lo (fail: past this range's 16 bytes) then S_LE hi (fail: from its own place, 8 bytes on)
        blocks.append(_OP.pack(BC_S_GE, 8, 20) + _OP.pack(0, 0, lo) + _OP.pack(BC_S_LE, 8, 12) + _OP.pack(0, 0, hi))
    out = b""
    for i, b in enumerate(blocks):
        out += b
        if i < len(blocks) - 1:
            rest = sum(len(x) + 4 for x in blocks[i + 1 :]) - 4
            out += _OP.pack(BC_JMP, 4, rest + 4)  # at run time a JMP takes "no": to the end, accepted
    return out


def _ranges(ports_sorted: list[int]) -> list[tuple[int, int]]:
    # split at the MAX_RANGES - 1 widest gaps; everything between is one range
    gaps = sorted(range(1, len(ports_sorted)), key=lambda i: ports_sorted[i] - ports_sorted[i - 1], reverse=True)
    cuts = sorted(gaps[: MAX_RANGES - 1])
    bounds = [0, *cuts, len(ports_sorted)]
    return [(ports_sorted[a], ports_sorted[b - 1]) for a, b in zip(bounds, bounds[1:])]


def _sock_at(buf, m: int, proto: str) -> Sock:
    """The ``inet_diag_msg`` at offset ``m`` of a reply (a dump's or a lookup's)."""
    family, state = buf[m], buf[m + 1]
    alen = 4 if family == socket.AF_INET else 16
    sport, dport = struct.unpack_from(">HH", buf, m + 4)
    src, dst = bytes(buf[m + 8 : m + 8 + alen]), bytes(buf[m + 24 : m + 24 + alen])
    uid, inode = struct.unpack_from("=II", buf, m + 64)
    return Sock(proto, sport, socket.inet_ntop(family, dst), dport, state, uid, inode, socket.inet_ntop(family, src))


class _Netlink:
    """One sock_diag socket per process, reused by every request (creating one costs as
    much as a request); a lock serialises threads, a forked child opens its own."""

    #: lookups sent at once: their replies must fit the socket's receive buffer
    BATCH = 48
    REPLY = 512  # a lookup's reply: an inet_diag_msg, or an error quoting the 72-byte request

    def __init__(self):
        self.lock = threading.Lock()
        self.sock: socket.socket | None = None
        self.pid = 0
        self.seq = 0
        self.buf = bytearray(1 << 16)  # larger than any dump message the kernel builds (32 KiB)
        self._mmsg = None

    def _socket(self) -> socket.socket:
        if self.sock is None or self.pid != os.getpid():
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, NETLINK_SOCK_DIAG)
            try:  # error replies (a lookup that finds nothing) without a copy of the request
                self.sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
            except OSError:
                pass
            self.pid = os.getpid()
        return self.sock

    def _drop(self) -> None:
        # a request cut short leaves replies queued: never let the next request read them
        if self.sock is not None:
            self.sock.close()
        self.sock = None

    def dump(self, family: int, proto: int, states: int, bytecode: bytes) -> list[Sock]:
        req = _REQ.pack(family, proto, 0, 0, states, b"\0" * 48)
        if bytecode:
            req += _ATTR.pack(_ATTR.size + len(bytecode), INET_DIAG_REQ_BYTECODE) + bytecode
        with self.lock:
            sock = self._socket()
            self.seq = (self.seq + 1) & 0xFFFFFFFF
            try:
                sock.send(
                    _HDR.pack(_HDR.size + len(req), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0) + req
                )
                return self._read_dump("tcp" if proto == socket.IPPROTO_TCP else "udp", self.seq)
            except BaseException:
                self._drop()
                raise

    def _read_dump(self, name: str, seq: int) -> list[Sock]:
        out: list[Sock] = []
        buf = self.buf
        while True:
            n = self._socket().recv_into(buf)  # the socket dump() just sent on
            if not n:
                return out
            off = 0
            while off + _HDR.size <= n:
                length, mtype, _, mseq, _ = _HDR.unpack_from(buf, off)
                if length < _HDR.size:
                    raise OSError(f"sock_diag dump of {name}: bad message")
                if mseq == seq:
                    if mtype == NLMSG_DONE:
                        return out
                    if mtype == NLMSG_ERROR:
                        (code,) = struct.unpack_from("=i", buf, off + _HDR.size)
                        raise OSError(-code, f"sock_diag dump of {name} failed: {os.strerror(-code)}")
                    out.append(_sock_at(buf, off + _HDR.size, name))
                off += (length + 3) & ~3

    def lookup(self, plan: _Lookups) -> list[Sock]:
        """The sockets found by a prepared set of exact lookups (see ``reachable``). Sent
        in batches whose replies are read with one recvmmsg call each."""
        out: list[Sock] = []
        with self.lock:
            try:
                sock = self.sock if self.sock is not None and self.pid == os.getpid() else self._socket()
                for keys, msg in plan.batches:
                    self._lookup_batch(sock, keys, msg, out)
            except BaseException:
                self._drop()
                raise
        return out

    def _lookup_batch(self, sock: socket.socket, keys: tuple, msg: bytes, out: list[Sock]) -> None:
        # the kernel answers every request before send returns: each reply is queued already
        sock.send(msg)
        n = len(keys)
        mm = self._mmsg if self._mmsg is not None else self._setup_mmsg()
        got = mm[0](sock.fileno(), mm[1], n, MSG_DONTWAIT, None) if mm else 0
        if got == n:
            if _all_enoent(mm[2], n, self.REPLY):
                return  # nothing on any of these ports: the usual answer, seen in two slices
            replies = [(mm[2], i * self.REPLY) for i in range(n)]
        else:  # not all queued yet (never seen), or no recvmmsg: the rest one by one
            got = max(got, 0)
            replies = [(bytes(mm[2][i * self.REPLY : (i + 1) * self.REPLY]), 0) for i in range(got)]
            replies += [(sock.recv(self.REPLY), 0) for _ in range(n - got)]
        for data, o in replies:
            _, mtype, _, mseq, _, code = _REPLY_HEAD.unpack_from(data, o)
            if mtype == NLMSG_ERROR:
                if code == -errno.ENOENT:  # nothing there
                    continue
                raise OSError(-code, f"sock_diag lookup failed: {os.strerror(-code)}")
            if not 0 < mseq <= n:
                raise OSError(f"sock_diag lookup: unexpected reply {mseq}")
            out.append(_sock_at(data, o + _HDR.size, keys[mseq - 1][0]))

    def _setup_mmsg(self):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            recvmmsg = libc.recvmmsg
        except (OSError, AttributeError):
            self._mmsg = False
            return False
        recvmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_void_p]
        buf = (ctypes.c_char * (self.REPLY * self.BATCH))()
        iovs = (_IOVec * self.BATCH)()
        vec = (_MMsgHdr * self.BATCH)()
        for i in range(self.BATCH):
            iovs[i].iov_base = ctypes.addressof(buf) + i * self.REPLY
            iovs[i].iov_len = self.REPLY
            vec[i].msg_hdr.msg_iov = ctypes.pointer(iovs[i])
            vec[i].msg_hdr.msg_iovlen = 1
        self._keep = (buf, iovs, vec)  # the kernel writes into these: they must outlive every call
        self._mmsg = (recvmmsg, ctypes.addressof(vec), memoryview(buf).cast("B"))
        return self._mmsg


MSG_DONTWAIT = 0x40
_ENOENT_LOW = (-errno.ENOENT) & 0xFF  # the low byte of a little-endian -ENOENT (no other errno shares it)


def _all_enoent(view: memoryview, n: int, stride: int) -> bool:
    """Whether each of ``n`` replies, ``stride`` bytes apart, is an ENOENT error reply:
    a look at two bytes of each (message type, error code) in two slices."""
    if sys.byteorder != "little":
        return False
    end = n * stride
    return (
        bytes(view[4:end:stride]) == bytes([NLMSG_ERROR]) * n and bytes(view[16:end:stride]) == bytes([_ENOENT_LOW]) * n
    )


class _IOVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class _MsgHdr(ctypes.Structure):
    _fields_ = [
        ("msg_name", ctypes.c_void_p),
        ("msg_namelen", ctypes.c_uint32),
        ("msg_iov", ctypes.POINTER(_IOVec)),
        ("msg_iovlen", ctypes.c_size_t),
        ("msg_control", ctypes.c_void_p),
        ("msg_controllen", ctypes.c_size_t),
        ("msg_flags", ctypes.c_int),
    ]


class _MMsgHdr(ctypes.Structure):
    _fields_ = [("msg_hdr", _MsgHdr), ("msg_len", ctypes.c_uint)]


_NOCOOKIE = b"\xff" * 8


class _Lookups:
    """Exact lookups for ``(proto, family, port)`` keys, their requests built once."""

    def __init__(self, keys: tuple):
        self.batches = []
        for i in range(0, len(keys), _Netlink.BATCH):
            part = keys[i : i + _Netlink.BATCH]
            # seq = position: replies come in request order, and a socket whose request was
            # cut short is dropped, so no reply of an earlier batch can be read with these
            msg = b"".join(
                _HDR.pack(_HDR.size + len(b), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, k + 1, 0) + b
                for k, b in enumerate(_lookup_request(*key) for key in part)
            )
            self.batches.append((part, msg))


def _lookup_request(proto: str, family: int, port: int) -> bytes:
    """An exact-lookup request (no NLM_F_DUMP). The kernel reads the TCP id as the far end
    of a connection to src:sport and the UDP id as a datagram to dst:dport, so the
    loopback address and the port go in different places for the two."""
    lo = socket.inet_pton(family, "127.0.0.1" if family == socket.AF_INET else "::1").ljust(16, b"\0")
    zero = b"\0" * 16
    if proto == "tcp":
        sockid = struct.pack(">HH", port, 0) + lo + zero
    else:
        sockid = struct.pack(">HH", 0, port) + zero + lo
    ipproto = socket.IPPROTO_TCP if proto == "tcp" else socket.IPPROTO_UDP
    return struct.pack("=BBBBI", family, ipproto, 0, 0, ALL_STATES) + sockid + struct.pack("=I", 0) + _NOCOOKIE


_NL = _Netlink()


def _after_fork_in_child() -> None:
    # a fork while another thread held the lock would leave it locked forever in the child;
    # the inherited socket is the parent's: the child opens its own on first use
    _NL.lock = threading.Lock()
    _NL.sock = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def _diag_dump(family: int, proto: int, states: int, bytecode: bytes = b"") -> list[Sock]:
    return _NL.dump(family, proto, states, bytecode)
