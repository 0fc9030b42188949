"""ArduPilot's flight-mode names per vehicle type, spelled as pymavlink's ``mavutil`` spells
them (what MAVProxy users type: FBWA, POSHOLD...), without importing ``mavutil``: it loads
numpy and two whole dialects, 0.15–0.5 s in every process that opens a link. The tables
are read from mavutil's source (if that ever fails, mavutil is imported after all), and
``~/.pymavlink/custom_mode_map.json`` extends them as it extends mavutil's."""

from __future__ import annotations

import ast
import importlib.util
import json
import logging
import os
import threading

from pymavlink.dialects.v20 import ardupilotmega as A

log = logging.getLogger("sitlpool.mavlink")

_VTOL_PLANES = (
    "MAV_TYPE_VTOL_TILTROTOR",
    "MAV_TYPE_VTOL_DUOROTOR",
    "MAV_TYPE_VTOL_TAILSITTER_DUOROTOR",
    "MAV_TYPE_VTOL_QUADROTOR",
    "MAV_TYPE_VTOL_TAILSITTER_QUADROTOR",
)
# vehicle type -> the name of mavutil's table for it
_TABLE_OF = {
    **{
        getattr(A, t): "mode_mapping_acm"
        for t in (
            "MAV_TYPE_HELICOPTER",
            "MAV_TYPE_TRICOPTER",
            "MAV_TYPE_QUADROTOR",
            "MAV_TYPE_HEXAROTOR",
            "MAV_TYPE_OCTOROTOR",
            "MAV_TYPE_DECAROTOR",
            "MAV_TYPE_DODECAROTOR",
            "MAV_TYPE_COAXIAL",
        )
        if hasattr(A, t)
    },
    A.MAV_TYPE_FIXED_WING: "mode_mapping_apm",
    **{getattr(A, t): "mode_mapping_apm" for t in _VTOL_PLANES if hasattr(A, t)},
    A.MAV_TYPE_GROUND_ROVER: "mode_mapping_rover",
    A.MAV_TYPE_SURFACE_BOAT: "mode_mapping_rover",
    A.MAV_TYPE_ANTENNA_TRACKER: "mode_mapping_tracker",
    A.MAV_TYPE_SUBMARINE: "mode_mapping_sub",
    A.MAV_TYPE_AIRSHIP: "mode_mapping_blimp",
}
_lock = threading.Lock()
_by_type: dict[int, dict[int, str]] | None = None


def _read_tables() -> dict[str, dict[int, str]]:
    """mavutil's ``mode_mapping_*`` dict literals, from its source."""
    spec = importlib.util.find_spec("pymavlink.mavutil")
    if spec is None or spec.origin is None:
        raise ImportError("pymavlink.mavutil's source is not there")
    with open(spec.origin, encoding="utf-8") as f:
        text = f.read()
    out = {}
    for name in set(_TABLE_OF.values()):
        start = text.index(f"\n{name} = {{") + len(name) + 4
        table = ast.literal_eval(text[start : text.index("\n}", start) + 2])
        if not table or not all(isinstance(k, int) and isinstance(v, str) for k, v in table.items()):
            raise ValueError(f"{name} is not a mode table")
        out[name] = table
    return out


def _custom() -> dict[int, dict[int, str]]:
    path = os.path.expanduser(os.path.join("~", ".pymavlink", "custom_mode_map.json"))
    try:
        with open(path) as f:
            raw = json.load(f)
        return {int(t): {int(n): str(name) for n, name in modes.items()} for t, modes in raw.items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, AttributeError, TypeError) as e:
        log.warning("ignoring %s: %s (a JSON object of vehicle types to {mode number: name})", path, e)
        return {}


def _tables() -> dict[int, dict[int, str]]:
    global _by_type
    with _lock:
        if _by_type is None:
            try:
                named = _read_tables()
            except Exception:  # a pymavlink laid out differently: ask mavutil itself (slower)
                from pymavlink import mavutil  # only then: it loads numpy and two dialects

                named = {name: dict(getattr(mavutil, name)) for name in set(_TABLE_OF.values())}
            by_type = {t: named[name] for t, name in _TABLE_OF.items()}
            by_type.update(_custom())
            _by_type = by_type
        return _by_type


def _numbers(vehicle_type: int | None) -> dict[int, str]:
    """Mode number -> name for a vehicle type (a copter's for an unknown or missing type)."""
    tables = _tables()
    copter = tables[A.MAV_TYPE_QUADROTOR]
    return copter if vehicle_type is None else tables.get(vehicle_type, copter)


def mode_mapping(vehicle_type: int | None) -> dict[str, int]:
    """Mode name -> number for a vehicle type (a copter's for an unknown or missing type)."""
    return {name: num for num, name in _numbers(vehicle_type).items()}


def mode_name(vehicle_type: int | None, custom_mode: int) -> str:
    """The name a HEARTBEAT's mode has (read at every HEARTBEAT: a lookup, no inverted copy)."""
    return _numbers(vehicle_type).get(custom_mode, f"MODE({custom_mode})")
