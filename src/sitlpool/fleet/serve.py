"""The sessions backend of ``sitlpool serve --ray ADDRESS``: ``open_sitl`` places the SITL
on the cluster (a ``RemoteSitl``); every flight tool is unchanged and goes to the actor
that owns it; connection strings use the node's address. ``attach_sitl``, leases and
``kill_instance`` stay on the server's own machine."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import ray

from ..errors import SessionError, SitlpoolError
from ..sessions import ARM_WAIT_READY_S, SessionLike, Sessions
from .fleet import Fleet
from .remote import RemoteSitl

log = logging.getLogger("sitlpool.fleet.serve")
STEPS_POLL_S = 1.0  # a step run on a node: its status asked so (answered at once when a step starts or ends)


class RemoteSession:
    """A session whose SITL runs on a node of the cluster (``sessions.SessionLike``, as a
    local ``Session``): its calls go to the actor, which runs them on its own ``Session``."""

    kind = "managed"

    def __init__(self, remote: RemoteSitl):
        self.id = remote.session_id
        self.label = remote.label
        self.handle = remote
        self.created = time.time()
        self.last_used = time.monotonic()
        self.last_goto: tuple[float, float, float] | None = None
        self.closing = False
        self.closed = False
        self.close_warnings: list[str] = []

    @property
    def link(self) -> Any:
        return self.handle.link

    @property
    def recipe_doc(self) -> dict | None:
        """Its recipe, made on the node at close from the calls its link's recorder saw there."""
        return self.handle.recipe_doc

    @property
    def kept_records(self) -> list[dict]:
        """Its kept logs' records on the node (node_id, host: ``Fleet.fetch_log`` copies one here)."""
        return list(self.handle._kept or [])

    @property
    def state(self) -> str:
        if self.closed:
            return "closed"
        return "closing" if self.closing else self.handle.state

    def info(self) -> dict:
        return {**self.handle.info, "state": self.state, "session_id": self.id, "label": self.label}

    def snapshot(self) -> dict:
        return self.handle.snapshot()

    def wait_until(self, condition: str, value: Any = None, timeout_s: float = 30) -> dict:
        return self.handle.wait_until(condition, value, timeout_s)

    def arm(self, force: bool = False, wait_ready_s: float = ARM_WAIT_READY_S) -> dict:
        return self.handle.arm(force, wait_ready_s)

    def disarm(self, force: bool = False) -> dict:
        return self.handle.disarm(force)

    def set_mode(self, mode: str) -> dict:
        return self.handle.set_mode(mode)

    def takeoff(self, altitude_m: float) -> dict:
        return self.handle.takeoff(altitude_m)

    def goto(self, lat: float, lon: float, altitude_m: float) -> dict:
        out = self.handle.goto(lat, lon, altitude_m)
        self.last_goto = (float(lat), float(lon), float(altitude_m))
        return out

    def land(self) -> dict:
        return self.handle.land()

    def rtl(self) -> dict:
        return self.handle.rtl()

    # ---- step programs: run on its node, next to the SITL (``steps.StepRuns`` calls these) --

    def run_steps_there(self, result: Any, time_limit_s: float | None, abort: threading.Event, on_step=None) -> dict:
        """Run ``result.steps`` on the node, beside the SITL (``nodesteps``: timed on the
        vehicle's clock there, no round trip between steps), and mirror their progress into
        ``result`` (a ``steps.RunResult``) until they end; ``on_step(outcome)`` as a step starts
        or ends. The node closes the session as they end. Returns the node's last word (the
        binary flown, the home the vehicle reported) for the run's recipe."""
        if abort.is_set():
            result.state, result.ok, result.error = "aborted", False, "aborted"
            return {}
        self.handle.steps_start(result.run_id, result.label, result.steps, time_limit_s)
        seen = None
        while True:
            st = self.handle.steps_status(seen, STEPS_POLL_S)
            self.last_used = time.monotonic()  # a long run is use: the idle reaper leaves it
            for o in result.mirror(st["result"]):
                if on_step is not None:
                    try:
                        on_step(o)
                    except Exception:  # a progress printer never stops a run
                        log.exception("on_step of run %s", result.run_id)
            seen = st["version"]
            if st["finished"]:
                return {k: v for k, v in st.items() if k not in ("result", "version", "finished")}

    def abort_steps(self) -> dict:
        """Stop its step run on the node and close the session there (SITL stopped, logs kept);
        a step inside a tool call ends with its link."""
        return self.handle.steps_abort()


class RemotePacer:
    """``open_sitl(pace=True)`` for sessions on the cluster: each actor paces its own vehicle
    (a ``world.Pacer`` on its node); around every tool call of the server, ``begin`` has the
    actors of the paced sessions speed their vehicles up (waited for, at most ``wait_s``) and
    ``end`` lets them slow down again."""

    def __init__(self, wait_s: float = 10.0):
        self.wait_s = wait_s
        self._lock = threading.Lock()
        self._paced: dict[RemoteSitl, int] = {}  # handle -> calls it was told of (begun, not ended)

    @property
    def pacing(self) -> bool:
        return bool(self._paced)

    def accepts(self, s: Any) -> bool:
        return isinstance(s, RemoteSession)

    def add(self, s: RemoteSession, speedup: float) -> dict:
        out = s.handle.pace(speedup)
        with self._lock:
            self._paced[s.handle] = 0
        return {**out, "note": "the vehicle runs at its speedup only while a tool call runs (paced on its node)"}

    def _live(self) -> list[RemoteSitl]:
        with self._lock:
            for h in [h for h in self._paced if h.dead]:
                del self._paced[h]
            return list(self._paced)

    def begin(self) -> None:
        refs = []
        for h in self._live():
            try:
                refs.append(h._actor.pace_begin.remote())
            except Exception:  # the connection or the actor is going: its session says so
                continue
            with self._lock:
                if h in self._paced:
                    self._paced[h] += 1
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=self.wait_s)

    def end(self) -> None:
        for h in self._live():
            with self._lock:
                if not self._paced.get(h):
                    continue  # paced during this call: it was never sped up for it
                self._paced[h] -= 1
            try:
                h._actor.pace_end.remote()
            except Exception:  # pragma: no cover - the actor or the connection is gone
                pass


class RaySessions(Sessions):
    """``Sessions`` whose ``open`` places SITLs on the Ray cluster at ``address``;
    ``remote_pacer`` paces them (the MCP server calls it around each tool call)."""

    def __init__(self, address: str | None, settings=None, server_id: str | None = None):
        super().__init__(settings, server_id)
        self.fleet = Fleet(address)
        self.remote_pacer = RemotePacer()

    def open(  # type: ignore[override]  # a RemoteSession, not a local Session: both are SessionLike
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
        watch: list | str | None = None,
        tlog: bool = False,
    ) -> RemoteSession:
        if watch:  # the outputs would be on this machine, the vehicle's link on a node
            raise SessionError(
                "open_sitl on a Ray cluster does not take watch; watch a remote vehicle with sitlpool watch on its "
                "node, or connect a ground station to the answer's connect.serial1"
            )
        if instance is not None:
            raise SessionError(
                "open_sitl on a Ray cluster places the SITL where there is room; leave instance out "
                "(the answer says which node and instance it got)"
            )
        remote = self.fleet.open(
            model=model,
            speedup=speedup,
            params=params,
            home=home,
            label=label,
            wait_s=min(max(0.0, wait_s or 0), 27.5),
            wipe=wipe,
            param_files=param_files,  # read here (checked as open_sitl's), carried to the node by content
            scripts=scripts,
            tlog=tlog,
        )
        s = RemoteSession(remote)
        with self._lock:
            self.sessions[s.id] = s
        return s

    def close(self, session_id: str) -> dict:
        s = self.get(session_id)
        if not isinstance(s, RemoteSession):
            return super().close(session_id)
        out = self._close_remote(s) or s.info()
        out["closed"] = (
            "SITL stopped, lease released"
            if s.handle.status is None or s.handle.status.success
            else f"the SITL had died: {s.handle.status.reason}"
        )
        if s.close_warnings:
            out["warnings"] = list(s.close_warnings)
        return out

    def _close_remote(self, s: RemoteSession) -> dict | None:
        s.closing = True
        try:
            return s.handle.close()
        finally:
            s.closed = True
            with self._lock:
                self.sessions.pop(s.id, None)
            if s.recipe_doc is not None:  # as a local session's close: e.g. its recipe written here
                for fn in list(self.on_close):
                    try:
                        fn(s)
                    except Exception as e:  # a hook's failure never fails the close: said in its answer
                        log.exception("after closing session %s", s.id)
                        s.close_warnings.append(str(e) or type(e).__name__)

    def _close(self, s: SessionLike) -> None:  # close_all and close_idle go through here
        if isinstance(s, RemoteSession):
            self._close_remote(s)
        else:
            super()._close(s)

    def close_all(self) -> None:
        super().close_all()
        self.fleet.close()

    def logs_here(self, records: list[dict], dest_dir) -> list[dict]:
        """Log records of runs on the cluster, each DataFlash log's ``path`` one readable here
        (``steps.StepRuns`` compares a repro's logs so): ``logs_here``."""
        return logs_here(self.fleet, records, dest_dir)


def logs_here(fleet: Fleet, records: list[dict], dest_dir) -> list[dict]:
    """``records`` (a run's ``logs``: a node's records carry ``node_id``), each DataFlash log's
    ``path`` one readable here: the node's own path when this machine sees that file (a loopback
    cluster: every node is this machine), else a copy fetched from its node into ``dest_dir``
    (``Fleet.fetch_log``; ``fetched_from`` then names the node's path). A log that cannot be
    fetched keeps the node's path and says why in ``fetch_error``."""
    out = []
    for rec in records:
        rec = dict(rec)
        if rec.get("kind") == "bin" and rec.get("node_id") and rec.get("id") and not _here(rec):
            try:
                got = fleet.fetch_log(rec["node_id"], rec["id"], dest_dir)
                rec["fetched_from"], rec["path"] = rec.get("path"), str(got)
            except SitlpoolError as e:
                rec["fetch_error"] = str(e)
        out.append(rec)
    return out


def _here(rec: dict) -> bool:
    """Whether the node's file of this log record is this machine's (the same size)."""
    path = Path(rec.get("path") or "/nonexistent")
    try:
        return path.is_file() and (rec.get("size") is None or path.stat().st_size == rec["size"])
    except OSError:
        return False


def ray_sessions(address: str | None, settings=None) -> RaySessions:
    """What ``serve --ray ADDRESS`` uses in place of ``Sessions(settings)``."""
    return RaySessions(address, settings)


__all__ = ["RaySessions", "RemotePacer", "RemoteSession", "logs_here", "ray_sessions"]
