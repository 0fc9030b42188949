"""The built-in vehicle's DataFlash log: ``logs/NNNNNNNN.BIN`` and ``logs/LASTLOG.TXT`` as ArduCopter 4.7 writes them.

Two parts:

- ``DataFlashLog``: the file. ``start`` picks the number as ``AP_Logger_File`` does (the one in
  ``LASTLOG.TXT`` plus one, reusing an empty log, wrapping after ``LOG_MAX_FILES``), writes
  ``LASTLOG.TXT`` (``"N\\r\\n"``, ``"ND\\r\\n"`` for a log to discard if the vehicle never arms) and
  the header ArduPilot writes (the FMT of FMT and FMTU with their FMTUs, the FMT of every other type,
  a PARM per parameter, every UNIT and MULT, an FMTU per type); ``write("ATT", TimeUS=..., Roll=...)``
  packs one message by field names; ``flush`` hands the bytes to the file so a reader sees them.
- ``dataflash_logger.Logger``: when the vehicle logs and what, as ArduCopter's ``AP_Logger``
  does, fed by the vehicle's hooks.

Formats, units and multipliers come from a real ArduCopter 4.7 log (``dataflash_formats``).
Standard library only.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from .dataflash_formats import FORMATS, MULTS, UNITS

HEAD1, HEAD2 = 0xA3, 0x95
MAX_FILES = 500  # LOG_MAX_FILES' default

# format character -> struct code, as DFReader reads them
_STRUCT = {
    "a": "64s",
    "b": "b",
    "B": "B",
    "h": "h",
    "H": "H",
    "i": "i",
    "I": "I",
    "f": "f",
    "d": "d",
    "n": "4s",
    "N": "16s",
    "Z": "64s",
    "c": "h",
    "C": "H",
    "e": "i",
    "E": "I",
    "L": "i",
    "M": "B",
    "q": "q",
    "Q": "Q",
}
# characters whose stored integer is the value times this (DFReader divides it back)
_SCALE = {"c": 100.0, "C": 100.0, "e": 100.0, "E": 100.0, "L": 1e7}
_RANGE = {
    "b": (-(2**7), 2**7 - 1),
    "B": (0, 2**8 - 1),
    "M": (0, 2**8 - 1),
    "h": (-(2**15), 2**15 - 1),
    "c": (-(2**15), 2**15 - 1),
    "H": (0, 2**16 - 1),
    "C": (0, 2**16 - 1),
    "i": (-(2**31), 2**31 - 1),
    "e": (-(2**31), 2**31 - 1),
    "L": (-(2**31), 2**31 - 1),
    "I": (0, 2**32 - 1),
    "E": (0, 2**32 - 1),
    "q": (-(2**63), 2**63 - 1),
    "Q": (0, 2**64 - 1),
}


class _Fmt:
    """One message type: its FMT, a compiled struct, and how to turn values into stored ones."""

    __slots__ = ("name", "type_id", "length", "format", "columns", "units", "mults", "index", "st", "defaults")

    def __init__(self, name: str, type_id: int, length: int, fmt: str, columns: str, units: str, mults: str):
        self.name, self.type_id, self.length, self.format = name, type_id, length, fmt
        self.columns = tuple(columns.split(","))
        self.units, self.mults = units, mults
        self.index = {c: i for i, c in enumerate(self.columns)}
        self.st = struct.Struct("<BBB" + "".join(_STRUCT[c] for c in fmt))
        if self.st.size != length:
            raise ValueError(f"{name}: format {fmt!r} packs {self.st.size} bytes, FMT says {length}")
        self.defaults = tuple(b"" if _STRUCT[c].endswith("s") else (0.0 if c in "fd" else 0) for c in fmt)

    def stored(self, values: Sequence, scaled: bool) -> list:
        """Values as the struct takes them: strings as bytes, integers rounded and clamped (NaN is
        0); ``scaled``: values are physical (DFReader's), so c/C/e/E/L ones are multiplied."""
        out: list = []
        for c, v in zip(self.format, values):
            code = _STRUCT[c]
            if code.endswith("s"):
                out.append(v if isinstance(v, bytes) else str(v).encode())
            elif c in "fd":
                out.append(float(v))
            else:
                x = float(v) * _SCALE[c] if scaled and c in _SCALE else float(v)
                lo, hi = _RANGE[c]
                out.append(0 if x != x else max(lo, min(hi, int(round(x)))))
        return out


FMTS: dict[str, _Fmt] = {name: _Fmt(name, *row) for name, row in FORMATS.items()}


def read_lastlog(logs_dir: Path) -> tuple[int, bool] | None:
    """``LASTLOG.TXT``'s number and its discard mark (``"7D"``), read as ArduPilot does (leading
    digits); None when there is no such file or no number in it."""
    try:
        text = (Path(logs_dir) / "LASTLOG.TXT").read_text(errors="replace")
    except OSError:
        return None
    digits = ""
    for ch in text.lstrip():
        if not ch.isdigit():
            break
        digits += ch
    if not digits:
        return None
    return int(digits), text.lstrip()[len(digits) : len(digits) + 1] == "D"


def log_path(logs_dir: Path, number: int) -> Path:
    return Path(logs_dir) / f"{number:08d}.BIN"


def next_log_number(logs_dir: Path, max_files: int = MAX_FILES) -> int:
    """As ``AP_Logger_File::start_new_log``: the number in LASTLOG.TXT plus one, the same number
    again when that log is empty or missing, 1 after ``max_files``. Without LASTLOG.TXT ArduPilot
    starts at 1 and would overwrite ``00000001.BIN``; here the highest existing log's number
    stands in for it, so no log is ever overwritten."""
    last = read_lastlog(logs_dir)
    if last is not None:
        n = last[0]
    else:
        nums = (
            [int(p.stem) for p in Path(logs_dir).glob("*.BIN") if p.stem.isdigit()] if Path(logs_dir).is_dir() else []
        )
        n = max(nums, default=0)
    try:
        empty = n > 0 and log_path(logs_dir, n).stat().st_size == 0
    except OSError:
        empty = n > 0  # ArduPilot counts a missing log as empty (size 0): its number is used again
    if not empty:
        n += 1
    return 1 if n > max_files else n


class DataFlashLog:
    """One DataFlash log file at a time in ``logs_dir``. Values given to ``write`` are what
    pymavlink's DFReader gives back: fields whose format scales them (c C e E L: ``Lat`` in
    degrees, ``BARO.Temp`` in degC) in their unit, every other field as stored (its FMTU multiplier
    says its scale: ``CTUN.CRt`` is in cm/s). Bytes are buffered until ``flush``."""

    def __init__(self, logs_dir: Path | str, max_files: int = MAX_FILES):
        self.logs_dir = Path(logs_dir)
        self.max_files = max_files
        self.path: Path | None = None
        self.number: int | None = None
        self.size = 0
        self._fd: int | None = None
        self._buf = bytearray()

    @property
    def active(self) -> bool:
        return self._fd is not None

    def start(
        self, time_us: int, params: Mapping[str, float] | Iterable[tuple[str, float, float]], discard: bool = False
    ) -> Path:
        """Open the next log and write its header. ``params``: name -> value (PARM's Default is
        then NaN, as ArduPilot logs a parameter without a default) or (name, value, default)
        triples, in the vehicle's order. ``discard``: mark it in LASTLOG.TXT as a log to delete at
        the next boot unless ``keep`` is called (LOG_DISARMED=3). Raises OSError."""
        self.stop()
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        n = next_log_number(self.logs_dir, self.max_files)
        path = log_path(self.logs_dir, n)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.path, self.number, self.size = path, n, 0
        self._buf.clear()
        try:
            self._write_lastlog(discard)
            # pymavlink's DFReader (2.4.50) takes an FMTU's TimeUS for its type id when it is
            # below 256 and then fails on the log: a header stamped that early is stamped 256 µs
            self._header(max(int(time_us), 256), params)
            self.flush()
        except OSError:
            self.stop()
            raise
        return path

    def _write_lastlog(self, discard: bool) -> None:
        tmp = self.logs_dir / f".LASTLOG.TXT.{os.getpid()}.tmp"
        tmp.write_bytes(f"{self.number}{'D' if discard else ''}\r\n".encode())
        os.replace(tmp, self.logs_dir / "LASTLOG.TXT")

    def keep(self) -> None:
        """Clear LASTLOG.TXT's discard mark (the vehicle armed: the log is a real one)."""
        if self.number is not None:
            self._write_lastlog(False)

    def _header(self, us: int, params: Mapping[str, float] | Iterable[tuple[str, float, float]]) -> None:
        # ArduPilot's order (LoggerMessageWriter_DFLogStart): FMT and FMTU first as the FMTUs of
        # those two need them, then the other FMTs, the parameters, units, multipliers, FMTUs
        for name in ("FMT", "FMTU"):
            self._format(FMTS[name])
        for name in ("FMTU", "FMT"):
            self._format_units(us, FMTS[name])
        for f in FMTS.values():
            if f.name not in ("FMT", "FMTU"):
                self._format(f)
        rows = ((k, v, math.nan) for k, v in params.items()) if isinstance(params, Mapping) else params
        parm = FMTS["PARM"]
        for name, value, default in rows:
            self._emit(parm, (us, name.encode()[:16], float(value), float(default)))
        unit, mult = FMTS["UNIT"], FMTS["MULT"]
        for uid, label in UNITS:
            self._emit(unit, (us, ord(uid), label.encode()))
        for mid, value in MULTS:
            self._emit(mult, (us, ord(mid), value))
        for f in FMTS.values():
            self._format_units(us, f)

    def _format(self, f: _Fmt) -> None:
        self._emit(FMTS["FMT"], (f.type_id, f.length, f.name.encode(), f.format.encode(), ",".join(f.columns).encode()))

    def _format_units(self, us: int, f: _Fmt) -> None:
        self._emit(FMTS["FMTU"], (us, f.type_id, f.units.encode(), f.mults.encode()))

    def _emit(self, f: _Fmt, values: Sequence) -> None:
        try:
            self._buf += f.st.pack(HEAD1, HEAD2, f.type_id, *values)
        except struct.error:
            self._buf += f.st.pack(HEAD1, HEAD2, f.type_id, *f.stored(values, scaled=False))

    def write(self, name: str, **fields: float | int | str | bytes) -> None:
        """One message by field names (a field not given is 0 or empty). Raises KeyError for a
        type or field ArduCopter's format does not have, naming the ones it has."""
        f = FMTS.get(name)
        if f is None:
            raise KeyError(f"no message type {name!r}; types: {', '.join(FMTS)}")
        values: list = list(f.defaults)
        for k, v in fields.items():
            i = f.index.get(k)
            if i is None:
                raise KeyError(f"{name} has no field {k!r}; fields: {', '.join(f.columns)}")
            values[i] = v
        self.write_stored(name, *f.stored(values, scaled=True))

    def write_stored(self, name: str, *values: float | int | bytes) -> None:
        """One message from every field's stored value, in column order (the fast path: ``Lat``
        as degrees * 1e7, ``BARO.Temp`` as cdegC); out-of-range integers are clamped."""
        if self._fd is None:
            raise RuntimeError("the log is not started")
        self._emit(FMTS[name], values)

    def flush(self) -> None:
        """Write the buffered messages to the file (whole messages: a reader never sees half of
        one unless the disk fills). Raises OSError; the unwritten bytes stay buffered."""
        if self._fd is None or not self._buf:
            return
        data = bytes(self._buf)
        done = 0
        try:
            while done < len(data):
                done += os.write(self._fd, data[done:])
        finally:
            self.size += done
            del self._buf[:done]

    def stop(self) -> None:
        """Flush what it can and close the log."""
        if self._fd is None:
            return
        try:
            self.flush()
        except OSError:
            pass
        finally:
            fd, self._fd = self._fd, None
            self._buf.clear()
            os.close(fd)
