"""One server's sessions: open (managed) / attach (unmanaged) / close, leases taken for
the agent, orphan reaping at start. Interfaces (MCP server, CLI) only call this."""

from __future__ import annotations

import logging
import math
import os
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from .config import load_settings
from .errors import SessionError, SitlpoolError
from .flight import MAX_ALTITUDE_M, Flight, check_finite, check_home, resolve_binary
from .instances import out_of_range, ports
from .leases import Lease, LeasePool, validate_owner
from .ports import busy_ports, name_holders, read_sockets, taken
from .process import SitlManager, SitlProcess, discover, kill_instance, reap_orphans

log = logging.getLogger("sitlpool.sessions")
MAX_BLOCK_S = 55.0  # no tool may block longer than 60 s
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
)
ARM_WAIT_READY_S = 20.0  # arm waits this long for readiness before it asks the vehicle


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
    params = {str(k): check_finite(v, f"parameter {_printable(str(k))}") for k, v in (params or {}).items()}
    return model, speedup, label, home, params


def _printable(text: str) -> str:
    return text if text.isprintable() else repr(text)


def new_id() -> str:
    return secrets.token_hex(3)


@dataclass
class Session:
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
        if self.handle.dead or (self.link is not None and self.link.state == "closed"):
            return "died"
        if self.link is not None and self.link.state == "lost":
            return "lost"
        return "running" if self.handle.ready else "starting"

    def info(self) -> dict:
        h = self.handle
        out = {
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
        return out


class Sessions:
    def __init__(self, settings=None, server_id: str | None = None):
        self.settings = settings or load_settings()
        self.pool = LeasePool.from_settings(self.settings)
        self.manager = SitlManager(self.settings, self.pool)
        self.server_id = server_id or new_id()
        self.sessions: dict[str, Session] = {}
        self.leases: dict[int, Lease] = {}
        self._managers: dict = {}  # binary -> SitlManager, for models flown by another binary of the build
        self.reaped: list = []
        self.started = time.time()
        self._lock = threading.RLock()
        self._started = threading.Event()

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

    def get(self, session_id: str) -> Session:
        s = self.sessions.get(session_id)
        if s is None or s.closed or s.closing:
            known = ", ".join(k for k, v in self.sessions.items() if not (v.closed or v.closing)) or "none"
            what = f"session {session_id!r} is being closed" if s is not None else f"unknown session {session_id!r}"
            raise SessionError(f"{what}; open sessions: {known} (list_sessions shows them)")
        s.last_used = time.monotonic()
        return s

    def open_sessions(self) -> list[Session]:
        return [s for s in list(self.sessions.values()) if not (s.closed or s.closing)]

    def _add(self, s: Session) -> Session:
        with self._lock:
            self.sessions[s.id] = s
        if s.link is not None:
            try:  # the toolkit's flight recorder, from the session's first message (absent: skipped)
                from .mavlink.recorder import attach as record
            except ImportError:
                pass
            else:
                record(s.link)
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
    ) -> Session:
        model, speedup, label, home, params = check_open_args(model, speedup, label, home, params)
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
            owner=self.owner(sid, label),
            ready_timeout=min(self.settings.ready_timeout_s, MAX_BLOCK_S - wait_s),
        )
        return self._add(Session(sid, label, h, "managed"))

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
        n = instance
        if n is None and endpoint is not None:
            from .mavlink.endpoints import parse_endpoint
            from .process.unmanaged import LOOPBACK, _instance_of_port

            try:
                _, host, port = parse_endpoint(endpoint)
            except (SitlpoolError, ValueError):
                return  # attach itself explains a bad endpoint
            n = _instance_of_port(port) if host in LOOPBACK else None
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
        return info

    def _close(self, s: Session) -> None:
        s.closing = True  # before the kill: its death is ours, not a crash
        try:
            s.handle.kill(wait=True)
        finally:
            s.closed = True
            with self._lock:
                self.sessions.pop(s.id, None)  # a long-lived server keeps no closed sessions
            for m in (self.manager, *self._managers.values()):
                m.wait_termination(0)  # drain: the manager forgets handles once reported

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

    def list_instances(self, all: bool = False) -> dict:
        mine = {s.handle.instance: s.id for s in self.open_sessions() if s.kind == "managed"}
        holders = self.pool.status()
        socks = read_sockets()
        busy = {h.instance: busy_ports(ports(h.instance), socks) for h in holders}
        name_holders([b for bs in busy.values() for b in bs])  # one /proc scan for all of them
        held = []
        for h in holders:
            d = h.as_dict()
            d["this_server_session"] = mine.get(h.instance)
            d["this_server_lease"] = h.instance in self.leases
            d["busy_ports"] = [b.describe() for b in busy[h.instance]]
            held.append(d)
        out = {
            "pool": list(self.pool.pool),
            "lock_dir": str(self.pool.lock_dir),
            "leased": held,
            "running_without_lease": [d.as_dict() for d in discover(self.settings, self.pool)],
        }
        if all:
            heldset = {h["instance"] for h in held}
            unleased = [n for n in self.pool.pool if n not in heldset]
            busy_free = taken([ports(n) for n in unleased])  # an unleased SITL holds them: not free
            out["free"] = [n for n in unleased if n not in busy_free]
            if busy_free:
                name_holders([b for bs in busy_free.values() for b in bs])
                out["ports_taken"] = [
                    {"instance": n, "state": "ports taken", "busy_ports": [b.describe() for b in bs]}
                    for n, bs in busy_free.items()
                ]
        return out

    # ---- flying --------------------------------------------------------------------

    def snapshot(self, session_id: str) -> dict:
        return self._snapshot(self.get(session_id))

    def _snapshot(self, s: Session) -> dict:
        snap = s.info()
        if s.link is not None:
            snap["vehicle"] = s.link.vehicle.as_dict()
            snap["link"] = s.link.state
            ready, why = s.flight.readiness()
            snap["vehicle"].update(kind=s.flight.kind, ready_to_arm=ready, not_ready_because=why)
        return snap

    def wait_until(self, session_id: str, condition: str, value=None, timeout_s: float = 30) -> dict:
        s = self.get(session_id)
        if condition not in CONDITIONS:
            raise SessionError(f"unknown condition {condition!r}; use one of {', '.join(CONDITIONS)}")
        timeout_s = min(max(0.0, check_finite(timeout_s, "timeout_s")), MAX_BLOCK_S)
        pred = self._predicate(s, condition, value)
        link = s.link
        t0 = time.time()

        def check(v):
            return s.handle.dead or s.closing or pred(v, t0)

        met = link.wait(check, timeout_s) if link else False
        if s.closing or s.closed:
            result = "closed"  # closed meanwhile by another call: our doing, not a death
        elif s.handle.dead or (link and link.state in ("closed", "lost") and not pred(link.vehicle, t0)):
            result = "died"
            s.handle.join(2.0)  # let the handle record how it ended before the snapshot
        else:
            result = "met" if met and pred(link.vehicle, t0) else "timeout"
        return {"result": result, "condition": condition, "value": value, "snapshot": self._snapshot(s)}

    def _predicate(self, s: Session, condition: str, value):
        def need_number():
            try:
                x = float(value)
            except (TypeError, ValueError):
                raise SessionError(f"condition {condition} needs a number as value (metres), got {value!r}") from None
            return check_finite(x, f"condition {condition}'s value", -MAX_ALTITUDE_M, MAX_ALTITUDE_M, "m")

        if condition in ("mission_item", "mission_done"):
            from .mavlink import mission  # the toolkit's; pymavlink only when a mission condition is asked for

            return mission.predicate(s.link, condition, value)
        if condition == "ready_to_arm":
            f = s.flight
            return lambda v, t0: f.readiness()[0]
        if condition == "altitude_above":
            x = need_number()
            return lambda v, t0: v.rel_alt is not None and v.rel_alt >= x
        if condition == "altitude_below":
            x = need_number()
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
        if condition == "text":
            if not value:
                raise SessionError("condition text needs the text to look for as value")
            return lambda v, t0: any(str(value) in t for when, _, t in list(v.texts) if when >= t0 - 0.01)
        # reached
        if s.last_goto is None:
            raise SessionError("condition reached needs a goto first: it means within a radius of the last goto target")
        radius = check_finite(value, "reached radius", 0, 100000, "m") if value not in (None, "") else 2.0
        lat, lon, alt = s.last_goto

        def reached(v, t0):
            if v.lat is None:
                return False
            dn = math.radians(v.lat - lat) * 6378137.0
            de = math.radians(v.lon - lon) * 6378137.0 * math.cos(math.radians(lat))
            return math.hypot(dn, de) <= radius and abs((v.rel_alt or 0) - alt) <= max(1.0, radius)

        return reached

    def fly(self, session_id: str, action: str, **kw) -> dict:
        """arm, disarm, set_mode, takeoff, goto, land, rtl through the session's Flight (the
        vehicle's rules); waits for the ACK. ``notes`` says what sitlpool did on its own."""
        s = self.get(session_id)
        link = s.link
        if link is None or s.handle.dead:
            raise SessionError(f"session {session_id} is {s.state}; open a new one")
        f = s.flight
        f.notes = []
        if action == "arm":
            f.arm(
                kw.get("force", False),
                wait_ready_s=min(max(0.0, kw.get("wait_ready_s", ARM_WAIT_READY_S)), MAX_BLOCK_S / 2),
            )
        elif action == "disarm":
            f.disarm(kw.get("force", False))
        elif action == "set_mode":
            f.set_mode(kw["mode"])
        elif action == "takeoff":
            f.takeoff(kw["altitude_m"])
        elif action == "goto":
            f.goto(kw["lat"], kw["lon"], kw["altitude_m"])
            s.last_goto = (float(kw["lat"]), float(kw["lon"]), float(kw["altitude_m"]))
        elif action == "land":
            f.land()
        elif action == "rtl":
            f.rtl()
        else:  # pragma: no cover
            raise SessionError(f"unknown action {action}")
        out = {"ok": True, "action": action, "snapshot": self._snapshot(s)}
        if f.notes:
            out["sitlpool_did"] = list(f.notes)
        return out
