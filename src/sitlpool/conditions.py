"""What ``wait_until`` waits for: the wait-condition language, next to the flight rules.

A condition is a name and a value (``altitude_above`` 9.5, ``mode`` "GUIDED", ``reached`` 2 m
of the last goto, ``mission_item`` 3, ...), turned into a predicate ``pred(vehicle, t0)`` on the
vehicle's state; ``t0`` is when the wait began (``text`` looks only at texts since then).
Values are checked when the predicate is built, so a bad value is refused before any wait.
``mode_is`` is ``mode`` with the name checked against the vehicle's modes; ``failsafe`` waits for
a failsafe's text (optionally one naming ``value``: "radio", "battery", "gcs", "ekf", "fence").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .errors import SessionError
from .flight import MAX_ALTITUDE_M, Flight, check_finite
from .mavlink import mission

#: every condition ``wait_until`` knows, in the order the MCP tool's description names them
CONDITIONS = (
    "altitude_above",
    "altitude_below",
    "armed",
    "disarmed",
    "mode",
    "reached",
    "landed",
    "text",
    "ready_to_arm",
    "mission_item",
    "mission_done",
    "mode_is",
    "failsafe",
)
#: what ArduPilot says when a failsafe acts (battery, radio, GCS, EKF, fence; "... Cleared" is not one);
#: ArduPlane's battery failsafe says only "Battery 1 is low" / "... is critical"
FAILSAFE_TEXTS = ("failsafe", "fence breached", "ekf variance", "crash: disarming", "is low", "is critical")
#: a ``value`` and the words each vehicle's texts use for it (ArduPlane: "RC Short Failsafe On", "Throttle failsafe on")
FAILSAFE_WORDS = {"radio": ("radio", "rc ", "throttle failsafe"), "gcs": ("gcs",), "battery": ("battery",)}
REACHED_RADIUS_M = 2.0  # ``reached`` without a value: within 2 m of the last goto target

Predicate = Callable[[Any, float], bool]


def check_condition(condition: str) -> None:
    if condition not in CONDITIONS:
        raise SessionError(f"unknown condition {condition!r}; use one of {', '.join(CONDITIONS)}")


def check_value(condition: str, value) -> None:
    """What of ``condition``'s ``value`` can be checked without a vehicle (a step program's
    ``wait_until``, before anything flies): a number where it takes metres, a name or text where
    it needs one. ``predicate`` checks the same when it is built."""
    check_condition(condition)
    if condition in ("altitude_above", "altitude_below"):
        _metres(condition, value)
    elif condition in ("mode", "mode_is", "text") and not value:
        raise SessionError(
            f"condition {condition} needs a value ({'the text to look for' if condition == 'text' else 'a mode name, e.g. GUIDED'})"
        )
    elif condition == "reached" and value not in (None, ""):
        check_finite(value, "reached radius", 0, 100000, "m")


def predicate(
    flight: Flight, condition: str, value=None, last_goto: tuple[float, float, float] | None = None
) -> Predicate:
    """``pred(vehicle, t0)`` for ``condition`` with ``value`` on ``flight``'s vehicle;
    ``last_goto`` (lat, lon, altitude above home) is the target ``reached`` measures from."""
    check_condition(condition)
    if condition in ("mission_item", "mission_done"):
        return mission.predicate(flight.link, condition, value)
    if condition == "ready_to_arm":
        return lambda v, t0: flight.readiness()[0]
    if condition in ("altitude_above", "altitude_below"):
        x = _metres(condition, value)
        if condition == "altitude_above":
            return lambda v, t0: v.rel_alt is not None and v.rel_alt >= x
        return lambda v, t0: v.rel_alt is not None and v.rel_alt <= x
    if condition == "armed":
        return lambda v, t0: v.armed
    if condition == "disarmed":
        return lambda v, t0: not v.armed
    if condition == "landed":
        return lambda v, t0: not v.armed or (v.rel_alt is not None and v.rel_alt < 0.3 and abs(v.climb) < 0.1)
    if condition == "mode":
        if not value:
            raise SessionError("condition mode needs the mode name as value, e.g. GUIDED")
        want = str(value).upper()
        return lambda v, t0: v.mode == want
    if condition == "mode_is":
        if not value:
            raise SessionError("condition mode_is needs the mode name as value, e.g. RTL")
        want = flight.mode_key(str(value))  # an unknown mode is refused, naming the vehicle's modes
        return lambda v, t0: v.mode == want
    if condition == "failsafe":
        return _failsafe(value)
    if condition == "text":
        if not value:
            raise SessionError("condition text needs the text to look for as value")
        return lambda v, t0: any(str(value) in t for when, _, t in list(v.texts) if when >= t0 - 0.01)
    return _reached(value, last_goto)


def _failsafe(value) -> Predicate:
    """A failsafe since the wait began: ArduPilot's failsafe texts ("Radio Failsafe", "Battery
    Failsafe", "GCS Failsafe", "EKF Failsafe: changed to LAND Mode", "Circle fence breached", ...),
    not "... Failsafe Cleared"; ``value`` (e.g. "radio", "battery", "fence") narrows it."""
    want = str(value).lower() if value not in (None, "") else None
    words = FAILSAFE_WORDS.get(want, (want,)) if want is not None else None

    def seen(v, t0) -> bool:
        for when, _, text in list(v.texts):
            low = text.lower().rstrip()
            if (
                when < t0 - 0.01
                or "cleared" in low
                or low.endswith(" off")
                or not any(f in low for f in FAILSAFE_TEXTS)
            ):
                continue  # "... Cleared", ArduPlane's "Throttle failsafe off" / "GCS Failsafe Off": an end, not a failsafe
            if ("is low" in low or "is critical" in low) and not low.startswith("battery"):
                continue
            if words is None or any(w in low for w in words):
                return True
        return False

    return seen


def _metres(condition: str, value) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise SessionError(f"condition {condition} needs a number as value (metres), got {value!r}") from None
    return check_finite(x, f"condition {condition}'s value", -MAX_ALTITUDE_M, MAX_ALTITUDE_M, "m")


def _reached(value, last_goto: tuple[float, float, float] | None) -> Predicate:
    if last_goto is None:
        raise SessionError("condition reached needs a goto first: it means within a radius of the last goto target")
    radius = check_finite(value, "reached radius", 0, 100000, "m") if value not in (None, "") else REACHED_RADIUS_M
    lat, lon, alt = last_goto

    def reached(v, t0) -> bool:
        if v.lat is None:
            return False
        dn = math.radians(v.lat - lat) * 6378137.0
        de = math.radians(v.lon - lon) * 6378137.0 * math.cos(math.radians(lat))
        return math.hypot(dn, de) <= radius and abs((v.rel_alt or 0) - alt) <= max(1.0, radius)

    return reached


__all__ = [
    "CONDITIONS",
    "FAILSAFE_TEXTS",
    "REACHED_RADIUS_M",
    "Predicate",
    "check_condition",
    "check_value",
    "predicate",
]
