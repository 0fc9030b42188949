"""Parameters in bulk over the session's one link: the whole list (PARAM_REQUEST_LIST, gaps
filled by index as MAVProxy does) and several values set at once, each confirmed by the
vehicle's PARAM_VALUE. Unknown names are refused before anything is set (ArduPilot ignores
a PARAM_SET of a name it does not have, silently)."""

from __future__ import annotations

import math
import time

from ..errors import ConfigError, MavlinkError
from .exchange import Inbox
from .link import A
from .wire import INT_RANGES, float32

LIST_TIMEOUT_S = 20.0  # ~1,300 parameters of ArduCopter; gaps re-requested after a pause
GAP_PAUSE_S = 0.3  # no PARAM_VALUE for this long: ask for the missing indices by number
READ_TIMEOUT_S = 3.0
MAX_SET = 100  # one set_params call
MAX_LIST = 10_000  # parameters in a list: ArduPilot has ~1,300 (a count beyond this is not a vehicle's)
INT_KINDS = {
    A.MAV_PARAM_TYPE_UINT8: "uint8",
    A.MAV_PARAM_TYPE_INT8: "int8",
    A.MAV_PARAM_TYPE_UINT16: "uint16",
    A.MAV_PARAM_TYPE_INT16: "int16",
    A.MAV_PARAM_TYPE_UINT32: "uint32",
    A.MAV_PARAM_TYPE_INT32: "int32",
}
INT_TYPES = set(INT_KINDS)


def _name(m) -> str:
    n = m.param_id
    return (n.decode(errors="replace") if isinstance(n, bytes) else n).rstrip("\x00")


def _value(m):
    v = m.param_value
    return int(v) if m.param_type in INT_TYPES and math.isfinite(v) else v


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
            if m.param_index >= m.param_count:  # not an item of the list it announces
                continue
            if m.param_count > MAX_LIST:
                raise MavlinkError(
                    f"{link.name}: the vehicle announces parameter {m.param_index} of {m.param_count}; "
                    f"sitlpool reads lists of at most {MAX_LIST:,} parameters (is it a vehicle?)"
                )
            count = m.param_count
            by_index[m.param_index] = (_name(m), _value(m))
    values = {n: v for n, v in by_index.values()}
    if prefix:
        p = prefix.upper()
        values = {n: v for n, v in values.items() if n.startswith(p)}
    return {"count": len(values), "total": count, "params": dict(sorted(values.items()))}


def check_values(values) -> dict[str, float]:
    """Names and values checked before anything is sent: names of 1-16 characters, values
    that MAVLink's float32 ``param_value`` carries (``1e39`` is refused here, not mid-send)."""
    if not isinstance(values, dict) or not values:
        raise ConfigError('set_params needs a non-empty record of names and values, e.g. {"RTL_ALT": 2000}')
    if len(values) > MAX_SET:
        raise ConfigError(f"set_params takes at most {MAX_SET} parameters at once, not {len(values)}")
    out = {}
    for k, v in values.items():
        if not isinstance(k, str) or not k.strip() or len(k.strip()) > 16 or not k.strip().isascii():
            raise ConfigError(f"parameter name {k!r} is not a name (ArduPilot names are 1-16 ASCII characters)")
        out[k.strip().upper()] = float32(v, f"parameter {k.strip().upper()}: value")
    return out


def check_for_type(name: str, value: float, ptype: int) -> None:
    """``value`` fits parameter ``name`` of the vehicle's type ``ptype`` (an int8 parameter
    takes whole numbers from -128 to 127): ArduPilot casts a PARAM_SET to the type, so a value
    beyond it would wrap or be cut, silently."""
    kind = INT_KINDS.get(ptype)
    if kind is None:
        return
    lo, hi = INT_RANGES[kind]
    if value != int(value):
        raise ConfigError(f"parameter {name} is a whole number ({kind}); {value:g} is not one")
    if not lo <= value <= hi:
        raise ConfigError(f"parameter {name} is {kind}, from {lo} to {hi}; {value:g} does not fit")


def set_many(link, values, timeout: float = READ_TIMEOUT_S) -> dict:
    """Set every value, all or nothing: all checked first (float32 values, names the vehicle
    has, each value within its parameter's type), then set, each confirmed by a PARAM_VALUE
    that carries it. If one is not confirmed (or a send fails), every value already sent is
    set back to what the vehicle had before, and the error says so."""
    want = check_values(values)
    link.require_writable(f"set parameters {', '.join(want)}")
    target = (link.vehicle.sysid or 1, 1)
    with Inbox(link, {"PARAM_VALUE"}, _from_vehicle(link)) as box:
        before = _read_current(link, box, target, list(want), timeout)
        unknown = [n for n in want if n not in before]
        if unknown:
            raise MavlinkError(
                f"unknown parameter{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: the vehicle "
                "has no such name; nothing was set (get_params lists the names)"
            )
        for n, v in want.items():
            check_for_type(n, v, before[n][1])
        sent: list[str] = []
        try:
            for n, v in want.items():
                link.send(A.MAVLink_param_set_message(*target, n.encode(), v, before[n][1]))
                sent.append(n)
            confirmed, seen = _confirm(box, want, {n: before[n][1] for n in want}, timeout)
        except MavlinkError as e:
            raise MavlinkError(f"set_params: {e}; {_put_back(link, box, target, sent, before, timeout)}") from None
        if len(confirmed) < len(want):
            parts = [
                f"{n} kept {seen[n]:g} instead of {want[n]:g} (out of range?)"
                if n in seen
                else f"{n}: no PARAM_VALUE after setting it"
                for n in want
                if n not in confirmed
            ]
            raise MavlinkError(f"set_params: {'; '.join(parts)}; {_put_back(link, box, target, sent, before, timeout)}")
    return {"set": {n: confirmed[n] for n in want}}


def _confirm(box: Inbox, want: dict[str, float], types: dict[str, int], timeout: float):
    """Wait (``timeout`` in all) for a PARAM_VALUE carrying each wanted value: (confirmed, last seen)."""
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
    return confirmed, seen


def _put_back(link, box: Inbox, target, sent: list[str], before: dict, timeout: float) -> str:
    """Set every name of ``sent`` back to its value before; says what was put back."""
    if not sent:
        return "nothing was set"
    old = {n: before[n][0] for n in sent}
    try:
        for n in sent:
            link.send(A.MAVLink_param_set_message(*target, n.encode(), old[n], before[n][1]))
        back, _ = _confirm(box, old, {n: before[n][1] for n in sent}, timeout)
    except MavlinkError as e:
        return f"could not set back {', '.join(sent)} ({e}): check them with get_params"
    lost = [n for n in sent if n not in back]
    if lost:
        return f"set back {', '.join(n for n in sent if n in back) or 'none'}; NOT confirmed back: {', '.join(lost)} (check them with get_params)"
    return "every value was set back to what it was: " + ", ".join(f"{n}={old[n]:g}" for n in sent)


def _same(got: float, want: float, ptype: int) -> bool:
    if ptype in INT_TYPES:
        return int(round(got)) == int(round(want))
    return math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-6)


def _read_current(link, box: Inbox, target, names: list[str], timeout: float) -> dict[str, tuple[float, int]]:
    """PARAM_REQUEST_READ every name at once: name -> (current value, type); no answer: unknown."""
    for n in names:
        link.send(A.MAVLink_param_request_read_message(*target, n.encode(), -1))
    got: dict[str, tuple[float, int]] = {}
    deadline = time.monotonic() + timeout
    resent = False
    while len(got) < len(names):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        m = box.get(min(left, 1.0))
        if m is None:
            if not resent:  # one more ask for the silent ones, as a lost request looks the same
                resent = True
                for n in names:
                    if n not in got:
                        link.send(A.MAVLink_param_request_read_message(*target, n.encode(), -1))
            continue
        n = _name(m)
        if n in names:
            got[n] = (m.param_value, m.param_type)
    return got
