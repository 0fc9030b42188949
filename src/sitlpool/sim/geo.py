"""Where things are: metres from the EKF origin to degrees and back, magnetic declination."""

from __future__ import annotations

import importlib.util
import json
import math
import re

EARTH_R = 6378137.0

_DECLINATION: list | None = None  # degrees on a 10-degree grid, rows from 90 S, columns from 180 W


def _declination_table() -> list:
    """The declination table pymavlink carries (ArduPilot's AP_Declination data), read from
    its source: importing ``pymavlink.mavextra`` would load numpy (+12 MB, 0.2 s) into
    every vehicle for 700 numbers."""
    global _DECLINATION
    if _DECLINATION is None:
        spec = importlib.util.find_spec("pymavlink.mavextra")
        if spec is None or spec.origin is None:
            raise RuntimeError("pymavlink.mavextra not found: pymavlink is incomplete")
        with open(spec.origin) as f:
            text = f.read()
        start = text.index("declination_table = [")
        end = text.index("]\n\n", start) + 1
        # the table is plain numbers in nested lists: JSON once trailing commas go (not
        # ast.literal_eval: CPython 3.11.7's parser raises "AST constructor recursion depth
        # mismatch" there when a test process has changed the recursion limit)
        _DECLINATION = json.loads(re.sub(r",\s*\]", "]", text[text.index("[", start) : end]))
    return _DECLINATION


def declination(lat: float, lon: float) -> float | None:
    """Magnetic declination (radians) at a place, interpolated between the four grid points
    around it as ArduPilot does; None outside the table."""
    if not (-90 <= lat < 90 and -180 <= lon < 180):
        return None
    table, step = _declination_table(), 10.0
    row, col = int((lat + 90) // step), int((lon + 180) // step)
    fy, fx = (lat + 90) / step - row, (lon + 180) / step - col
    south = table[row][col] + fx * (table[row][col + 1] - table[row][col])
    north = table[row + 1][col] + fx * (table[row + 1][col + 1] - table[row + 1][col])
    return math.radians(south + fy * (north - south))


def to_latlon(origin_lat: float, origin_lon: float, north: float, east: float) -> tuple[float, float]:
    """Degrees of a point ``north``/``east`` metres from the origin."""
    return (
        origin_lat + math.degrees(north / EARTH_R),
        origin_lon + math.degrees(east / (EARTH_R * math.cos(math.radians(origin_lat)))),
    )


def to_local(origin_lat: float, origin_lon: float, lat: float, lon: float) -> tuple[float, float]:
    """Metres north and east of the origin of a point in degrees."""
    n = math.radians(lat - origin_lat) * EARTH_R
    e = math.radians(lon - origin_lon) * EARTH_R * math.cos(math.radians(origin_lat))
    return n, e
