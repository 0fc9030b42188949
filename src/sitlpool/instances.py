"""Instance numbers and the ports they select (ArduPilot SITL's ``-I n``).

SITL offsets every default port by 10*n: TCP SERIAL0/1/2 on 5760/5762/5763, UDP RC
input on 5501, and the JSON physics backend on UDP 9002 (9003 for older backends).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

from .errors import ConfigError, InstanceError

SERIAL0_BASE = 5760
RC_IN_BASE = 5501
SIM_OUT_BASE = 9002  # SITL sends to the physics program here (JSON backend)
SIM_IN_BASE = 9003  # input port of older physics backends
MAX_PORT = 65535
#: the highest instance whose highest port (sim_in) still fits in 16 bits
MAX_INSTANCE = (MAX_PORT - SIM_IN_BASE) // 10

#: instances a pool may not contain, and why
RESERVED: dict[int, str] = {
    0: "instance 0 belongs to ArduPilot's own tools (autotest.py, sim_vehicle.py), which take no leases",
    14: "instance 14's MAVLink port 5900 is in the range VNC servers use",
    15: "instance 15's MAVLink port 5910 is in the range VNC servers use",
}

SERIAL_NAMES = ("serial0", "serial1", "serial2")


@dataclass(frozen=True)
class Ports:
    """Every port of one SITL instance."""

    instance: int
    serial0: int
    serial1: int
    serial2: int
    rc_in: int
    sim_out: int
    sim_in: int

    @property
    def tcp(self) -> tuple[int, int, int]:
        return (self.serial0, self.serial1, self.serial2)

    @property
    def udp(self) -> tuple[int, int, int]:
        return (self.rc_in, self.sim_out, self.sim_in)

    def serial(self, name: str) -> int:
        """The TCP port of ``serial0``/``serial1``/``serial2``."""
        if name not in SERIAL_NAMES:
            raise KeyError(name)
        return getattr(self, name)

    def as_dict(self) -> dict[str, int]:
        return {
            "serial0": self.serial0,
            "serial1": self.serial1,
            "serial2": self.serial2,
            "rc_in": self.rc_in,
            "sim_out": self.sim_out,
            "sim_in": self.sim_in,
        }


@functools.lru_cache(maxsize=8192)  # Ports is frozen: one per instance, shared (every acquire asks)
def ports(instance: int, base_port: int = SERIAL0_BASE) -> Ports:
    """The ports of ``instance`` (instance 0 -> 5760, 40 -> 6160)."""
    off = 10 * instance
    s0 = base_port + off
    return Ports(
        instance=instance,
        serial0=s0,
        serial1=s0 + 2,
        serial2=s0 + 3,
        rc_in=RC_IN_BASE + off,
        sim_out=SIM_OUT_BASE + off,
        sim_in=SIM_IN_BASE + off,
    )


def out_of_range(instance: int) -> str | None:
    """Why ``instance`` cannot exist at all, or None."""
    if instance < 0:
        return f"instance {instance} is negative"
    if instance > MAX_INSTANCE:
        return (
            f"instance {instance} would use port {SIM_IN_BASE + 10 * instance}, past {MAX_PORT}; "
            f"the highest usable instance is {MAX_INSTANCE}"
        )
    return None


def unusable(instance: int) -> str | None:
    """Why ``instance`` may not be in a pool (reserved or out of range), or None."""
    return out_of_range(instance) or RESERVED.get(instance)


# int() also reads '١٠٠' (any Unicode digits), '1_000', '+5' and ' 5 ': an instance number
# or a port written that way is a typo or a trick, never what a person meant
_DECIMAL = re.compile(r"-?[0-9]+")


def finite_number(value) -> bool:
    """A JSON/Python number that is finite (not a bool, a string, NaN or infinity): what a tool
    may send to a vehicle."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float (10**400)
        return False


def strict_int(text: str, signed: bool = True) -> int | None:
    """``text`` as a decimal integer in ASCII digits (with an optional leading ``-`` if
    ``signed``), else None."""
    if not isinstance(text, str) or not _DECIMAL.fullmatch(text) or (not signed and text.startswith("-")):
        return None
    if len(text.lstrip("-")) > 20:  # no instance, port or count has more digits; int() of 5000 digits raises
        return None
    return int(text)


def parse_instance(text: str) -> int:
    """An instance number given as text (CLI arguments, targets): ASCII digits, in range."""
    n = strict_int(text)
    if n is None:
        raise InstanceError(f"{text!r} is not an instance number; write it in ASCII digits, e.g. 40")
    why = out_of_range(n)
    if why:
        raise InstanceError(f"{why}; instance numbers run from 0 to {MAX_INSTANCE}")
    return n


def parse_port(text: str) -> int:
    """A TCP/UDP port given as text (endpoints, --http): ASCII digits, 1 to 65535."""
    n = strict_int(text)
    if n is None:
        raise ConfigError(f"{text!r} is not a port; write it in ASCII digits, from 1 to {MAX_PORT}")
    if not 0 < n <= MAX_PORT:
        past = f", past {MAX_PORT}" if n > MAX_PORT else ""
        raise ConfigError(f"port {n} is out of range{past}; use a port from 1 to {MAX_PORT}")
    return n
