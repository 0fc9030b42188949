"""One server's sessions: the registry (open a managed SITL, attach to an unmanaged one,
close, reap what crashed servers left), the leases taken for the agent, and the session
contract (``SessionLike``) that a local ``Session`` and the fleet's ``RemoteSession`` both
satisfy. A session's own calls (snapshot, the flight actions, ``wait_until``) go straight to
the flight layer (``sitlpool.flight.Flight``, ``sitlpool.conditions``)."""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from . import conditions
from .conditions import CONDITIONS  # noqa: F401  (re-exported: where wait_until's conditions were listed)
from .config import load_settings
from .errors import SessionError, SitlpoolError
from .flight import Flight, check_finite, check_home, resolve_binary
from .instances import out_of_range
from .leases import Lease, LeasePool, validate_owner
from .mavlink.forward import Forwarder, parse_output
from .mavlink.recorder import attach as record
from .process import SitlManager, SitlProcess, kill_instance, reap_orphans
from .process.paramfiles import check_param_name
from .process.unmanaged import local_instance_of
from .world import sim_time_s, undo_failures

log = logging.getLogger("sitlpool.sessions")
MAX_BLOCK_S = 55.0  # no tool may block longer than 60 s
ARM_WAIT_READY_S = 20.0  # arm waits this long for readiness before it asks the vehicle
#: the flight actions a session offers (methods of ``SessionLike``), e.g. for a remote call by name
FLIGHT_ACTIONS = ("arm", "disarm", "set_mode", "takeoff", "goto", "land", "rtl")


def check_open_args(model, speedup, label=None, home=None, params=None) -> tuple:
    """``(model, speedup, label, home, params)`` checked and normalised before anything is
    leased, launched or placed (a fleet checks them on its driver, before any node works).
    Whether the configured SITL can fly ``model`` is the launching host's to say."""
    if not isinstance(model, str) or not model.strip():
        raise SitlpoolError(f"model {model!r} is not a vehicle model; give a name such as 'quad' or 'plane'")
    speedup = check_finite(speedup, "speedup")
    if not 0 < speedup <= 1000:
        raise SitlpoolError(f"speedup {speedup:g} is out of range; use a number above 0 and at most 1000")
    if label is not None:
        label = validate_owner(label, "label")
    home = check_home(home)
    if params is not None and not isinstance(params, Mapping):
        raise SitlpoolError(
            f"params {str(params)[:80]!r} is not a mapping of parameter names to values; give e.g. {{'RTL_ALT': 1500}}"
        )
    params = {
        check_param_name(k): check_finite(v, f"parameter {_printable(str(k))}") for k, v in (params or {}).items()
    }
    return model, speedup, label, home, params


def _printable(text: str) -> str:
    return text if text.isprintable() else repr(text)


def new_id() -> str:
    return secrets.token_hex(3)


@runtime_checkable
class SessionLike(Protocol):
    """What the MCP tools and the registry use of a session, local (``Session``) or on a
    Ray node (``sitlpool.fleet.serve.RemoteSession``). Every action answers the MCP tool's
    document: ``{"ok", "action", "snapshot"[, "sitlpool_did"]}``; ``wait_until`` answers
    ``{"result": met|timeout|died|closed, "condition", "value", "snapshot"}``."""

    id: str
    label: str
    kind: str  # "managed" or "unmanaged"
    handle: Any
    created: float
    last_used: float
    closing: bool
    closed: bool
    close_warnings: list[str]  # what went wrong after its close (its recipe not written, ...)

    @property
    def link(self) -> Any: ...

    @property
    def state(self) -> str: ...

    def info(self) -> dict: ...

    def snapshot(self) -> dict: ...

    def wait_until(self, condition: str, value: Any = None, timeout_s: float = 30) -> dict: ...

    def arm(self, force: bool = False, wait_ready_s: float = ARM_WAIT_READY_S) -> dict: ...

    def disarm(self, force: bool = False) -> dict: ...

    def set_mode(self, mode: str) -> dict: ...

    def takeoff(self, altitude_m: float) -> dict: ...

    def goto(self, lat: float, lon: float, altitude_m: float) -> dict: ...

    def land(self) -> dict: ...

    def rtl(self) -> dict: ...


@dataclass
class Session:
    """A SITL this server launched (``managed``) or attached to (``unmanaged``)."""

    id: str
    label: str
    handle: SitlProcess
    kind: str  # "managed" or "unmanaged"
    created: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.monotonic)
    last_goto: tuple[float, float, float] | None = None
    closing: bool = False  # set before its SITL is killed: a session being closed never reads as died
    closed: bool = False
    _flight: Flight | None = None
    forwarder: Forwarder | None = None  # ground stations watching through this session's link
    options: dict = field(default_factory=dict)  # what it was opened with (its recipe's launch part)
    recorded_by: str | None = None  # a step run writes this session's recipe itself
    close_warnings: list[str] = field(default_factory=list)  # what went wrong after its close

    @property
    def link(self):
        return self.handle.link

    @property
    def flight(self) -> Flight:
        if self._flight is None or self._flight.link is not self.link:
            self._flight = Flight(self.link)
        return self._flight

    @property
    def state(self) -> str:
        if self.closed:
            return "closed"
        if self.closing:
            return "closing"
        if self.handle.dead or (self.link is not None and self.link.state in ("closed", "stopped")):
            return "died"  # stopped and not by us (closing): its handle's waiter is keeping its logs
        if self.link is not None and self.link.state == "lost":
            return "lost"
        return "running" if self.handle.ready else "starting"

    def info(self) -> dict:
        h = self.handle
        out: dict[str, Any] = {
            "session_id": self.id,
            "label": self.label,
            "kind": self.kind,
            "state": self.state,
            "instance": h.instance,
            "pid": h.pid,
            "read_only": bool(self.link and self.link.read_only),
        }
        if h.ports is not None:
            out["ports"] = h.ports.as_dict()
        if self.kind == "managed" and h.ports is not None:
            out["connect"] = {
                "serial1": f"tcp:127.0.0.1:{h.ports.serial1}",
                "serial2": f"tcp:127.0.0.1:{h.ports.serial2}",
                "mavproxy": f"mavproxy.py --master=tcp:127.0.0.1:{h.ports.serial1}",
                "note": "serial0 is sitlpool's own link; each serial port serves one client",
            }
        elif self.link is not None:
            out["endpoint"] = self.link.endpoint
        if h.dead and h.status is not None:
            out["status"] = h.status.as_dict()
        config, tlog = getattr(h, "config", None), getattr(h, "tlog_path", None)  # a managed SITL's
        if config:  # its configuration, read back once it ran
            out["config"] = config
        if tlog:
            out["tlog"] = str(tlog)
        if self.forwarder is not None:
            out["watch"] = self.forwarder.info()
        return out

    def snapshot(self) -> dict:
        """``info`` and the vehicle: mode, armed, position, ..., ready to arm and why not."""
        snap = self.info()
        if self.link is not None:
            snap["vehicle"] = self.link.vehicle.as_dict()
            snap["link"] = self.link.state
            ready, why = self.flight.readiness()
            snap["vehicle"].update(kind=self.flight.kind, ready_to_arm=ready, not_ready_because=why)
            snap["sim_time_s"] = sim_time_s(self.link)  # the vehicle's clock: an agent reasons in its time
        return snap

    # ---- flying: each action through the session's Flight (the vehicle's rules); waits for the ACK

    def _flying(self) -> Flight:
        if self.link is None or self.handle.dead:
            raise SessionError(f"session {self.id} is {self.state}; open a new one")
        f = self.flight
        f.notes = []
        return f

    def _done(self, action: str, f: Flight) -> dict:
        """The action's answer; ``sitlpool_did`` says what sitlpool did on its own."""
        out = {"ok": True, "action": action, "snapshot": self.snapshot()}
        if f.notes:
            out["sitlpool_did"] = list(f.notes)
        return out

    def arm(self, force: bool = False, wait_ready_s: float = ARM_WAIT_READY_S) -> dict:
        f = self._flying()
        f.arm(force, wait_ready_s=min(max(0.0, wait_ready_s), MAX_BLOCK_S / 2))
        return self._done("arm", f)

    def disarm(self, force: bool = False) -> dict:
        f = self._flying()
        f.disarm(force)
        return self._done("disarm", f)

    def set_mode(self, mode: str) -> dict:
        f = self._flying()
        f.set_mode(mode)
        return self._done("set_mode", f)

    def takeoff(self, altitude_m: float) -> dict:
        f = self._flying()
        f.takeoff(altitude_m)
        return self._done("takeoff", f)

    def goto(self, lat: float, lon: float, altitude_m: float) -> dict:
        f = self._flying()
        f.goto(lat, lon, altitude_m)
        self.last_goto = (float(lat), float(lon), float(altitude_m))
        return self._done("goto", f)

    def land(self) -> dict:
        f = self._flying()
        f.land()
        return self._done("land", f)

    def rtl(self) -> dict:
        f = self._flying()
        f.rtl()
        return self._done("rtl", f)

    def wait_until(self, condition: str, value=None, timeout_s: float = 30) -> dict:
        """Wait (at most ``MAX_BLOCK_S``) for ``condition`` (``sitlpool.conditions``)."""
        conditions.check_condition(condition)
        timeout_s = min(max(0.0, check_finite(timeout_s, "timeout_s")), MAX_BLOCK_S)
        pred = conditions.predicate(self.flight, condition, value, self.last_goto)
        link = self.link
        t0 = time.time()

        def check(v):
            return self.handle.dead or self.closing or pred(v, t0)

        met = link.wait(check, timeout_s) if link else False
        if self.closing or self.closed:
            result = "closed"  # closed meanwhile by another call: our doing, not a death
        elif self.handle.dead or (link and link.state in ("closed", "lost", "stopped") and not pred(link.vehicle, t0)):
            result = "died"  # "stopped": the handle's waiter closed the link and is keeping the logs
            self.handle.join(10.0)  # let the handle record how it ended before the snapshot
        else:
            result = "met" if met and pred(link.vehicle, t0) else "timeout"
        return {"result": result, "condition": condition, "value": value, "snapshot": self.snapshot()}


class Sessions:
    """One server's session registry: open (launch on a leased instance), attach, get,
    close, close the idle ones, reap what crashed servers left; and the leases the agent
    took for what it launches itself. Flying is the session's (``SessionLike``)."""

    def __init__(self, settings=None, server_id: str | None = None):
        self.settings = settings or load_settings()
        self.pool = LeasePool.from_settings(self.settings)
        self.manager = SitlManager(self.settings, self.pool)
        self.server_id = server_id or new_id()
        self.sessions: dict[str, SessionLike] = {}
        self.leases: dict[int, Lease] = {}
        self._managers: dict = {}  # binary -> SitlManager, for models flown by another binary of the build
        self.reaped: list = []
        self.started = time.time()
        self._lock = threading.RLock()
        self._started = threading.Event()
        #: ``fn(session)`` after a managed session's SITL stopped (its logs kept): e.g. its recipe written
        self.on_close: list = []

    def start(self, background: bool = False) -> list:
        """Reap what crashed servers left behind (only what nobody holds). In the
        background, ``wait_started`` blocks until it is done."""
        if background:
            threading.Thread(target=self.start, name="reap at start", daemon=True).start()
            return []
        try:
            self.reaped = reap_orphans(self.settings, LeasePool.from_settings(self.settings, check=False))
            for r in self.reaped:
                log.info("reaped: %s", r.reason)
        finally:
            self._started.set()
        return self.reaped

    def wait_started(self, timeout: float = 60) -> None:
        self._started.wait(timeout)

    def owner(self, sid: str, label: str) -> str:
        return f"sitlpool session {sid} ({label})"

    def get(self, session_id: str) -> SessionLike:
        s = self.sessions.get(session_id)
        if s is None or s.closed or s.closing:
            known = ", ".join(k for k, v in self.sessions.items() if not (v.closed or v.closing)) or "none"
            what = f"session {session_id!r} is being closed" if s is not None else f"unknown session {session_id!r}"
            raise SessionError(f"{what}; open sessions: {known} (list_sessions shows them)")
        s.last_used = time.monotonic()
        return s

    def open_sessions(self) -> list[SessionLike]:
        return [s for s in list(self.sessions.values()) if not (s.closed or s.closing)]

    def _add(self, s: Session) -> Session:
        with self._lock:
            self.sessions[s.id] = s
        if s.link is not None:
            record(s.link)  # the flight recorder, from the session's first message (for flight_picture)
        return s

    def open(
        self,
        model: str = "quad",
        instance: int | None = None,
        label: str | None = None,
        speedup: float = 1.0,
        home: str | None = None,
        params: dict | None = None,
        wipe: bool = True,
        wait_s: float = 0,
        param_files: list | None = None,
        scripts: list | None = None,
        watch: list[str] | str | None = None,
        tlog: bool = False,
    ) -> Session:
        model, speedup, label, home, params = check_open_args(model, speedup, label, home, params)
        watch = [watch] if isinstance(watch, str) else list(watch or [])
        for out in watch:
            parse_output(out)  # a bad output stops the open before anything is launched
        if instance is not None:
            self._check_instance(instance)
        binary = resolve_binary(self.settings, model)
        sid = new_id()
        label = label or f"{model}-{sid}"
        wait_s = min(max(0.0, wait_s or 0), MAX_BLOCK_S / 2)
        h = self._manager(binary).start(
            sid,
            model=model,
            instance=instance,
            wait=wait_s,
            speedup=speedup,
            home=home,
            params=params,
            wipe=wipe,
            param_files=param_files,
            scripts=scripts,
            tlog=tlog,
            owner=self.owner(sid, label),
            ready_timeout=min(self.settings.ready_timeout_s, MAX_BLOCK_S - wait_s),
        )
        s = self._add(Session(sid, label, h, "managed"))
        s.options = dict(
            model=model,
            speedup=speedup,
            home=home,
            params=params,
            param_files=param_files,
            binary=binary,
            scripts=scripts,
        )
        if watch:
            try:
                s.forwarder = Forwarder(s.link, watch)
            except BaseException:
                self._close(s)
                raise
        return s

    def _manager(self, binary) -> SitlManager:
        """The manager launching ``binary`` (another vehicle of the configured build gets its own)."""
        if binary == self.settings.sitl_binary:
            return self.manager
        with self._lock:
            m = self._managers.get(binary)
            if m is None:
                m = self._managers[binary] = SitlManager(
                    self.settings.model_copy(update={"sitl_binary": binary}), self.pool
                )
            return m

    def _check_instance(self, instance) -> None:
        if isinstance(instance, bool) or not isinstance(instance, int):
            raise SessionError(f"instance {instance!r} is not an instance number; give a whole number, e.g. 40")
        why = out_of_range(instance)
        if why:
            raise SessionError(f"{why}; give an instance number from 1 up")

    def attach(
        self,
        instance: int | None = None,
        endpoint: str | None = None,
        label: str | None = None,
        control: bool = False,
        force: bool = False,
    ) -> Session:
        if label is not None:
            label = validate_owner(label, "label")
        if instance is not None:
            self._check_instance(instance)
        if control:
            self._check_control(instance, endpoint, force)
        sid = new_id()
        label = label or f"attach-{sid}"
        h = self.manager.attach(sid, instance=instance, endpoint=endpoint, control=control, timeout=10.0)
        return self._add(Session(sid, label, h, "unmanaged"))

    def _check_control(self, instance: int | None, endpoint: str | None, force: bool) -> None:
        """Control of a vehicle on an instance someone else leases: refused, naming the
        holder, unless ``force`` (logged: the holder's vehicle may be flying)."""
        # what the endpoint reaches, not how it is spelt: 127.0.0.2, LOCALHOST, 127.1, 0.0.0.0,
        # ::ffff:127.0.0.1 and this host's own addresses all reach our instances
        n = instance
        if n is None and endpoint is not None:
            try:
                n = local_instance_of(endpoint)
            except (SitlpoolError, ValueError):
                return  # attach itself explains a bad endpoint
        if n is None:
            return
        h = self.pool.holder(n)
        if h is None or h.pid == os.getpid():
            return
        if not force:
            raise SessionError(
                f"instance {n} is leased to {h.describe()}: control=True would let you fly its vehicle; "
                "attach read-only (control=False), ask its holder, or pass force=True if you must take control"
            )
        log.warning("control of instance %d forced by request while %s holds it", n, h.describe())

    def close(self, session_id: str) -> dict:
        s = self.get(session_id)
        self._close(s)
        info = s.info()
        info["closed"] = (
            "SITL stopped, lease released" if s.kind == "managed" else "detached; the SITL was left running"
        )
        kept = getattr(s.handle, "kept_logs", None)  # the flight's logs, moved to the log store at stop
        if kept:
            info["logs"] = [r.id for r in kept]
        if s.close_warnings:
            info["warnings"] = list(s.close_warnings)
        return info

    def _close(self, s: SessionLike) -> None:
        s.closing = True  # before the kill: its death is ours, not a crash
        forwarder = getattr(s, "forwarder", None)
        if forwarder is not None:
            forwarder.close()
        if s.kind != "managed" and s.link is not None and not s.handle.dead:
            cleared = undo_failures(s.link)  # injected through an attachment: not left on a vehicle not ours
            if cleared:
                log.info("session %s: cleared the failures it injected (%s)", s.id, ", ".join(cleared))
        try:
            s.handle.kill(wait=True)
        finally:
            s.closed = True
            with self._lock:
                self.sessions.pop(s.id, None)  # a long-lived server keeps no closed sessions
            for m in (self.manager, *self._managers.values()):
                m.wait_termination(0)  # drain: the manager forgets handles once reported
            if s.kind == "managed":
                for fn in list(self.on_close):
                    try:
                        fn(s)
                    except Exception as e:  # a hook's failure never fails the close: said in its answer
                        log.exception("after closing session %s", s.id)
                        s.close_warnings.append(str(e) or type(e).__name__)

    def close_all(self) -> None:
        for s in list(self.sessions.values()):
            if not s.closed:
                try:
                    self._close(s)
                except Exception:  # pragma: no cover - best effort at exit
                    log.exception("closing %s", s.id)
        for m in (self.manager, *self._managers.values()):
            m.close_all()  # also a launch still in flight: every SITL this server started dies with it
        for lease in list(self.leases.values()):
            lease.release()
        self.leases.clear()

    def close_idle(self, idle_s: float | None = None) -> list[str]:
        idle_s = self.settings.idle_timeout_s if idle_s is None else idle_s
        now = time.monotonic()
        closed = []
        for s in self.open_sessions():
            if now - s.last_used > idle_s:
                log.info("session %s idle for %.0fs: closing", s.id, now - s.last_used)
                self._close(s)
                closed.append(s.id)
        return closed

    # ---- leases for things the agent launches itself ----------------------------------

    def lease(self, owner: str, instance: int | None = None, wait_s: float = 0) -> Lease:
        owner = validate_owner(owner)  # before the server's own words are added to it
        if instance is not None:
            self._check_instance(instance)
        lease = self.pool.acquire(
            f"{owner} (via sitlpool server {self.server_id})",
            instance=instance,
            wait=min(max(0.0, wait_s or 0), MAX_BLOCK_S),
        )
        self.leases[lease.instance] = lease
        return lease

    def release(self, instance: int) -> None:
        lease = self.leases.pop(instance, None)
        if lease is None:
            mine = ", ".join(map(str, self.leases)) or "none"
            raise SessionError(
                f"instance {instance} was not leased through lease_instance on this server "
                f"(leases here: {mine}); sessions are released with close_sitl"
            )
        lease.release()

    def kill_instance(self, instance: int, force: bool = False):
        return kill_instance(
            instance, force=force, settings=self.settings, pool=LeasePool.from_settings(self.settings, check=False)
        )
