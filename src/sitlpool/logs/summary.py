"""What a flight log says, in one pass: duration, flight phases, modes, altitude, speeds,
distance, battery, events, errors, failsafes and every MSG text, each with its log time
(seconds since boot, as the log's TimeUS) so an answer can quote the log."""

from __future__ import annotations

import math
import os
import re
from bisect import bisect_right

from .reader import LogReader
from .tables import (
    ARM_METHODS,
    EVENTS,
    MODE_REASONS,
    MODE_TABLES,
    VEHICLES,
    error_text,
    is_failsafe,
    name,
)

SUMMARY_TYPES = ("MODE", "EV", "ERR", "MSG", "VER", "ARM", "POS", "GPS", "BAT", "CTUN", "BARO")
ALT_SOURCES = {"POS": "RelHomeAlt", "CTUN": "Alt", "BARO": "Alt"}  # in order of preference
SAMPLE_DT = 0.25  # s between the altitude samples the phases are worked out from (bounded memory)
ON_GROUND_M = 0.5  # above the altitude at arming: still on the ground
VZ_MOVING = 0.4  # m/s: climbing or descending beyond this
HOVER_SPEED = 1.0  # m/s horizontal: below it, hover; above, cruise
MIN_PHASE_S = 1.5  # airborne phases shorter than this are merged into the one before
EARTH_R = 6378137.0
_FIRMWARE = re.compile(r"^(ArduCopter|ArduPlane|ArduRover|Rover|ArduSub|AntennaTracker|Blimp|ArduHeli)\b.*\bV?\d+\.\d+")


# the texts that say a vehicle armed or disarmed: Copter, Plane
ARM_TEXTS = {"Arming motors": True, "Disarming motors": False, "Throttle armed": True, "Throttle disarmed": False}


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


class _Acc:
    """The running state of one pass: only what the summary needs, never the messages."""

    def __init__(self) -> None:
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.vehicle: str | None = None
        self.firmware: str | None = None
        self.modes: list[tuple[float, int, int]] = []  # (t, number, reason)
        self.arming: list[tuple[float, bool, str]] = []  # (t, armed, how)
        self.events: list[dict] = []
        self.errors: list[dict] = []
        self.msgs: list[dict] = []
        self.alt: dict[str, _Alt] = {}
        self.hspeed_max = 0.0
        self.t_hspeed_max = 0.0
        self.gps: list[tuple[float, float]] = []  # (t, ground speed) every SAMPLE_DT
        self.climb_max = 0.0
        self.descent_max = 0.0
        self.t_climb_max = self.t_descent_max = 0.0
        self.last_pos: tuple[float, float, float] | None = None  # (t, lat, lng)
        self.dist_all = 0.0
        self.pos_steps: list[tuple[float, float]] = []  # (t, metres since previous), every SAMPLE_DT
        self.bat_first: tuple | None = None  # (CurrTot mAh, EnrgTot Wh, Volt)
        self.bat_last: tuple | None = None
        self.volt_min = math.inf


class _Alt:
    """One altitude source: extremes and a sample every SAMPLE_DT."""

    def __init__(self, source: str, index: int):
        self.source, self.index = source, index
        self.max, self.min = -math.inf, math.inf
        self.t_max = self.t_min = 0.0
        self.samples: list[tuple[float, float]] = []

    def add(self, t: float, alt: float) -> None:
        if alt > self.max:
            self.max, self.t_max = alt, t
        if alt < self.min:
            self.min, self.t_min = alt, t
        if not self.samples or t - self.samples[-1][0] >= SAMPLE_DT:
            self.samples.append((t, alt))


def _feed(a: _Acc, reader: LogReader) -> None:
    """One pass: every value is taken by its field's name (ArduCopter, ArduPlane and other
    vehicles write different fields under the same type name: a plane's CTUN has no Alt)."""
    step = 0.0
    for f, v in reader.messages(SUMMARY_TYPES):
        if not f.time_us:
            continue
        n = f.name
        ix = f.index

        def g(col: str, default=None, v=v, ix=ix):
            i = ix.get(col)
            return v[i] if i is not None and i < len(v) else default

        t = v[0] / 1e6
        if a.t_first is None or t < a.t_first:
            a.t_first = t
        if a.t_last is None or t > a.t_last:
            a.t_last = t
        if n in ALT_SOURCES:
            if ALT_SOURCES[n] not in ix or g("I", 0) != 0:  # BARO: instance 0 only
                continue
            src = a.alt.get(n)
            if src is None:
                src = a.alt[n] = _Alt(f"{n}.{ALT_SOURCES[n]}", ix[ALT_SOURCES[n]])
            src.add(t, v[src.index])
            lat, lng = g("Lat"), g("Lng")
            if n == "POS" and lat is not None and lng is not None:
                if a.last_pos is not None:
                    _pt, plat, plng = a.last_pos
                    dn = math.radians(lat - plat) * EARTH_R
                    de = math.radians(lng - plng) * EARTH_R * math.cos(math.radians(lat))
                    step += math.hypot(dn, de)
                    if not a.pos_steps or t - a.pos_steps[-1][0] >= SAMPLE_DT:
                        a.pos_steps.append((t, step))
                        step = 0.0
                a.last_pos = (t, lat, lng)
        elif n == "GPS":
            if g("I", 0) != 0 or g("Status", 0) < 3:  # instance 0 with a 3D fix
                continue
            spd, vz = g("Spd", 0.0), g("VZ", 0.0)
            if spd > a.hspeed_max:
                a.hspeed_max, a.t_hspeed_max = spd, t
            if -vz > a.climb_max:  # VZ is north-east-down: down is positive
                a.climb_max, a.t_climb_max = -vz, t
            if vz > a.descent_max:
                a.descent_max, a.t_descent_max = vz, t
            if not a.gps or t - a.gps[-1][0] >= SAMPLE_DT:
                a.gps.append((t, spd))
        elif n == "BAT":
            if g("Inst", 0) != 0:
                continue
            now = (g("CurrTot"), g("EnrgTot"), g("Volt"))
            if a.bat_first is None:
                a.bat_first = now
            a.bat_last = now
            volt = now[2]
            if volt is not None and 0 < volt < a.volt_min:
                a.volt_min = volt
        elif n == "MODE":
            a.modes.append((t, g("ModeNum", g("Mode")), g("Rsn", 0)))
        elif n == "EV":
            ev = g("Id")
            a.events.append({"time": _r(t), "id": ev, "name": name(EVENTS, ev, "event")})
            if ev in (10, 11):
                a.arming.append((t, ev == 10, "EV"))
        elif n == "ARM":
            meth = g("Method")
            a.arming.append((t, bool(g("ArmState")), name(ARM_METHODS, meth, "method") if meth is not None else "ARM"))
        elif n == "ERR":
            sub, code = g("Subsys"), g("ECode")
            a.errors.append(
                {
                    "time": _r(t),
                    "subsystem": sub,
                    "code": code,
                    "text": error_text(sub, code),
                    "failsafe": is_failsafe(sub),
                }
            )
        elif n == "MSG":
            text = g("Message", "")
            a.msgs.append({"time": _r(t), "text": text})
            if text in ARM_TEXTS:
                a.arming.append((t, ARM_TEXTS[text], "MSG"))
            if a.firmware is None and _FIRMWARE.match(text):
                a.firmware = text
        elif n == "VER":
            if g("BU") in VEHICLES:
                a.vehicle = VEHICLES[g("BU")]
            if g("FWS"):
                a.firmware = g("FWS")


def _arm_intervals(a: _Acc, t0: float, t1: float) -> list[tuple[float, float, str, str]]:
    """``(armed at, disarmed at, how armed, how disarmed)``; a log that starts armed (ArduPilot
    starts logging at arming unless LOG_DISARMED) has its first interval from the log's start."""
    changes: list[tuple[float, bool, str]] = []
    for t, armed, how in sorted(a.arming, key=lambda x: x[0]):
        if changes and changes[-1][1] == armed and t - changes[-1][0] < 0.5:
            if changes[-1][2] in ("EV", "MSG") and how not in ("EV", "MSG"):
                changes[-1] = (changes[-1][0], armed, how)  # the ARM message says how
            continue
        changes.append((t, armed, how))
    out: list[tuple[float, float, str, str]] = []
    start: tuple[float, str] | None = None
    state = bool(changes) and not changes[0][1]  # first change a disarm: armed since the start
    if state:
        start = (t0, "before the log")
    for t, armed, how in changes:
        if armed and not state:
            start, state = (t, how), True
        elif not armed and state and start is not None:
            out.append((start[0], t, start[1], how))
            state = False
    if state and start is not None:
        out.append((start[0], t1, start[1], "still armed at the end of the log"))
    return out


def _phases(a: _Acc, s: list[tuple[float, float]], arms: list, t0: float, t1: float) -> list[dict]:
    if not s:
        return [
            {
                "phase": "boot",
                "start": _r(t0),
                "end": _r(t1),
                "duration": _r(t1 - t0, 2),
                "alt_start": None,
                "alt_end": None,
            }
        ]
    ts = [x[0] for x in s]
    gps_t = [g[0] for g in a.gps]
    labels: list[tuple[float, str]] = []
    first_arm = arms[0][0] if arms else math.inf
    for i, (t, alt) in enumerate(s):
        arm = next((x for x in arms if x[0] <= t < x[1]), None)
        if arm is None:
            labels.append((t, "boot" if t < first_arm else "disarmed"))
            continue
        j = max(0, bisect_right(ts, arm[0]) - 1)
        ground = s[j][1]
        lo, hi = max(0, i - 2), min(len(s) - 1, i + 2)
        vz = (s[hi][1] - s[lo][1]) / (s[hi][0] - s[lo][0]) if s[hi][0] > s[lo][0] else 0.0
        if alt - ground < ON_GROUND_M and abs(vz) < VZ_MOVING * 2:
            labels.append((t, "armed on ground"))
        elif vz > VZ_MOVING:
            labels.append((t, "climb"))
        elif vz < -VZ_MOVING:
            labels.append((t, "descent"))
        else:
            k = bisect_right(gps_t, t) - 1
            hs = a.gps[k][1] if k >= 0 else 0.0
            labels.append((t, "hover" if hs < HOVER_SPEED else "cruise"))
    runs: list[list] = []  # [label, start, end]
    for t, lab in labels:
        if runs and runs[-1][0] == lab:
            runs[-1][2] = t
        else:
            if runs:
                runs[-1][2] = t
            runs.append([lab, t, t])
    runs[0][1] = min(runs[0][1], t0)
    runs[-1][2] = max(runs[-1][2], t1)
    merged: list[list] = []
    for r in runs:  # short airborne wobbles join the phase before
        if merged and r[0] in ("climb", "descent", "hover", "cruise") and r[2] - r[1] < MIN_PHASE_S:
            merged[-1][2] = r[2]
        elif merged and merged[-1][0] == r[0]:
            merged[-1][2] = r[2]
        else:
            merged.append(list(r))
    for i, r in enumerate(merged):  # a climb from the ground is a takeoff, a descent to it a landing
        prev = merged[i - 1][0] if i else None
        nxt = merged[i + 1][0] if i + 1 < len(merged) else None
        if r[0] == "climb" and prev == "armed on ground":
            r[0] = "takeoff"
        elif r[0] == "descent" and nxt in ("armed on ground", "disarmed"):
            r[0] = "landing"
    edges = sorted({x[0] for x in arms} | {x[1] for x in arms})
    off = ("boot", "disarmed")
    for i in range(1, len(merged)):  # arming and disarming: at their logged times, not a sample's
        if (merged[i - 1][0] in off) != (merged[i][0] in off) and edges:
            e = min(edges, key=lambda x: abs(x - merged[i][1]))
            if abs(e - merged[i][1]) <= 2 * SAMPLE_DT + 0.5 and merged[i - 1][1] <= e <= merged[i][2]:
                merged[i - 1][2] = merged[i][1] = e
    alt_at = {x[0]: x[1] for x in s}
    out = []
    for lab, st, en in merged:
        k0, k1 = max(0, bisect_right(ts, st) - 1), max(0, bisect_right(ts, en) - 1)
        out.append(
            {
                "phase": lab,
                "start": _r(st),
                "end": _r(en),
                "duration": _r(en - st, 2),
                "alt_start": _r(alt_at[ts[k0]], 2),
                "alt_end": _r(alt_at[ts[k1]], 2),
            }
        )
    return out


def summary(path: str | os.PathLike) -> dict:
    """Summary of one DataFlash log, read in one streaming pass (bounded memory).

    Returns a dict: ``path``, ``size``, ``end`` (how the file ends: complete / truncated /
    corrupt, with the byte offset and last log time read), ``vehicle``, ``firmware``,
    ``start``/``end_time``/``duration`` (s, log time), ``arming`` (intervals), ``phases``
    (boot, armed on ground, takeoff, climb, hover, cruise, descent, landing, disarmed: each
    with start/end), ``modes`` (name, number, reason, start, end), ``altitude`` (max/min, m,
    with source and times), ``speed`` (max horizontal, climb and descent, m/s), ``distance_m``
    (flown while armed), ``battery`` (used mAh and Wh, min voltage), ``events``, ``errors``,
    ``failsafes`` and ``messages`` (every MSG text), each with its ``time``.
    Raises ``NotALog`` for a file that is not a DataFlash log.
    """
    reader = LogReader(path)
    a = _Acc()
    _feed(a, reader)
    t0 = a.t_first if a.t_first is not None else 0.0
    t1 = max(x for x in (a.t_last, reader.end.last_time, t0) if x is not None)
    vehicle = a.vehicle
    if vehicle is None and a.firmware:
        word = a.firmware.split()[0]
        vehicle = {"ArduRover": "Rover", "ArduHeli": "ArduCopter"}.get(word, word)
    table = MODE_TABLES.get(vehicle or "", {})
    modes: list[dict] = []
    for t, num, rsn in a.modes:
        if modes and modes[-1]["number"] == num:
            continue  # ArduPilot writes the mode again at arming
        if modes:
            modes[-1]["end"] = _r(t)
        modes.append(
            {
                "mode": table.get(num, f"mode {num}"),
                "number": num,
                "reason": name(MODE_REASONS, rsn, "reason"),
                "start": _r(t),
                "end": _r(t1),
            }  # fmt: skip
        )
    arms = _arm_intervals(a, t0, t1)
    alt = next((a.alt[k] for k in ALT_SOURCES if k in a.alt), _Alt("", 0))
    armed_windows = [(x[0], x[1]) for x in arms]
    dist = sum(d for t, d in a.pos_steps if any(s <= t <= e for s, e in armed_windows))
    bat: dict = {}
    if a.bat_first is not None and a.bat_last is not None:

        def used(i: int, nd: int):
            x, y = a.bat_first[i], a.bat_last[i]  # type: ignore[index]
            return _r(y - x, nd) if x is not None and y is not None else None

        bat = {
            "used_mah": used(0, 1),
            "used_wh": used(1, 3),
            "volt_start": _r(a.bat_first[2], 2) if a.bat_first[2] is not None else None,
            "volt_min": _r(a.volt_min, 2) if a.volt_min < math.inf else None,
        }
    fs = [dict(e, source="ERR") for e in a.errors if e["failsafe"]]
    fs += [{"time": m["time"], "text": m["text"], "source": "MSG"} for m in a.msgs if "failsafe" in m["text"].lower()]
    return {
        "path": str(reader.path),
        "size": reader.size,
        "end": reader.end.as_dict(),
        "vehicle": vehicle,
        "firmware": a.firmware,
        "start": _r(t0),
        "end_time": _r(t1),
        "duration": _r(t1 - t0, 2),
        "arming": [{"armed": _r(s), "disarmed": _r(e), "armed_by": h1, "disarmed_by": h2} for s, e, h1, h2 in arms],
        "phases": _phases(a, alt.samples, arms, t0, t1),
        "modes": modes,
        "altitude": {
            "source": alt.source or None,
            "max": _r(alt.max, 2) if alt.max > -math.inf else None,
            "max_time": _r(alt.t_max),
            "min": _r(alt.min, 2) if alt.min < math.inf else None,
            "min_time": _r(alt.t_min),
        },
        "speed": {
            "max_horizontal": _r(a.hspeed_max, 2),
            "max_horizontal_time": _r(a.t_hspeed_max),
            "max_climb": _r(a.climb_max, 2),
            "max_climb_time": _r(a.t_climb_max),
            "max_descent": _r(a.descent_max, 2),
            "max_descent_time": _r(a.t_descent_max),
        },
        "distance_m": _r(dist, 1),
        "battery": bat,
        "events": a.events,
        "errors": a.errors,
        "failsafes": sorted(fs, key=lambda x: x["time"]),
        "messages": a.msgs,
    }
