"""Field series (``TYPE.Field`` over time, downsampled keeping peaks) and raw message pages,
both streamed from the file in bounded memory."""

from __future__ import annotations

import difflib
import math
import os
import re

from .reader import LogError, LogFormat, LogReader, TimeRangeError, UnknownField

MAX_POINTS = 10000  # the most points a series may ask for
MAX_PAGE = 1000  # the most messages one page may ask for
_NAME = re.compile(r"^([A-Za-z0-9_]{1,16})(?:\[(\d{1,3})\])?\.([A-Za-z0-9_]{1,16})$")


class Downsampler:
    """At most ``max_points`` points of a series that arrives in time order, in bounded
    memory, keeping its peaks: the raw points while they fit, then buckets of equal width
    (the width doubling, neighbours merging, as the series grows) each giving its minimum
    and its maximum in time order."""

    def __init__(self, max_points: int):
        self.max_points = max_points
        self.nb = max(1, max_points // 2)
        self.raw: list[tuple[float, float]] | None = []
        self.count = 0
        self.origin = 0.0
        self.width = 0.0
        self.buckets: dict[int, list[tuple[float, float]]] = {}  # index -> [min point, max point]

    def add(self, t: float, v: float) -> None:
        self.count += 1
        if self.raw is not None:
            self.raw.append((t, v))
            if len(self.raw) <= self.max_points:
                return
            pts, self.raw = self.raw, None
            self.origin = pts[0][0]
            self.width = max((pts[-1][0] - self.origin) / self.nb * 1.0001, 1e-6)
            for p in pts:
                self._put(*p)
            return
        self._put(t, v)

    def _put(self, t: float, v: float) -> None:
        i = int((t - self.origin) / self.width)
        b = self.buckets.get(i)
        if b is None:
            self.buckets[i] = [(t, v), (t, v)]
            while len(self.buckets) > self.nb:
                self._halve()
        else:
            if v < b[0][1]:
                b[0] = (t, v)
            if v > b[1][1]:
                b[1] = (t, v)

    def _halve(self) -> None:
        self.width *= 2
        merged: dict[int, list[tuple[float, float]]] = {}
        for i, (lo, hi) in self.buckets.items():
            m = merged.get(i // 2)
            if m is None:
                merged[i // 2] = [lo, hi]
            else:
                if lo[1] < m[0][1]:
                    m[0] = lo
                if hi[1] > m[1][1]:
                    m[1] = hi
        self.buckets = merged

    def points(self) -> list[tuple[float, float]]:
        if self.raw is not None:
            return list(self.raw)
        out: list[tuple[float, float]] = []
        for i in sorted(self.buckets):
            lo, hi = self.buckets[i]
            out.extend([lo] if lo == hi else sorted((lo, hi)))
        return out


def _closest(word: str, choices, n: int = 5) -> list[str]:
    exact = [c for c in choices if c.lower() == word.lower()]
    return exact + [c for c in difflib.get_close_matches(word, list(choices), n=n, cutoff=0.4) if c not in exact]


def unknown_names(fmts: dict[str, LogFormat], names: list[tuple[str, str]]) -> str | None:
    """One line naming the ``(type, field)`` pairs the log lacks and what it has instead."""
    parts = []
    for typ, fld in names:
        f = fmts.get(typ)
        if f is None:
            near = _closest(typ, fmts)
            has = ", ".join(near) if near else "none close"
            parts.append(
                f"no message type {typ} (closest: {has}; the log has {len(fmts)} types: {', '.join(sorted(fmts))})"
            )
        elif fld not in f.columns:
            near = _closest(fld, f.columns)
            rest = [c for c in f.columns if c not in near]
            parts.append(f"{typ} has no field {fld} ({typ} fields: {', '.join(near + rest)})")
    return "; ".join(parts) or None


def _parse(names) -> list[tuple[str, int | None, str]]:
    if isinstance(names, str):
        names = [n for n in names.replace(",", " ").split() if n]
    if not names:
        raise LogError("no fields asked for: give TYPE.Field names, e.g. CTUN.Alt BAT.Volt")
    out = []
    for n in names:
        m = _NAME.match(str(n).strip())
        if not m:
            raise UnknownField(f"{n!r} is not a TYPE.Field name (e.g. CTUN.Alt, or GPS[1].Spd for instance 1)")
        out.append((m.group(1), int(m.group(2)) if m.group(2) else None, m.group(3)))
    return out


def _check_range(t0: float | None, t1: float | None) -> None:
    for x in (t0, t1):
        if x is not None and (not isinstance(x, (int, float)) or not math.isfinite(x)):
            raise TimeRangeError(f"time {x!r} is not a number of seconds")
    if t0 is not None and t1 is not None and t1 < t0:
        raise TimeRangeError(f"time range {t0:g}-{t1:g} s ends before it starts")


def fields(
    path: str | os.PathLike,
    names,
    t0: float | None = None,
    t1: float | None = None,
    max_points: int = 500,
) -> dict:
    """Series of ``TYPE.Field`` names (``"CTUN.Alt"``; ``"GPS[1].Spd"`` for instance 1 of a
    multi-instance type, instance 0 by default) over log time ``t0..t1`` (s; None: the
    log's start/end), each downsampled to at most ``max_points`` (2..10000) keeping the
    minimum and maximum of each time bucket. One pass over the file.

    Returns ``{"path", "t0", "t1", "end", "fields": {name: {"unit", "t": [...], "v": [...],
    "count" (points in range before downsampling), "downsampled"}}}``.
    Raises ``UnknownField`` naming what the log has (closest first), ``TimeRangeError`` for
    a range outside the log, ``LogError`` for a bad ``max_points``, ``NotALog``.
    """
    if isinstance(max_points, bool) or not isinstance(max_points, int) or not 2 <= max_points <= MAX_POINTS:
        raise LogError(f"max_points must be a whole number from 2 to {MAX_POINTS}, not {max_points!r}")
    _check_range(t0, t1)
    wanted = _parse(names)
    reader = LogReader(path)
    types = {typ for typ, _, _ in wanted}
    sinks: dict[str, list[tuple[str, int | None, Downsampler]]] = {}
    for typ, inst, fld in wanted:
        sinks.setdefault(typ, []).append((fld, inst, Downsampler(max_points)))
    span: dict[str, list[float]] = {}
    idx: dict[tuple[str, str], int] = {}
    for f, v in reader.messages(types):
        if not f.time_us:
            continue
        t = v[0] / 1e6
        sp = span.get(f.name)
        if sp is None:
            bad = unknown_names(reader.by_name, [(f.name, fld) for fld, _, _ in sinks[f.name]])
            if bad:
                raise UnknownField(bad)
            span[f.name] = [t, t]
        else:
            sp[1] = t
        if (t0 is not None and t < t0) or (t1 is not None and t > t1):
            continue
        for fld, inst, ds in sinks[f.name]:
            if f.instance is not None and v[f.instance] != (inst or 0):
                continue
            i = idx.get((f.name, fld))
            if i is None:
                i = idx[(f.name, fld)] = f.columns.index(fld)
            x = v[i]
            if isinstance(x, (int, float)):
                ds.add(t, float(x))
    bad = unknown_names(reader.by_name, [(typ, fld) for typ, _, fld in wanted])
    if bad:
        raise UnknownField(bad)
    if span:
        lo, hi = min(s[0] for s in span.values()), max(s[1] for s in span.values())
        if (t0 is not None and t0 > hi) or (t1 is not None and t1 < lo):
            raise TimeRangeError(
                f"time range {t0 if t0 is not None else lo:g}-{t1 if t1 is not None else hi:g} s is outside "
                f"the log's {', '.join(sorted(types))} messages ({lo:.3f}-{hi:.3f} s)"
            )
    out: dict = {"path": str(reader.path), "t0": t0, "t1": t1, "end": reader.end.as_dict(), "fields": {}}
    for typ, inst, fld in wanted:
        ds = next(d for fl, i, d in sinks[typ] if fl == fld and i == inst)
        pts = ds.points()
        key = f"{typ}[{inst}].{fld}" if inst is not None else f"{typ}.{fld}"
        out["fields"][key] = {
            "unit": reader.by_name[typ].unit(fld),
            "t": [round(p[0], 6) for p in pts],
            "v": [p[1] for p in pts],
            "count": ds.count,
            "downsampled": ds.raw is None,
        }
    return out


def _plain(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else str(x)
    if isinstance(x, (bytes, bytearray)):
        return x.hex()
    if isinstance(x, (tuple, list)):
        return [_plain(y) for y in x]
    return x


def messages(
    path: str | os.PathLike,
    type: str,
    t0: float | None = None,
    t1: float | None = None,
    offset: int = 0,
    limit: int = 100,
) -> dict:
    """One page of raw messages of one type with ``t0 <= time <= t1`` (s, log time), as dicts
    of field values (multipliers applied), with the fields' units. Reading stops at the end
    of the page. Returns ``{"path", "type", "fields", "units", "offset", "limit",
    "messages": [{"time": s, field: value, ...}], "more": bool}``."""
    for what, x, lo, hi in (("offset", offset, 0, 10**9), ("limit", limit, 1, MAX_PAGE)):
        if isinstance(x, bool) or not isinstance(x, int) or not lo <= x <= hi:
            raise LogError(f"{what} must be a whole number from {lo} to {hi}, not {x!r}")
    _check_range(t0, t1)
    if not isinstance(type, str) or not re.fullmatch(r"[A-Za-z0-9_]{1,16}", type):
        raise UnknownField(f"{type!r} is not a message type name (e.g. CTUN, GPS, MSG)")
    reader = LogReader(path)
    page: list[dict] = []
    more = False
    seen = 0
    fmt: LogFormat | None = None
    span: list[float] = []
    for f, v in reader.messages([type]):
        fmt = f
        t = v[0] / 1e6 if f.time_us else None
        if t is not None:
            span = [span[0] if span else t, t]
            if (t0 is not None and t < t0) or (t1 is not None and t > t1):
                continue
        seen += 1
        if seen <= offset:
            continue
        if len(page) >= limit:
            more = True
            break
        d = {"time": None if t is None else round(t, 6)}
        d.update({c: _plain(x) for c, x in zip(f.columns, v)})
        page.append(d)
    if fmt is None:
        fmt = reader.by_name.get(type)
        if fmt is None:
            raise UnknownField(unknown_names(reader.by_name, [(type, "")]) or f"no message type {type}")
    if not page and span and ((t0 is not None and t0 > span[1]) or (t1 is not None and t1 < span[0])):
        raise TimeRangeError(f"time range is outside the log's {type} messages ({span[0]:.3f}-{span[1]:.3f} s)")
    return {
        "path": str(reader.path),
        "type": type,
        "fields": list(fmt.columns),
        "units": {c: u for c, u in zip(fmt.columns, fmt.units) if u},
        "offset": offset,
        "limit": limit,
        "messages": page,
        "more": more,
        "end": reader.end.as_dict() if not more else None,
    }
