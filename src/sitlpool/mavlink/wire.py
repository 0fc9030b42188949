"""What a value must be to travel in a MAVLink field, checked before anything is sent: a
message that cannot be packed (``1e39`` in a float32, a latitude whose degE7 overflows an
int32) fails at ``pack`` with an ``OverflowError``/``struct.error``, and in a protocol of
several messages that is half-way through. No pymavlink needed."""

from __future__ import annotations

import math

from ..errors import ConfigError

FLOAT32_MAX = 3.4028234663852886e38
INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "uint8": (0, 2**8 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
}
# ArduPilot keeps a Location's altitude as a signed 24-bit number of centimetres
LOCATION_ALT_LIMIT_M = (2**23 - 1) / 100
MAX_ALTITUDE_M = 10000.0  # above home: beyond this an altitude is a typo (or an attack), not a plan


def show(value) -> str:
    """``value`` for an error message, cut short (an agent's 4,000-digit number stays out)."""
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's digit limit for str()
        return "a huge integer"
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


def number(value, what: str) -> float:
    """``value`` (a JSON/Python number: not a bool, not a string) as a finite float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{what} is {show(value)}; it needs a finite number")
    try:
        x = float(value)
    except OverflowError:  # an int beyond any float
        raise ConfigError(f"{what} is {show(value)}; that is beyond any number MAVLink carries") from None
    if not math.isfinite(x):
        raise ConfigError(f"{what} is {show(value)}; it needs a finite number")
    return x


def float32(value, what: str, lo: float | None = None, hi: float | None = None, unit: str = "") -> float:
    """``value`` as a number a MAVLink float32 field carries, in [lo, hi] if given."""
    x = number(value, what)
    u = f" {unit}" if unit else ""
    if abs(x) > FLOAT32_MAX:
        raise ConfigError(f"{what} is {x:g}{u}: MAVLink carries it as a 32-bit float, at most ±{FLOAT32_MAX:.3g}")
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        rng = (
            f"from {lo:g} to {hi:g}"
            if lo is not None and hi is not None
            else (f"at least {lo:g}" if lo is not None else f"at most {hi:g}")
        )
        raise ConfigError(f"{what} is {x:g}{u}, out of range: use {rng}{u}")
    return x


def integer(value, what: str, kind: str) -> int:
    """``value`` rounded to a whole number that the integer wire type ``kind`` carries."""
    lo, hi = INT_RANGES[kind]
    x = number(value, what)
    n = int(round(x))
    if not lo <= n <= hi:
        raise ConfigError(f"{what} is {x:g}: MAVLink carries it as {kind}, from {lo} to {hi}")
    return n


def lat_lon(lat, lon, what: str) -> tuple[float, float]:
    """A position on Earth, in degrees; carried as int32 degE7 (±90 and ±180 fit)."""
    la = number(lat, f"{what} latitude")
    lo = number(lon, f"{what} longitude")
    if not (-90 <= la <= 90 and -180 <= lo <= 180):
        raise ConfigError(f"{what} ({la:g}, {lo:g}) is not a position on Earth: latitude -90..90, longitude -180..180")
    return la, lo


def deg_e7(degrees: float) -> int:
    """Degrees as MAVLink's int32 degE7 (a checked latitude or longitude always fits)."""
    return int(round(degrees * 1e7))
