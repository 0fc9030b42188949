"""Each vehicle's live DataFlash log, read as it grows, for the dashboard's small plots.

A SITL writes ``<run dir>/logs/NNNNNNNN.BIN`` (the one ``LASTLOG.TXT`` names) while it flies.
``LiveLog.poll()`` (once a second) reads only what was appended since the last poll, never
the file again from its start:

- the last ``TAIL`` bytes are walked as a chain of messages of known lengths (one compiled
  regular expression, as ``sitlpool.logs.reader`` walks a log), starting at the first header
  from which the chain reaches the end of the file; the last message of each plotted type
  (instance 0) gives one point per field: the plots sample the log once a second;
- when the tail holds a type whose length is not known (the chain breaks on it), the bytes
  written since the last search are searched for FMT messages (``bytes.find`` of their
  header, in C), each checked before it is believed: the format table grows as ArduPilot
  defines types (most at the log's start, some just before their first message).

So a poll costs one read and one walk of at most ``TAIL`` bytes, whatever the log's size or
rate, and the bytes in between are read once, only when a new type appears. A log first seen mid-flight (a dashboard opened late) is walked once from
its start for its points so far, if it is at most ``BACKFILL_MAX`` bytes (two minutes of real
ArduCopter, half an hour of the built-in vehicle). Files are opened through directory descriptors without following
symlinks, and only regular files are read (anyone sharing the data dir can plant a FIFO).
"""

from __future__ import annotations

import os
import re
import stat
import struct
from collections import deque
from pathlib import Path

from pymavlink.DFReader import FORMAT_TO_STRUCT

from ..logs.reader import FMT_LEN, FMT_TYPE, HEAD, LogFormat, message_patterns
from ..logs.sitldir import BIN_NAME

# (plot, unit, the series it draws); a series is TYPE.Field, instance 0 of a multi-instance type
PLOTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("altitude", "m", ("CTUN.Alt", "BARO.Alt")),
    ("ground speed", "m/s", ("GPS.Spd",)),
    ("attitude", "deg", ("ATT.Roll", "ATT.Pitch")),
    ("battery", "V", ("BAT.Volt",)),
    ("current", "A", ("BAT.Curr",)),
)
SERIES = tuple(s for _, _, names in PLOTS for s in names)
PLOTTED = {s.split(".")[0] for s in SERIES}
POINTS = 300  # points kept per series (5 minutes at one a second)
TAIL = 16 * 1024  # bytes of the log's end walked each poll: holds every plotted type at ArduCopter's rates
KEEP_S = 5.0  # a plotted type absent from the tail shows its last value up to this old (log seconds)
CHUNK = 4 << 20  # new bytes read at a time (a log first seen mid-flight may be large)
BACKFILL_MAX = 8 << 20  # a log first seen mid-flight up to this size: its points so far are read once
INSTANCE_FIELDS = ("I", "Inst", "C", "Instance")
_FMT = struct.Struct("<BB4s16s64s")
_NAME_OK = re.compile(rb"[A-Z0-9_]{1,4}")
_SIZES = {c: struct.calcsize("<" + code[0]) for c, code in FORMAT_TO_STRUCT.items()}  # format character -> bytes


def _open_in(dir_fd: int, name: str, flags: int) -> int:
    return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)


class LiveLog:
    """The live log of one SITL whose working directory is ``run_dir``."""

    def __init__(self, run_dir: str | os.PathLike):
        self.run_dir = Path(run_dir)
        self.name: str | None = None  # the file being read, e.g. 00000003.BIN
        self.size = 0
        self.error: str | None = None
        self.points: deque = deque(maxlen=POINTS)  # [t, value per SERIES (None: not in the log)]
        self._key: tuple | None = None  # (dev, ino) of the file being read
        self._offset = 0  # searched for FMT messages up to here
        self._tail = b""  # the file's last TAIL bytes
        self._reset()

    def _reset(self) -> None:
        self.formats: dict[int, LogFormat] = {}
        self.by_name: dict[str, LogFormat] = {}
        self._lens: dict[int, int] = {FMT_TYPE: FMT_LEN}
        self._chain: re.Pattern | None = None
        self._capture: re.Pattern | None = None
        self._offset = 0
        self._tail = b""
        self._backfilled = False
        self._last: dict[str, list] = {}  # plotted type -> the values of its last message read
        self.points.clear()

    # ---- finding and reading the file -------------------------------------------------

    def _current(self, logs_fd: int) -> str | None:
        """The log LASTLOG.TXT names (if it exists), else the highest-numbered one."""
        try:
            fd = _open_in(logs_fd, "LASTLOG.TXT", os.O_RDONLY)
        except OSError:
            fd = -1
        if fd >= 0:
            try:  # read every poll (a few bytes): a rewrite within the same mtime tick is seen too
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    words = os.read(fd, 32).split()
                    digits = words[0].rstrip(b"Dd") if words else b""  # "7D": a log to discard, still written
                    if digits.isdigit():
                        return f"{int(digits):08d}.BIN"
            finally:
                os.close(fd)
        names = [n for n in os.listdir(logs_fd) if BIN_NAME.match(n)]
        return max(names, key=lambda n: int(n.split(".")[0])) if names else None

    def poll(self) -> bool:
        """Read what the log gained since the last poll; True if a new point was added."""
        try:
            dir_fd = os.open(self.run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return self._gone()
        try:
            try:
                logs_fd = _open_in(dir_fd, "logs", os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                return self._gone()
            try:
                name = self._current(logs_fd)
                if name is None:
                    return self._gone()
                try:
                    fd = _open_in(logs_fd, name, os.O_RDONLY)
                except OSError as e:
                    self.error = f"{name}: {e.strerror or e}"
                    return False
                try:
                    return self._read(fd, name)
                finally:
                    os.close(fd)
            finally:
                os.close(logs_fd)
        finally:
            os.close(dir_fd)

    def _gone(self) -> bool:
        if self.name is not None:
            self.name, self._key, self.size = None, None, 0
            self._reset()
            return True
        return False

    def _read(self, fd: int, name: str) -> bool:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            self.error = f"{name} is not a regular file: not read"
            return False
        key = (st.st_dev, st.st_ino)
        if key != self._key or st.st_size < self._offset:  # a new log, or this one replaced
            self._key, self.name = key, name
            self._reset()
        self.error = None
        size = st.st_size
        if size == self.size and self.points:
            return False
        self.size = size
        had = self.points[-1] if self.points else None
        if not self._backfilled:
            self._backfilled = True  # once a log, whatever it finds
            if size <= BACKFILL_MAX and self._offset == 0:
                buf = os.pread(fd, size, 0)
                self._learn_formats(buf)
                self._offset = max(0, len(buf) - (FMT_LEN - 1))
                self._backfill(buf)
        n = min(TAIL, size)
        self._tail = os.pread(fd, n, size - n)  # the end of the log (one read of at most TAIL bytes)
        span = self._start(self._tail)
        if span is None:
            # the tail holds a type not known yet (or none is): the FMT messages written since the last
            # search define it; searched only then (ArduCopter writes most of its FMTs at the start)
            self._search_formats(fd, size)
            span = self._start(self._tail)
        if span is not None:
            self._sample(span)
        return bool(self.points) and self.points[-1] is not had

    def _search_formats(self, fd: int, size: int) -> None:
        """The FMT messages from where the last search stopped to ``size`` (read once, in chunks)."""
        pos = self._offset
        while pos < size:
            buf = os.pread(fd, min(CHUNK, size - pos), pos)
            if not buf:
                break
            self._learn_formats(buf)
            end = pos + len(buf)
            # an FMT cut at the end of what was read is searched again with the next bytes
            nxt = max(pos, end - (FMT_LEN - 1))
            self._offset = nxt
            if end >= size or nxt == pos:
                break
            pos = nxt

    def _backfill(self, buf: bytes) -> None:
        """A log first seen mid-flight (``buf``: all of it): its points so far, one a second of log time."""
        if self._chain is None or self._capture is None:
            return
        end = self._chain.match(buf, 0).end()  # type: ignore[union-attr]  # always matches
        last: dict[str, list] = {}
        step_t: float | None = None
        for raw in self._capture.findall(buf, 0, end):
            if not raw:
                continue
            f = self.formats[raw[2]]
            v = f.decode(raw)
            col = next((f.index[c] for c in INSTANCE_FIELDS if c in f.index), None)
            if col is not None and v[col] != 0:
                continue
            last[f.name] = v
            t = v[0] / 1e6
            if step_t is None:
                step_t = t
            elif t - step_t >= 1.0:
                self.points.append(self._point(t, last))
                step_t = t
        self._last = last

    # ---- the format table -----------------------------------------------------------

    def _learn_formats(self, buf: bytes) -> None:
        """The FMT messages in ``buf``: every type's length (the chain needs them all), the plotted
        types' decoders. A candidate is believed only if its name and format agree with its length."""
        fmt_head = HEAD + bytes([FMT_TYPE])
        i = buf.find(fmt_head)
        new = False
        while 0 <= i <= len(buf) - FMT_LEN:
            ty, n, name, fmt, cols = _FMT.unpack_from(buf, i + 3)
            i = buf.find(fmt_head, i + 3)
            name = name.rstrip(b"\0")
            if ty in self._lens or n <= 3 or not _NAME_OK.fullmatch(name):
                continue
            chars = fmt.split(b"\0", 1)[0].decode("ascii", "replace")
            if any(c not in _SIZES for c in chars) or sum(_SIZES[c] for c in chars) != n - 3:
                continue  # not a format after all (the bytes of some value)
            self._lens[ty] = n
            new = True
            if name.decode() in PLOTTED:  # only these are decoded: pymavlink's table costs ~30 µs a type
                f = LogFormat.from_fmt(ty, n, name.decode(), chars, cols.split(b"\0", 1)[0].decode("ascii", "replace"))
                if f.struct is not None:
                    self.formats[ty] = f
                    self.by_name.setdefault(f.name, f)
        if new:
            self._compile()

    def _compile(self) -> None:
        want = set(self.formats)  # the plotted types (the only ones decoded)
        capture, self._chain = message_patterns(self._lens, want)
        self._capture = capture if want & set(self._lens) else None

    # ---- one point from the tail ----------------------------------------------------

    def _start(self, buf: bytes) -> tuple[int, int] | None:
        """Where the chain of messages starts in ``buf`` and where it ends: the first header
        from which it runs to the end (bar one incomplete last message)."""
        if self._chain is None:
            return None
        lens = self._lens
        i = buf.find(HEAD)
        while i >= 0:
            n = lens.get(buf[i + 2]) if i + 2 < len(buf) else None
            if n is None or buf[i + n : i + n + 2] not in (HEAD, HEAD[:1], b""):  # no header after it: not a start
                i = buf.find(HEAD, i + 1)
                continue
            end = self._chain.match(buf, i).end()  # type: ignore[union-attr]  # always matches
            rest = buf[end:]
            if end - i >= 64 and (
                not rest or (HEAD.startswith(rest[:2]) and (len(rest) < 3 or len(rest) < self._lens.get(rest[2], 0)))
            ):
                return i, end
            i = buf.find(HEAD, i + 1)
        return None

    def _sample(self, span: tuple[int, int]) -> bool:
        """One point from the tail's messages in ``span``."""
        if self._capture is None:
            return False
        new: dict[str, list] = {}
        for raw in self._capture.findall(self._tail, *span):
            if raw:
                f = self.formats[raw[2]]
                v = f.decode(raw)
                col = next((f.index[c] for c in INSTANCE_FIELDS if c in f.index), None)
                if col is not None and v[col] != 0:
                    continue
                new[f.name] = v
        if not new:
            return False
        t_us = max(v[0] for v in new.values())
        # a slow type (GPS at 5 Hz) may be missing from the tail: its last value stands a few seconds
        last = {k: v for k, v in self._last.items() if t_us - v[0] <= KEEP_S * 1e6}
        self._last = last = {**last, **new}
        t = t_us / 1e6
        if self.points and t <= self.points[-1][0]:
            return False
        self.points.append(self._point(t, last))
        return True

    def _point(self, t: float, last: dict[str, list]) -> list:
        """``[t, value of each SERIES]`` from the last message of each type (``last``: name -> values)."""
        point: list = [round(t, 3)]
        for s in SERIES:
            typ, fld = s.split(".")
            vals = last.get(typ)
            fm = self.by_name.get(typ)
            x = vals[fm.index[fld]] if vals is not None and fm is not None and fld in fm.index else None
            point.append(round(float(x), 3) if isinstance(x, (int, float)) and x == x and abs(x) < 1e9 else None)
        return point

    # ---- what the page gets ---------------------------------------------------------

    def as_dict(self, series: bool = False) -> dict | None:
        if self.name is None and self.error is None:
            return None
        d: dict = {"name": self.name, "size": self.size, "error": self.error}
        d["last"] = self.points[-1] if self.points else None
        if series:
            d["series"] = list(self.points)
        return d
