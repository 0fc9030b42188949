"""Metrics of one run, from its flight log and its step outcomes. Each named metric is a
function of a ``RunData``; user-defined ones (Python API) are callables on the log summary
and the log's path. Kinds: ``binary`` (pass/fail: Fisher's exact test) and ``continuous``
(Welch's t-test)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import logs
from .plan import BatchError

ON_GROUND_M = 0.3  # above the altitude at arming: still on the ground (lift-off / touchdown)
TOUCHDOWN_WINDOW_S = 1.0  # the descent speed at touchdown: over this last second before it
EARTH_R = 6378137.0


@dataclass
class RunData:
    ok: bool
    steps: list
    log_path: str | None = None
    summary: dict | None = None
    _series: dict | None = field(default=None, repr=False)

    def series(self) -> dict:
        """Altitude, position and attitude over log time (read once, on demand)."""
        if self._series is None:
            self._series = {}
            if self.log_path:
                names = ["POS.RelHomeAlt", "POS.Lat", "POS.Lng", "ATT.Roll", "ATT.Pitch"]
                got: dict = {}
                try:  # one pass over the log
                    got = logs.fields(self.log_path, names, max_points=10000)["fields"]
                except logs.LogError:
                    for n in names:  # one at a time: a log without ATT still has POS
                        try:
                            got.update(logs.fields(self.log_path, [n], max_points=10000)["fields"])
                        except logs.LogError:
                            continue
                self._series = {k: list(zip(v["t"], v["v"], strict=True)) for k, v in got.items()}
        return self._series


def _takeoff_alt(steps: list) -> float | None:
    for s in steps:
        if isinstance(s, dict) and s.get("tool") == "takeoff":
            a = s.get("altitude_m", s.get("altitude"))
            if isinstance(a, int | float) and not isinstance(a, bool):
                return float(a)
    return None


def _liftoff(alt: list[tuple[float, float]]) -> tuple[float, float] | None:
    """(time, ground altitude) of lift-off: when the climb passed ``ON_GROUND_M`` above the
    ground, between the two samples around it."""
    if not alt:
        return None
    ground = alt[0][1]
    last = alt[0]
    for t, a in alt:
        if a - ground > ON_GROUND_M:
            if a > last[1]:
                return last[0] + (ground + ON_GROUND_M - last[1]) / (a - last[1]) * (t - last[0]), ground
            return t, ground
        last = (t, a)
    return None


def success(d: RunData) -> float | None:
    return 1.0 if d.ok else 0.0


def duration_s(d: RunData) -> float | None:
    return None if not d.summary else d.summary.get("duration")


def max_alt_m(d: RunData) -> float | None:
    return None if not d.summary else (d.summary.get("altitude") or {}).get("max")


def time_to_alt_s(d: RunData) -> float | None:
    alt = d.series().get("POS.RelHomeAlt") or []
    target = _takeoff_alt(d.steps)
    lo = _liftoff(alt)
    if target is None or lo is None:
        return None
    t0, ground = lo
    goal = ground + 0.95 * target
    prev: tuple[float, float] | None = None
    for t, a in alt:
        if t > t0 and a >= goal:
            if prev is not None and a > prev[1]:  # the crossing, between the two samples around it
                t = prev[0] + (goal - prev[1]) / (a - prev[1]) * (t - prev[0])
            return round(t - t0, 2)  # 10 ms: finer is the log's sampling, not the flight
        prev = (t, a)
    return None


def overshoot_m(d: RunData) -> float | None:
    target = _takeoff_alt(d.steps)
    top = max_alt_m(d)
    return None if target is None or top is None else round(max(0.0, top - target), 3)


def _touchdown(alt: list[tuple[float, float]]) -> int | None:
    """Index of the first on-ground sample after the highest point."""
    if not alt:
        return None
    ground = alt[0][1]
    top = max(range(len(alt)), key=lambda i: alt[i][1])
    for i in range(top, len(alt)):
        if alt[i][1] - ground <= ON_GROUND_M:
            return i
    return None


def landing_speed_m_s(d: RunData) -> float | None:
    alt = d.series().get("POS.RelHomeAlt") or []
    i = _touchdown(alt)
    if i is None:
        return None
    t1, a1 = alt[i]
    j = i
    while j > 0 and t1 - alt[j][0] < TOUCHDOWN_WINDOW_S:
        j -= 1
    if j == i or alt[i][0] <= alt[j][0]:
        return None
    return round(max(0.0, (alt[j][1] - a1) / (t1 - alt[j][0])), 3)


def landing_error_m(d: RunData) -> float | None:
    """Horizontal distance from where it lifted off to where it touched down."""
    s = d.series()
    alt, lat, lng = s.get("POS.RelHomeAlt") or [], s.get("POS.Lat") or [], s.get("POS.Lng") or []
    i = _touchdown(alt)
    if i is None or not lat or not lng:
        return None

    def at(series: list, t: float) -> float:
        return min(series, key=lambda p: abs(p[0] - t))[1]

    t_down = alt[i][0]
    la0, lo0, la1, lo1 = at(lat, alt[0][0]), at(lng, alt[0][0]), at(lat, t_down), at(lng, t_down)
    dn = math.radians(la1 - la0) * EARTH_R
    de = math.radians(lo1 - lo0) * EARTH_R * math.cos(math.radians(la0))
    return round(math.hypot(dn, de), 3)


def max_tilt_deg(d: RunData) -> float | None:
    s = d.series()
    roll, pitch = s.get("ATT.Roll") or [], s.get("ATT.Pitch") or []
    if not roll or not pitch:
        return None
    best = 0.0
    for (_, r), (_, p) in zip(roll, pitch, strict=False):
        c = math.cos(math.radians(r)) * math.cos(math.radians(p))
        best = max(best, math.degrees(math.acos(max(-1.0, min(1.0, c)))))
    return round(best, 3)


def battery_used_mah(d: RunData) -> float | None:
    return None if not d.summary else (d.summary.get("battery") or {}).get("used_mah")


def failsafes(d: RunData) -> float | None:
    return None if d.summary is None else float(len(d.summary.get("failsafes") or []))


#: name -> (kind, function, what it is)
METRICS: dict[str, tuple[str, Callable[[RunData], float | None], str]] = {
    "success": ("binary", success, "every step did what it asked"),
    "duration_s": ("continuous", duration_s, "the log's length in sim seconds"),
    "max_alt_m": ("continuous", max_alt_m, "highest altitude above home"),
    "time_to_alt_s": ("continuous", time_to_alt_s, "sim seconds from lift-off to 95% of the takeoff altitude"),
    "overshoot_m": ("continuous", overshoot_m, "highest altitude above the takeoff altitude"),
    "landing_error_m": ("continuous", landing_error_m, "horizontal metres from lift-off to touchdown"),
    "landing_speed_m_s": ("continuous", landing_speed_m_s, "descent speed over the last second before touchdown"),
    "max_tilt_deg": ("continuous", max_tilt_deg, "largest tilt from level (roll and pitch)"),
    "battery_used_mah": ("continuous", battery_used_mah, "battery charge used"),
    "failsafes": ("continuous", failsafes, "failsafes the log records"),
}
DEFAULT_METRICS = list(METRICS)

#: a user-defined metric: ``fn(summary, log_path) -> number | bool | None``
UserMetric = Callable[[dict, str], Any]


def check_metrics(metrics: Any) -> tuple[list[str], dict[str, UserMetric]]:
    """The named metrics and the user's callables (``{name: fn}`` in the Python API)."""
    if metrics is None:
        return list(DEFAULT_METRICS), {}
    custom: dict[str, UserMetric] = {}
    names: list[str] = []
    if isinstance(metrics, dict):
        for k, fn in metrics.items():  # the named metrics and these
            if not isinstance(k, str) or not k or not callable(fn):
                raise BatchError(f"a user-defined metric is name: callable(summary, log_path), not {k!r}: {fn!r}")
            if k in METRICS:
                raise BatchError(f"metric {k!r} is a named metric already; give yours another name")
            custom[k] = fn
        names = list(DEFAULT_METRICS)
    elif isinstance(metrics, list | tuple) and all(isinstance(m, str) for m in metrics):
        names = list(metrics)
    else:
        raise BatchError(f"metrics is a list of names ({', '.join(METRICS)}), not {metrics!r}")
    unknown = [m for m in names if m not in METRICS]
    if unknown:
        raise BatchError(f"unknown metric(s) {', '.join(map(repr, unknown))}; the metrics are: {', '.join(METRICS)}")
    if "success" not in names:
        names.insert(0, "success")  # a failed run is always counted
    return list(dict.fromkeys(names)), custom


def measure(d: RunData, names: list[str], custom: dict[str, UserMetric]) -> tuple[dict[str, float | None], list[str]]:
    """Every metric's value (None where the log cannot say) and what went wrong measuring."""
    out: dict[str, float | None] = {}
    problems: list[str] = []
    for n in names:
        try:
            v = METRICS[n][1](d)
            out[n] = None if v is None else float(v)
        except Exception as e:  # a log the metric cannot read: that value is missing, said
            out[n] = None
            problems.append(f"{n}: {type(e).__name__}: {e}")
    for n, fn in custom.items():
        if d.summary is None or d.log_path is None:
            out[n] = None
            continue
        try:
            v = fn(d.summary, d.log_path)
            out[n] = None if v is None else float(v)
        except Exception as e:  # the user's code: its failure is that value's, named
            out[n] = None
            problems.append(f"{n}: {type(e).__name__}: {e}")
    return out, problems


def kind_of(name: str, values: list[float]) -> str:
    if name in METRICS:
        return METRICS[name][0]
    return "binary" if values and all(v in (0.0, 1.0) for v in values) else "continuous"
