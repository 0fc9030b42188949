"""What one link knows of its world (``World``: sim time, the wind as seen, failures injected),
and setting parameters all or nothing."""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import MavlinkError, SitlpoolError

WIND_PARAMS = ("SIM_WIND_SPD", "SIM_WIND_DIR", "SIM_WIND_TURB", "SIM_WIND_T", "SIM_WIND_T_ALT")


def link_of(x: Any):
    """The ``VehicleLink`` of a link, a ``Flight``, a session or the pytest plugin's ``Sitl``
    (or a Ray node's ``RemoteLink``, of a fleet's handle, its session or its ``Sitl``)."""
    for _ in range(3):
        if elsewhere(x) is not None:
            return x
        inner = getattr(x, "link", None)
        if elsewhere(inner) is not None:  # before set_param: a fleet's handle has one of its own
            return inner
        if hasattr(x, "set_param") and hasattr(x, "vehicle"):
            return x
        x = inner
    raise SitlpoolError("needs a vehicle link (a VehicleLink, a Flight or a session with a link)")


def held_elsewhere(link: Any) -> bool:
    """Whether another process holds ``link`` (a Ray node's, through the fleet's ``RemoteLink``,
    which runs functions there: ``on_node(fn, ...)`` and ``world_call(name, ...)``). The one
    test of it for every layer above (MCP tools, the pytest plugin, the world's functions).
    Looked up on the class: a forwarding ``__getattr__`` answers every name."""
    return callable(getattr(type(link), "on_node", None))


def elsewhere(link: Any) -> Callable[..., Any] | None:
    """How to reach the world of a vehicle that another process holds the link of
    (``held_elsewhere``): its ``world_call(name, *args, **kw)`` runs ``sitlpool.world.<name>``
    there on the real link. None for a link of this process."""
    return link.world_call if held_elsewhere(link) else None


# ---- what one link knows of its world: sim time, wind, failures ----------------------------


@dataclass
class World:
    """The world state kept for one link (a listener on it: sim time and wind changes)."""

    link: Any
    boot_ms: int | None = None  # the vehicle's latest time_boot_ms
    wind: dict[str, float] = field(default_factory=dict)  # SIM_WIND_* as last seen
    history: list[dict] = field(default_factory=list)
    originals: dict[str, float] = field(default_factory=dict)  # param -> value before any failure
    failures: dict[str, dict[str, float]] = field(default_factory=dict)  # kind -> params it set, in order
    lock: threading.RLock = field(default_factory=threading.RLock)
    quiet: bool = False  # set_wind's own PARAM_VALUEs: recorded by set_wind
    has: dict[str, bool] = field(default_factory=dict)  # whether the vehicle has a parameter, once asked

    def has_param(self, name: str) -> bool:
        """Whether the vehicle has ``name`` (asked once: an unknown name costs a 3 s timeout)."""
        if name not in self.has:
            self.has[name] = _read(self.link, name) is not None
        return self.has[name]

    def __call__(self, m) -> None:
        ms = getattr(m, "time_boot_ms", None)
        if ms is not None and m.get_srcComponent() == 1:
            self.boot_ms = int(ms)
        elif m.get_type() == "PARAM_VALUE":
            name = m.param_id.rstrip("\x00") if isinstance(m.param_id, str) else m.param_id
            if name in WIND_PARAMS:
                old = self.wind.get(name)
                self.wind[name] = float(m.param_value)
                if old is not None and not math.isclose(old, m.param_value, abs_tol=1e-4) and not self.quiet:
                    self.record("parameter", {name: float(m.param_value)})

    @property
    def sim_time_s(self) -> float | None:
        return None if self.boot_ms is None else round(self.boot_ms / 1000, 3)

    def record(self, by: str, changed: dict) -> dict:
        entry = {"sim_time_s": self.sim_time_s, "unix_time": round(time.time(), 3), "by": by, "set": changed}
        entry["wind"] = {k: self.wind[k] for k in WIND_PARAMS if k in self.wind}
        self.history.append(entry)
        return entry


_worlds: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_worlds_lock = threading.Lock()


def world_of(x: Any) -> World:
    """The ``World`` of a link, attached as its listener on first use (sessions attach it on open)."""
    link = link_of(x)
    if elsewhere(link) is not None:
        raise SitlpoolError(
            "this vehicle's link is held by another process (a Ray node's SITL): its world is kept there; "
            "call sitlpool.world's functions (set_wind, wind_history, inject_failure, ...) with it: they run there"
        )
    with _worlds_lock:
        w = _worlds.get(link)
        new = w is None
        if w is None:
            w = _worlds[link] = World(link)
            link.add_listener(w)
    if new and link.state == "connected":
        link.wait(lambda _v: w.boot_ms is not None, 2.0)  # attached late: a sim time to answer with
    return w


def sim_time_s(x: Any) -> float | None:
    """The vehicle's time since boot (its time_boot_ms), in seconds; None before it said one."""
    far = elsewhere(link_of(x))
    if far is not None:
        return far("sim_time_s")
    return world_of(x).sim_time_s


# ---- setting parameters all or nothing -------------------------------------------------------


def _read(link, name: str) -> float | None:
    try:
        return link.get_param(name)
    except MavlinkError:
        return None


def apply_params(link, values: dict[str, float], what: str) -> dict[str, float]:
    """Set ``values`` in order, all or none: each read first (an unknown name refuses the whole
    set before anything is sent); a set refused half-way restores those already set.
    Returns the values before."""
    link.require_writable(what)
    before: dict[str, float] = {}
    for name in values:
        old = _read(link, name)
        if old is None:
            raise SitlpoolError(f"{what}: this vehicle has no parameter {name}; nothing was set")
        before[name] = old
    done: list[str] = []
    try:
        for name, value in values.items():
            link.set_param(name, value)
            done.append(name)
    except MavlinkError as e:
        for name in reversed(done):
            try:
                link.set_param(name, before[name])
            except MavlinkError:
                pass
        raise SitlpoolError(f"{what}: {e}; nothing was left applied") from None
    return before
