"""``RemoteSitl``: the handle of a SITL that a Ray actor leased, launched and supervises on
some node of the cluster. Its calls have the MCP tools' names and meanings; a dead actor
or node makes every call say ``died`` with Ray's reason, at once and from then on."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray
from ray.util import remove_placement_group

from ..errors import NotRunning
from ..instances import Ports
from ..instances import ports as ports_of
from ..mavlink.link import VehicleState
from ..process.base import HandleBase, SitlHandle, Status
from ..sessions import ARM_WAIT_READY_S
from . import logfetch
from .errors import FleetError, SitlDied
from .raywrap import ray_reason, unwrap  # noqa: F401  (re-exported: callers import them from here)

CALL_TIMEOUT_S = 75.0  # the longest actor call blocks 55 s (open, wait_until): past this, something hangs


class RemoteSitl(HandleBase):
    """A SITL on a node of the cluster. ``instance``, ``node_id``, ``host`` and ``label`` are
    fixed at open; the flight calls go to the actor that owns the SITL. A process handle
    (``process.base.SitlHandle``) like a local one: ``alive``, ``running`` and ``endpoint``
    are ``HandleBase``'s."""

    name: str
    instance: int
    ports: Ports
    pid: int | None
    link: RemoteLink

    def __init__(self, actor, info: dict, fleet: Any = None, slot=None):
        self._actor = actor
        self._fleet = fleet
        self._slot = slot  # the placement group that reserved its sitl slot (removed with it)
        self.info = info
        self.session_id: str = info["session_id"]
        self.label: str = info["label"]
        self.name = self.label
        self.instance: int = info["instance"]
        self.node_id: str = info["node_id"]
        self.host: str = info["host"]
        self.pid: int | None = info.get("pid")
        self.ports = ports_of(self.instance)
        self._died: str | None = None
        self._closed = False
        self._lock = threading.Lock()
        self.link = RemoteLink(self)

    # ---- plumbing --------------------------------------------------------------------

    def _call(self, method: str, *args, timeout: float = CALL_TIMEOUT_S) -> Any:
        if self._died is not None:
            raise SitlDied(self._died_message())
        if self._closed:
            raise self._closed_error()
        try:
            return ray.get(getattr(self._actor, method).remote(*args), timeout=timeout)
        except ray.exceptions.RayTaskError as e:
            raise unwrap(e) from None
        except ray.exceptions.GetTimeoutError:
            raise FleetError(
                f"{self.label} on {self.host}: no answer to {method} within {timeout:g}s; "
                "the node may be overloaded or unreachable (fleet.status() shows the cluster)"
            ) from None
        except ray.exceptions.RayError as e:  # actor died, node died, actor unavailable
            if self._closed:  # a call that raced close(): the actor was ended on purpose
                raise self._closed_error() from None
            self._died = ray_reason(e)
            self._release_slot()
            raise SitlDied(self._died_message()) from None

    def _release_slot(self) -> None:
        """Give the sitl slot back to the cluster (after a death Ray would keep it reserved,
        moved to another node)."""
        slot, self._slot = self._slot, None
        if slot is not None:
            try:
                remove_placement_group(slot)
            except Exception:  # pragma: no cover - already removed, or the connection is gone
                pass

    def lost(self, reason: str) -> bool:
        """Ray reports this handle's node or actor dead (the fleet's watcher calls this): the
        handle says died from now on and its sitl slot, which Ray would keep reserved (re-placed
        on a surviving node when the node died), is given back. False if it had already ended."""
        with self._lock:
            if self.dead:
                return False
            self._died = reason
        self._release_slot()
        return True

    def _closed_error(self) -> NotRunning:
        return NotRunning(f"{self.label} (instance {self.instance} on {self.host}) was closed; open a new one")

    def _died_message(self) -> str:
        return (
            f"died: {self.label} (instance {self.instance} on {self.host}, node {self.node_id[:8]}): {self._died}; "
            "its lease went with its processes; open a new one"
        )

    # ---- the handle API --------------------------------------------------------------

    @property
    def dead(self) -> bool:
        return self._died is not None or self._closed

    @property
    def config(self) -> dict:
        """The configuration it really got, read back once it ran (as ``ManagedSitl.config``:
        params, param_files by the driver's names, not_applied, ...); {} if the node sent none."""
        return self.info.get("config", {})

    @property
    def state(self) -> str:
        if self._died is not None:
            return "died"
        return "closed" if self._closed else "running"

    @property
    def status(self) -> Status | None:
        """How it ended (None while it runs). A lost actor or node is ``Status.lost`` with Ray's reason."""
        if self._died is not None:
            return Status.lost(f"died: {self._died}")
        if self._closed:
            return self._final
        try:
            return self._call("status", timeout=15)
        except SitlDied:
            return Status.lost(f"died: {self._died}")

    def _endpoint(self, name: str) -> str:
        """``tcp:<node address>:<port>`` of serial0/1/2, for any GCS that reaches the node."""
        return f"tcp:{self.host}:{self.ports.serial(name)}"

    def _not_running(self) -> str:
        return f"{self.label} is {self.state}; its endpoints exist only while it runs"

    def snapshot(self) -> dict:
        try:
            return self._call("snapshot")
        except SitlDied as e:
            return {
                "state": "died",
                "reason": str(e),
                "session_id": self.session_id,
                "instance": self.instance,
                "host": self.host,
                "node_id": self.node_id,
            }

    def wait_until(self, condition: str, value=None, timeout_s: float = 30) -> dict:
        try:
            return self._call("wait_until", condition, value, timeout_s)
        except SitlDied as e:
            return {
                "result": "died",
                "condition": condition,
                "value": value,
                "reason": str(e),
                "snapshot": {"state": "died", "instance": self.instance, "host": self.host},
            }

    def _fly(self, action: str, **kw) -> dict:
        return self._call("fly", action, kw)

    def arm(self, force: bool = False, wait_ready_s: float = ARM_WAIT_READY_S) -> dict:
        return self._fly("arm", force=force, wait_ready_s=wait_ready_s)

    def disarm(self, force: bool = False) -> dict:
        return self._fly("disarm", force=force)

    def set_mode(self, mode: str) -> dict:
        return self._fly("set_mode", mode=mode)

    def takeoff(self, altitude_m: float) -> dict:
        return self._fly("takeoff", altitude_m=altitude_m)

    def goto(self, lat: float, lon: float, altitude_m: float) -> dict:
        return self._fly("goto", lat=lat, lon=lon, altitude_m=altitude_m)

    def land(self) -> dict:
        return self._fly("land")

    def rtl(self) -> dict:
        return self._fly("rtl")

    def get_param(self, name: str) -> float:
        return self._call("link_call", "get_param", (name,), {})

    def pace(self, speedup: float) -> dict:
        """Pace the vehicle on its node: slowed while no call runs (``pace_begin``/``pace_end``)."""
        return self._call("pace", speedup)

    def set_param(self, name: str, value: float) -> float:
        return self._call("link_call", "set_param", (name, value), {})

    # ---- step programs, run on its node (``nodesteps``) -------------------------------

    def steps_start(self, run_id: str, label: str | None, steps: list, time_limit_s: float | None) -> dict:
        """Start a step program on its node, beside the SITL (timed on the vehicle's clock there)."""
        return self._call("steps_start", run_id, label, steps, time_limit_s)

    def steps_status(self, seen: int | None = None, wait_s: float = 0.0) -> dict:
        """The run's progress on its node: ``result`` (``RunResult.as_dict()``), ``version``,
        ``finished``; answered once a step starts or ends after version ``seen``, or after ``wait_s``."""
        return self._call("steps_status", seen, wait_s, timeout=wait_s + CALL_TIMEOUT_S)

    def steps_abort(self) -> dict:
        """Stop the run on its node and close its session there (SITL stopped, logs kept)."""
        return self._call("steps_abort")

    # ---- its logs --------------------------------------------------------------------

    def logs(self) -> list[dict]:
        """The records of the logs its flight left on its node: the live one (``id`` "live",
        while it runs) and, once closed, the kept ones (``id``, ``path`` on the node, ``size``,
        ``session``, ``label``, times, ``binary_version``...), each with ``node_id`` and ``host``."""
        if not self.dead:
            try:
                return self._call("logs")
            except SitlDied:
                pass
        try:  # closed or died: the node keeps them (a died SITL's once its orphan is reaped there)
            recs = logfetch.on_node(self.node_id, logfetch.session_records, self.session_id)
        except FleetError:
            if self._kept is None:
                raise
            return list(self._kept)
        return [{**r, "node_id": self.node_id, "host": self.host} for r in recs]

    def fetch_log(self, log_id: str, dest_dir: str | os.PathLike) -> Path:
        """Copy one of its logs (an id from ``logs()``, or "live") from its node to
        ``dest_dir``, a chunk at a time; the path of the copy. A kept log after close is
        read by a small task on that node."""
        if not self.dead:
            try:
                rec = next((r for r in self._call("logs") if r["id"] == log_id), None)
                if rec is not None or log_id == logfetch.LIVE:
                    name = rec["name"] if rec and rec.get("live") else f"{log_id}{_suffix(rec)}"
                    return logfetch.fetch(
                        lambda off, n: self._call("read_log", log_id, off, n),
                        name,
                        dest_dir,
                        None if rec is None or rec.get("live") else rec["size"],
                    )
            except SitlDied:
                pass
        if log_id == logfetch.LIVE:
            raise NotRunning(f"{self.label} is {self.state}: it has no live log; logs() gives its kept ones")
        return logfetch.fetch_kept(self.node_id, log_id, dest_dir)

    _kept: list[dict] | None = None  # its kept logs' records, as the actor gave them at close
    recipe_doc: dict | None = None  # its session's recipe, as the actor made it at close

    def close(self) -> dict | None:
        """Stop the SITL and release its lease (through the actor), then end the actor, which
        frees its ``sitl`` slot. Safe to call twice and after a death."""
        with self._lock:
            if self._closed:
                return None
            out = None
            if self._died is None:
                try:
                    out = self._call("close", timeout=30)
                    self._final = self._call("status", timeout=10)
                    self._kept = self._call("logs", timeout=10)
                    self.recipe_doc = self._call("recipe", timeout=10)  # made on the node at close
                except SitlDied:
                    pass
            self._closed = True
            if self._died is not None:
                self._final = Status.lost(f"died: {self._died}")
            elif getattr(self, "_final", None) is None:
                self._final = Status.detached("closed")
            try:
                ray.kill(self._actor)
            except Exception:  # pragma: no cover - the actor or the connection is already gone
                pass
            self._release_slot()
            if self._fleet is not None:
                self._fleet._forget(self)
            return out

    _final: Status | None = None

    # local-handle compatibility (the pytest plugin's fixtures call these)
    def kill(self, wait: bool = False) -> None:
        self.close()

    def join(self, timeout: float | None = None) -> bool:
        """True once closed or died (a remote SITL ends only by ``close`` or a death)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.dead and (deadline is None or time.monotonic() < deadline):
            time.sleep(0.05)
        return self.dead

    @property
    def ready(self) -> bool:
        return not self.dead

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        return f"<RemoteSitl {self.label!r} instance={self.instance} host={self.host} node={self.node_id[:8]} {self.state}>"


def _suffix(rec: dict | None) -> str:
    return ".tlog" if rec is not None and rec.get("kind") == "tlog" else ".BIN"


class RemoteLink:
    """The part of ``VehicleLink`` a test or scenario written for a local SITL uses, forwarded
    to the actor: commands, parameters, ``vehicle`` (the actor's latest state) and
    ``wait(pred, timeout)`` (the predicate runs here on the state it polls)."""

    read_only = False

    def __init__(self, sitl: RemoteSitl):
        self._sitl = sitl
        self._last = None

    @property
    def endpoint(self) -> str:
        return self._sitl.endpoint("serial0")

    @property
    def state(self) -> str:
        return "connected" if self._sitl.alive else "closed"

    @property
    def vehicle(self):
        """The vehicle's state as the actor's link last heard it (the last one seen, once dead)."""
        if self._sitl.alive:
            try:
                self._last = self._sitl._call("vehicle")
            except SitlDied:
                pass
        return self._last if self._last is not None else VehicleState()

    def wait(self, pred, timeout: float, poll_s: float = 0.05) -> bool:
        """Until ``pred(vehicle)`` holds, evaluated here on the state fetched every ``poll_s``
        (predicates are often methods of local objects that cannot travel to the node)."""
        deadline = time.monotonic() + timeout
        while True:
            if pred(self.vehicle):
                return True
            if time.monotonic() >= deadline or self._sitl.dead:
                return bool(pred(self.vehicle))
            time.sleep(poll_s)

    def _fwd(self, name, *args, **kw):
        return self._sitl._call("link_call", name, args, kw)

    def arm(self, force: bool = False):
        return self._fwd("arm", force)

    def arm_when_ready(self, timeout: float = 60, retry_every: float = 0.5, on_refused=None):
        # on_refused runs here, not on the node: refusals are not forwarded one by one
        return self._sitl._call(
            "link_call", "arm_when_ready", (timeout, retry_every), {}, timeout=timeout + CALL_TIMEOUT_S
        )

    def disarm(self, force: bool = False):
        return self._fwd("disarm", force)

    def set_mode(self, mode: str):
        return self._fwd("set_mode", mode)

    def takeoff(self, altitude_m: float):
        return self._fwd("takeoff", altitude_m)

    def goto(self, lat: float, lon: float, altitude_m: float):
        return self._fwd("goto", lat, lon, altitude_m)

    def land(self):
        return self._fwd("land")

    def rtl(self):
        return self._fwd("rtl")

    def get_param(self, name: str, timeout: float = 3.0) -> float:
        return self._fwd("get_param", name, timeout)

    def set_param(self, name: str, value: float, timeout: float = 3.0) -> float:
        return self._fwd("set_param", name, value, timeout)

    def wait_heartbeat(self, timeout: float) -> bool:
        return self._sitl._call("link_call", "wait_heartbeat", (timeout,), {}, timeout=timeout + CALL_TIMEOUT_S)

    def texts_since(self, t0: float) -> list[str]:
        return self._fwd("texts_since", t0)

    def command(self, cmd: int, *params: float, timeout: float = 5.0, what: str = "") -> None:
        return self._fwd("command", cmd, *params, timeout=timeout, what=what)

    def close(self) -> None:  # the link belongs to the actor; closing the handle closes it
        pass

    def on_node(self, fn, *args, **kw):
        """``fn(link, *args, **kw)`` on the node, with the link the actor holds: ``fn`` one of the
        link functions the node runs (``node.LINK_CALLS``: parameters, missions, RC override)."""
        return self._sitl._call("link_function", fn.__module__, fn.__name__, args, kw)

    def world_call(self, name: str, *args, **kw):
        """``sitlpool.world.<name>`` on the node, with the link the actor holds (``world.elsewhere``:
        every ``sitlpool.world`` function given this link, its handle or its session runs there)."""
        return self._sitl._call("world", name, args, kw)

    def __getattr__(self, name: str):
        """Any other public VehicleLink method runs on the node (e.g. require_writable)."""
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kw: self._sitl._call("link_call", name, args, kw)


if TYPE_CHECKING:
    _contract: type[SitlHandle] = RemoteSitl  # mypy checks that RemoteSitl keeps the process-handle contract
