"""Parameters in bulk over the session's one link: the whole list (PARAM_REQUEST_LIST, gaps
filled by index as MAVProxy does) and several values set at once, each confirmed by the
vehicle's PARAM_VALUE. Unknown names are refused before anything is set (ArduPilot ignores
a PARAM_SET of a name it does not have, silently)."""

from __future__ import annotations

import math
import time

from ..errors import ConfigError, MavlinkError
from ..instances import finite_number
from .exchange import Inbox
from .link import A

LIST_TIMEOUT_S = 20.0  # ~1,300 parameters of ArduCopter; gaps re-requested after a pause
GAP_PAUSE_S = 0.3  # no PARAM_VALUE for this long: ask for the missing indices by number
READ_TIMEOUT_S = 3.0
INT_TYPES = {
    A.MAV_PARAM_TYPE_UINT8,
    A.MAV_PARAM_TYPE_INT8,
    A.MAV_PARAM_TYPE_UINT16,
    A.MAV_PARAM_TYPE_INT16,
    A.MAV_PARAM_TYPE_UINT32,
    A.MAV_PARAM_TYPE_INT32,
}


def _name(m) -> str:
    n = m.param_id
    return (n.decode(errors="replace") if isinstance(n, bytes) else n).rstrip("\x00")


def _value(m):
    return int(m.param_value) if m.param_type in INT_TYPES else m.param_value


def _from_vehicle(link):
    def accept(m) -> bool:
        return m.get_srcSystem() == (link.vehicle.sysid or m.get_srcSystem()) and m.get_srcComponent() == 1

    return accept


def get_all(link, prefix: str | None = None, timeout: float = LIST_TIMEOUT_S) -> dict:
    """Every parameter (or those whose name starts with ``prefix``), names sorted."""
    if link.state != "connected":
        raise MavlinkError(f"{link.name}: vehicle not connected ({link.state})")
    target = (link.vehicle.sysid or 1, 1)
    by_index: dict[int, tuple[str, object]] = {}
    count = None
    deadline = time.monotonic() + timeout
    t0 = time.monotonic()
    with Inbox(link, {"PARAM_VALUE"}, _from_vehicle(link)) as box:
        link.send(A.MAVLink_param_request_list_message(*target))
        while count is None or len(by_index) < count:
            if time.monotonic() > deadline:
                missing = "?" if count is None else count - len(by_index)
                raise MavlinkError(
                    f"{link.name}: the parameter list stopped coming ({missing} of "
                    f"{count or '?'} missing after {timeout:g}s); is the vehicle still there?"
                )
            m = box.get(GAP_PAUSE_S)
            if m is None:
                if count is None:
                    if time.monotonic() - t0 > READ_TIMEOUT_S:  # a lost request: ask again
                        link.send(A.MAVLink_param_request_list_message(*target))
                        t0 = time.monotonic()
                    continue
                for i in [i for i in range(count) if i not in by_index][:40]:
                    link.send(A.MAVLink_param_request_read_message(*target, b"", i))
                continue
            if m.param_index == 65535:  # an answer to someone's read by name: not part of the list
                continue
            count = m.param_count
            by_index[m.param_index] = (_name(m), _value(m))
    values = {n: v for n, v in by_index.values()}
    if prefix:
        p = prefix.upper()
        values = {n: v for n, v in values.items() if n.startswith(p)}
    return {"count": len(values), "total": count, "params": dict(sorted(values.items()))}


def check_values(values) -> dict[str, float]:
    if not isinstance(values, dict) or not values:
        raise ConfigError('set_params needs a non-empty record of names and values, e.g. {"RTL_ALT": 2000}')
    out = {}
    for k, v in values.items():
        if not isinstance(k, str) or not k.strip() or len(k.strip()) > 16:
            raise ConfigError(f"parameter name {k!r} is not a name (ArduPilot names are 1-16 characters)")
        if not finite_number(v):
            raise ConfigError(f"parameter {k.upper()}: value {v!r} is not a finite number")
        out[k.strip().upper()] = float(v)
    return out


def set_many(link, values, timeout: float = READ_TIMEOUT_S) -> dict:
    """Set every value (all checked first: finite numbers, names the vehicle has), each
    confirmed by a PARAM_VALUE that carries it."""
    want = check_values(values)
    link.require_writable(f"set parameters {', '.join(want)}")
    target = (link.vehicle.sysid or 1, 1)
    with Inbox(link, {"PARAM_VALUE"}, _from_vehicle(link)) as box:
        types = _read_types(link, box, target, list(want), timeout)
        unknown = [n for n in want if n not in types]
        if unknown:
            raise MavlinkError(
                f"unknown parameter{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: the vehicle "
                "has no such name; nothing was set (get_params lists the names)"
            )
        for n, v in want.items():
            link.send(A.MAVLink_param_set_message(*target, n.encode(), v, types[n]))
        confirmed: dict[str, object] = {}
        seen: dict[str, float] = {}  # the last value the vehicle reported for each name
        deadline = time.monotonic() + timeout
        while len(confirmed) < len(want):
            m = box.get(max(0.0, deadline - time.monotonic()))
            if m is None:
                break
            n = _name(m)
            if n in want:
                seen[n] = m.param_value
                if _same(m.param_value, want[n], m.param_type):
                    confirmed[n] = _value(m)
    if len(confirmed) < len(want):
        parts = [
            f"{n} kept {seen[n]:g} instead of {want[n]:g} (out of range?)"
            if n in seen
            else f"{n}: no PARAM_VALUE after setting it"
            for n in want
            if n not in confirmed
        ]
        done = ", ".join(n for n in want if n in confirmed)
        raise MavlinkError(f"set_params: {'; '.join(parts)}; {'confirmed: ' + done if done else 'none confirmed'}")
    return {"set": {n: confirmed[n] for n in want}}


def _same(got: float, want: float, ptype: int) -> bool:
    if ptype in INT_TYPES:
        return int(round(got)) == int(round(want))
    return math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-6)


def _read_types(link, box: Inbox, target, names: list[str], timeout: float) -> dict[str, int]:
    """PARAM_REQUEST_READ every name at once; the answers' types (no answer: unknown)."""
    for n in names:
        link.send(A.MAVLink_param_request_read_message(*target, n.encode(), -1))
    types: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    resent = False
    while len(types) < len(names):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        m = box.get(min(left, 1.0))
        if m is None:
            if not resent:  # one more ask for the silent ones, as a lost request looks the same
                resent = True
                for n in names:
                    if n not in types:
                        link.send(A.MAVLink_param_request_read_message(*target, n.encode(), -1))
            continue
        n = _name(m)
        if n in names:
            types[n] = m.param_type
    return types
