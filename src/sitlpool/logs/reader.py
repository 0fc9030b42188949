"""Streaming reader of ArduPilot DataFlash logs (``.BIN``), in bounded memory.

A DataFlash log is a sequence of messages ``A3 95 <type> <payload>``, the payload's length
and layout given by FMT messages (FMT itself is type 128, 89 bytes) that ArduPilot writes
just before the first message of each type, all through the file. FMTU/UNIT/MULT give units.

pymavlink's ``DFReader`` is the reference reader and we use it for what it does well: the
format table (``DFFormat``: the format characters, their struct codes, multipliers and
units). We do not use it to walk the file: ``DFReader_binary`` maps the whole file and
indexes the offset of every message before giving the first one (seconds for a 22 MB log,
memory growing with the log's size) and then builds a Python object per message. Instead
the file is read in chunks of a few MB and walked by the FMT table with one compiled
regular expression: ``(?:A3 95 (type of length n) .{n-3} | ...)*+`` follows the chain of
messages in C (type byte -> length -> next header), stops exactly where the chain breaks
(unknown type, bad header, partial message), and a second expression captures only the
types asked for; the others are skipped by their length without ever becoming Python
objects. Memory is one chunk plus what the caller keeps, whatever the log's size.
"""

from __future__ import annotations

import os
import re
import struct
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pymavlink.DFReader import FORMAT_TO_STRUCT, MULT_TO_PREFIX, DFFormat

from ..errors import SitlpoolError

HEAD = b"\xa3\x95"
FMT_TYPE = 128
FMT_LEN = 89
CHUNK = 4 << 20  # bytes read at a time: the walk's memory, whatever the log's size
_FMT_STRUCT = struct.Struct("<BB4s16s64s")
_TIME = struct.Struct("<Q")


class LogError(SitlpoolError, ValueError):
    """A log cannot be read or kept, or a request about one is invalid (one line)."""


class NotALog(LogError):
    """The file is not a DataFlash log (no ``A3 95`` header, or no format table)."""


class UnknownField(LogError, KeyError):
    """Message types or fields the log does not have (names the ones it has)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class TimeRangeError(LogError):
    """A time range outside the log, or with its end before its start."""


@dataclass
class LogFormat:
    """One message type: its name, length, columns, units and how to decode it."""

    type: int
    name: str
    length: int
    format: str
    columns: list[str]
    units: list[str] = field(default_factory=list)
    struct: struct.Struct | None = None
    _mults: list[tuple[int, float]] = field(default_factory=list)
    _strings: list[int] = field(default_factory=list)
    time_us: bool = False  # the first field is TimeUS (uint64 microseconds since boot)
    instance: int | None = None  # index of the instance field (FMTU unit '#'), if any
    index: dict[str, int] = field(default_factory=dict)  # column name -> position

    @classmethod
    def from_fmt(cls, ty: int, length: int, name: str, fmt: str, cols: str) -> LogFormat:
        bad = [c for c in fmt if c not in FORMAT_TO_STRUCT]
        if bad:  # checked here: DFFormat would print it on stdout (a CLI's JSON) before raising
            raise LogError(f"message {name}: unknown format character {bad[0]!r}")
        d = DFFormat(ty, name, length, fmt, cols)
        f = cls(ty, d.name, length, fmt, list(d.columns))
        try:
            f.struct = struct.Struct(d.msg_struct)
        except struct.error:
            f.struct = None
        if f.struct is not None and f.struct.size != length - 3:
            f.struct = None  # a format that disagrees with its length: skipped, never decoded
        f._mults = [(i, m) for i, m in enumerate(d.msg_mults) if m is not None]
        f._strings = [i for i, c in enumerate(fmt) if FORMAT_TO_STRUCT[c][2] is str and c != "a"]
        f.index = {c: i for i, c in enumerate(f.columns)}
        f.time_us = bool(f.columns) and f.columns[0] == "TimeUS" and fmt[:1] in ("Q", "q") and f.struct is not None
        f.units = [""] * len(f.columns)
        return f

    def decode(self, raw: bytes) -> list:
        """The field values of one message (``raw`` starts with its header)."""
        if self.struct is None:
            return []
        v = list(self.struct.unpack_from(raw, 3))
        for i, m in self._mults:
            v[i] = v[i] * m
        for i in self._strings:
            v[i] = v[i].split(b"\0", 1)[0].decode("ascii", "replace")
        return v

    def unit(self, column: str) -> str:
        try:
            return self.units[self.columns.index(column)]
        except (ValueError, IndexError):
            return ""


@dataclass
class ReadEnd:
    """Where and how a pass over a log ended."""

    status: str = "complete"  # complete | truncated | corrupt
    offset: int = 0  # byte offset where reading stopped (= size when complete)
    size: int = 0
    last_time: float | None = None  # log time (s) of the last whole message read, if it had one
    detail: str = ""

    def as_dict(self) -> dict:
        return {
            "status": self.status,
            "offset": self.offset,
            "size": self.size,
            "last_time": self.last_time,
            "detail": self.detail,
        }


def _counter(lens: dict[int, int]) -> re.Pattern:
    """``findall`` gives the type byte of every message along the chain."""
    groups: dict[int, list[int]] = {}
    for ty, n in lens.items():
        groups.setdefault(n, []).append(ty)
    alt = b"|".join(
        b"[" + b"".join(re.escape(bytes([t])) for t in tys) + b"]" + b".{%d}" % (n - 3) for n, tys in groups.items()
    )
    return re.compile(HEAD + b"(?=(.))(?:" + alt + b")", re.S)


def message_patterns(lens: dict[int, int], want: set[int]) -> tuple[re.Pattern, re.Pattern]:
    """``(capture, chain)``: ``capture.findall`` gives the messages of the ``want`` types
    (empty bytes for the others) along the chain; ``chain.match`` ends where the chain
    breaks, its group 1 being the last whole message."""
    groups: dict[tuple[int, bool], list[int]] = {}
    for ty, n in lens.items():
        groups.setdefault((n, ty in want), []).append(ty)

    def alt(items) -> bytes:
        return b"|".join(
            b"[" + b"".join(re.escape(bytes([t])) for t in tys) + b"]" + b".{%d}" % (n - 3) for (n, _), tys in items
        )

    w = [(k, v) for k, v in groups.items() if k[1]]
    o = [(k, v) for k, v in groups.items() if not k[1]]
    parts = []
    if w:
        parts.append(b"(" + HEAD + b"(?:" + alt(w) + b"))")
    if o:
        parts.append(HEAD + b"(?:" + alt(o) + b")")
    capture = re.compile(b"|".join(parts), re.S)
    chain = re.compile(b"(?:(" + HEAD + b"(?:" + alt(groups.items()) + b")))*+", re.S)
    return capture, chain


class LogReader:
    """One DataFlash log, read by streaming. Each pass (``scan``, ``messages``,
    ``read_formats``) reads the file from its start in chunks; ``end`` tells how the last
    pass ended (complete, truncated by a partial last message, or corrupt at an offset).

    >>> r = LogReader("00000001.BIN")
    >>> for fmt, values in r.messages(["CTUN"], t0=10.0, t1=20.0): ...
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                head = f.read(3)
            self.size = os.stat(self.path).st_size
        except IsADirectoryError:
            raise NotALog(f"{self.path} is a directory, not a DataFlash log") from None
        except OSError as e:
            raise LogError(f"cannot read log {self.path}: {e.strerror or e}") from None
        if head[:2] != HEAD:
            what = "empty" if not head else "a file that does not start with a DataFlash header (A3 95)"
            raise NotALog(f"{self.path} is not a DataFlash log (.BIN): {what}")
        self.formats: dict[int, LogFormat] = {}
        self.by_name: dict[str, LogFormat] = {}
        self._units: dict[int, str] = {}
        self._mults: dict[int, float] = {}
        self._fmtu: dict[int, tuple[str, str]] = {}
        self._complete_table = False
        self.end = ReadEnd(size=self.size)

    # -- the format table -------------------------------------------------------------
    def _learn(self, raw: bytes) -> bool:
        """Take one FMT message; True if it defined a type not known before."""
        ty, n, name, fmt, cols = _FMT_STRUCT.unpack_from(raw, 3)
        if ty in self.formats or n < 3:  # a redefinition keeps the first: ArduPilot never redefines
            return False
        if ty == FMT_TYPE and n != FMT_LEN:  # FMT's own length is fixed: the chain would break on it
            return False
        try:
            f = LogFormat.from_fmt(
                ty,
                n,
                name.split(b"\0", 1)[0].decode("ascii", "replace"),
                fmt.split(b"\0", 1)[0].decode("ascii", "replace"),
                cols.split(b"\0", 1)[0].decode("ascii", "replace"),
            )
        except Exception:  # DFFormat raises a bare Exception on an unknown format character
            f = LogFormat(ty, name.split(b"\0", 1)[0].decode("ascii", "replace"), n, "", [])
        self.formats[ty] = f
        self.by_name.setdefault(f.name, f)
        if ty in self._fmtu:
            self._apply_units(f)
        return True

    def _meta(self, f: LogFormat, raw: bytes) -> None:
        """FMTU, UNIT and MULT messages: the units of the fields."""
        v = f.decode(raw)
        if f.name == "UNIT" and len(v) >= 3:
            self._units[v[1] & 0xFF] = v[2]
        elif f.name == "MULT" and len(v) >= 3:
            self._mults[v[1] & 0xFF] = float(f"{v[2]:.6g}")  # written as a float32: 0.01 is 0.0099999998
        elif f.name == "FMTU" and len(v) >= 4:
            self._fmtu[v[1]] = (v[2], v[3])
            if v[1] in self.formats:
                self._apply_units(self.formats[v[1]])

    def _apply_units(self, f: LogFormat) -> None:
        uids, mids = self._fmtu[f.type]
        units = []
        for i, _c in enumerate(f.columns):
            u = self._units.get(ord(uids[i]), "") if i < len(uids) else ""
            m = self._mults.get(ord(mids[i])) if i < len(mids) else None
            if u and m not in (None, 0, 1) and f.format[i : i + 1] not in "cCeEL":
                u = MULT_TO_PREFIX.get(m, f"{m:.4g} ") + u  # as DFFormat.set_mult_ids
            units.append(u)
        f.units = units
        if "#" in uids and uids.index("#") < len(f.columns):
            f.instance = uids.index("#")

    # -- walking ----------------------------------------------------------------------
    def scan(self, types: Iterable[str] = (), counts: Counter | None = None) -> Iterator[list[tuple[LogFormat, bytes]]]:
        """Yield, chunk by chunk, the raw messages (header included) of the named types, in
        file order. FMT/FMTU/UNIT/MULT are always read (they build the table). Sets ``end``.
        ``counts``: a Counter that gets the number of messages of every type number."""
        names = set(types) | {"FMTU", "UNIT", "MULT"}
        lens: dict[int, int] = {FMT_TYPE: FMT_LEN}
        want = {FMT_TYPE}
        self.formats.clear()
        self.by_name.clear()
        capture, chain = message_patterns(lens, want)
        counter = _counter(lens) if counts is not None else None
        buf = b""
        base = 0  # file offset of buf[0]
        last_raw = b""
        last_time: float | None = None
        end = ReadEnd(size=self.size)
        try:
            fh = open(self.path, "rb")  # closed by the with below; opened apart to say why it fails
        except OSError as e:  # removed between two passes (pruned, or a live log kept as its session ended)
            raise LogError(f"cannot read log {self.path.name}: {e.strerror or e} (removed while being read?)") from None
        with fh:
            eof = False
            while True:
                more = b"" if eof else fh.read(CHUNK)
                eof = eof or not more
                buf = buf + more if buf else more
                i = 0
                out: list[tuple[LogFormat, bytes]] = []
                while True:
                    m = chain.match(buf, i)  # always matches (zero or more messages)
                    stop = m.end() if m else i
                    if m and m.group(1) is not None:
                        last_raw = m.group(1)
                    if counter is not None and counts is not None:
                        counts.update(counter.findall(buf, i, stop))
                    new = False
                    for raw in capture.findall(buf, i, stop):
                        if not raw:
                            continue
                        ty = raw[2]
                        if ty == FMT_TYPE:
                            if self._learn(raw):
                                f = self.formats[raw[3]]
                                lens[f.type] = f.length
                                if f.name in names:
                                    want.add(f.type)
                                new = True
                            if "FMT" in names and FMT_TYPE in self.formats:
                                out.append((self.formats[FMT_TYPE], raw))
                            continue
                        f = self.formats[ty]
                        if f.name in ("FMTU", "UNIT", "MULT"):
                            self._meta(f, raw)
                            if f.name not in types:
                                continue
                        out.append((f, raw))
                    i = stop
                    if new:
                        capture, chain = message_patterns(lens, want)
                        counter = _counter(lens) if counts is not None else None
                        continue
                    break
                if last_raw:
                    lf = self.formats.get(last_raw[2])
                    if lf is not None and lf.time_us:
                        last_time = _TIME.unpack_from(last_raw, 3)[0] / 1e6
                if out:
                    yield out
                rest = len(buf) - i
                tail = buf[i : i + 3]
                bad = not HEAD.startswith(tail[:2]) or (len(tail) == 3 and tail[2] not in lens)
                if bad or (eof and rest):
                    end.offset = base + i
                    end.last_time = last_time
                    if bad:
                        end.status = "corrupt"
                        end.detail = (
                            f"bad bytes at offset {base + i}: no DataFlash header"
                            if not HEAD.startswith(tail[:2])
                            else f"unknown message type {tail[2]} at offset {base + i}"
                        )
                    else:
                        end.status = "truncated"
                        end.detail = f"the last message is incomplete: {rest} bytes at offset {base + i}"
                    break
                if eof:
                    end.offset = self.size
                    end.last_time = last_time
                    break
                base += i
                buf = buf[i:]
        if not self.formats:
            raise NotALog(f"{self.path} is not a DataFlash log (.BIN): no format (FMT) messages")
        self._complete_table = True
        self.end = end

    def messages(
        self, types: Iterable[str], t0: float | None = None, t1: float | None = None
    ) -> Iterator[tuple[LogFormat, list]]:
        """``(format, values)`` for each message of the named types with ``t0 <= TimeUS/1e6 <= t1``
        (messages without TimeUS are given whatever the range), values decoded (multipliers
        applied, strings as text)."""
        lo = None if t0 is None else int(t0 * 1e6)
        hi = None if t1 is None else int(t1 * 1e6)
        for chunk in self.scan(types):
            for f, raw in chunk:
                if f.time_us and (lo is not None or hi is not None):
                    t = _TIME.unpack_from(raw, 3)[0]
                    if (lo is not None and t < lo) or (hi is not None and t > hi):
                        continue
                yield f, f.decode(raw)

    def read_formats(self) -> dict[str, LogFormat]:
        """The full format table (one pass over the file, decoding nothing else)."""
        if not self._complete_table:
            for _ in self.scan(()):
                pass
        return dict(self.by_name)

    def describe(self) -> dict:
        """The message types the log holds (with their message counts and fields with
        units), the number of types it defines, and how the file ends. One pass."""
        counts: Counter = Counter()
        for _ in self.scan((), counts):
            pass
        self._complete_table = True
        by_type = {ty[0]: n for ty, n in counts.items()}
        return {
            "path": str(self.path),
            "size": self.size,
            "end": self.end.as_dict(),
            "messages": sum(by_type.values()),
            "defined_types": len(self.by_name),
            "types": {
                f.name: {
                    "count": by_type[f.type],
                    "fields": {c: f.units[i] if i < len(f.units) else "" for i, c in enumerate(f.columns)},
                }
                for f in sorted(self.formats.values(), key=lambda f: f.name)
                if by_type.get(f.type)
            },
        }
