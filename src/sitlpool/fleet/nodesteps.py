"""Step programs on a Ray node (``sitlpool serve --ray``'s fly_steps and repro): the SITL's
actor runs ``steps.Runner`` on its own session, in a thread beside the SITL, so the steps are
timed on the vehicle's clock exactly as on one machine, and no Ray round trip or load of the
server's sits between one step and the next.

The server (``steps.StepRuns``, through ``RemoteSession``) starts a run (``steps_start``),
mirrors it (``steps_status``: a long poll that answers as soon as a step starts or ends) and
aborts it (``steps_abort``: the session is closed here, which also ends a step inside a tool
call). When the steps end, the node closes its session at once, as a local run does (the SITL
stopped and its logs kept, so the log is as long as a local run's); the server then closes the
handle, which ends the actor and frees its ``sitl`` slot, and writes the run's recipe."""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from ..errors import SitlpoolError
from ..sessions import Session
from ..steps import recipe as recipes
from ..steps.runner import Runner, RunResult

log = logging.getLogger("sitlpool.fleet.nodesteps")

STATUS_WAIT_MAX_S = 10.0  # the longest a steps_status call waits for a change
ABORT_WAIT_S = 30.0  # an aborted run's thread ends within this (its session closed under it)


class NodeRun:
    """One step run on this node: its ``RunResult``, filled in by the runner's thread, and a
    version that moves each time a step starts or ends (``view`` waits for it)."""

    def __init__(self, run_id: str, label: str | None, steps: list):
        self.abort = threading.Event()
        self.result = RunResult(list(steps), run_id=run_id, label=label)
        self.version = 0
        self.finished = False
        self.extra: dict = {}  # once finished: the binary and the home the vehicle reported
        self.thread: threading.Thread | None = None
        self._changed = threading.Condition()

    def bump(self, _outcome=None) -> None:
        with self._changed:
            self.version += 1
            self._changed.notify_all()

    def finish(self, extra: dict) -> None:
        with self._changed:
            self.extra = extra
            self.finished = True
            self.version += 1
            self._changed.notify_all()

    def view(self, seen: int | None = None, wait_s: float = 0.0) -> dict:
        """The run as it is (``result``: ``RunResult.as_dict()``), after waiting up to ``wait_s``
        for a version other than ``seen`` (a step started or ended) or for its end."""
        with self._changed:
            if wait_s > 0 and seen is not None:
                self._changed.wait_for(lambda: self.finished or self.version != seen, wait_s)
            version, finished, extra = self.version, self.finished, dict(self.extra)
        return {"result": self.result.as_dict(), "version": version, "finished": finished, **extra}


class _Actor(Protocol):
    """What ``NodeSteps`` uses of ``node.SitlActor``."""

    ident: dict
    sid: str | None
    _steps_run: NodeRun | None
    _steps_close_lock: threading.Lock

    @property
    def session(self) -> Session: ...

    def _live(self) -> Session: ...

    def close(self) -> dict: ...

    def _steps_fly(self, run: NodeRun, runner: Runner) -> None: ...

    def _steps_close(self) -> None: ...

    def _steps_extra(self) -> dict: ...


class NodeSteps:
    """The step-run calls of ``node.SitlActor`` (a mixin: they use its session): one run at a
    time on the actor's session, started, watched and aborted by the server that opened it."""

    _steps_run: NodeRun | None = None
    _steps_close_lock = threading.Lock()  # per process: one actor (one SITL) per worker process

    def steps_start(self: _Actor, run_id: str, label: str | None, steps: list, time_limit_s: float | None) -> dict:
        """Start ``steps`` on this actor's session in a thread; returns at once. Refused when
        the session is closed or a run flies on it already."""
        s = self._live()  # refused once closed
        going = self._steps_run
        if going is not None and not going.finished:
            raise SitlpoolError(
                f"session {s.id} flies step run {going.result.run_id} already; abort it or wait for its end"
            )
        run = NodeRun(run_id, label, steps)
        runner = Runner(
            s, steps, time_limit_s=time_limit_s, abort=run.abort, result=run.result, on_step=run.bump, then_close=True
        )
        self._steps_run = run
        run.thread = threading.Thread(target=self._steps_fly, args=(run, runner), name=f"steps {run_id}", daemon=True)
        run.thread.start()
        return {"run_id": run_id, "session_id": s.id, **self.ident}

    def _steps_fly(self: _Actor, run: NodeRun, runner: Runner) -> None:
        extra: dict = {}
        try:
            runner.run()
        finally:
            self._steps_close()  # at once, as a local run's session: its log ends where the steps did
            try:
                extra = self._steps_extra()
            except Exception:  # pragma: no cover - the recipe then says less, the run is still reported
                log.exception("the binary of step run %s", run.result.run_id)
            run.finish(extra)

    def _steps_close(self: _Actor) -> None:
        with self._steps_close_lock:  # the run's end and an abort may both close it
            if not self.session.closed:
                try:
                    self.close()
                except SitlpoolError as e:  # closed meanwhile (the cluster lost, the server's close)
                    log.info("closing session %s after its steps: %s", self.sid, e)

    def _steps_extra(self: _Actor) -> dict:
        """What the server's recipe needs from here: the binary flown (path, SHA-256, version)
        and the home the vehicle reported."""
        s = self.session
        link = s.link
        version = getattr(link, "autopilot_version", None) if link is not None else None
        home = link.vehicle.home if link is not None else None
        return {
            "binary": recipes.binary_info(s.options.get("binary"), version),
            "home_seen": None if home is None else dict(zip(("lat", "lon", "alt_amsl_m"), home, strict=False)),
        }

    def steps_status(self: _Actor, seen: int | None = None, wait_s: float = 0.0) -> dict:
        """The run's progress (``NodeRun.view``): answered once a step starts or ends after
        version ``seen``, at its end, or after ``wait_s`` (at most ``STATUS_WAIT_MAX_S``)."""
        run = self._steps_run
        if run is None:
            raise SitlpoolError(f"session {self.sid} has no step run; start one with steps_start")
        return run.view(seen, min(max(0.0, float(wait_s or 0)), STATUS_WAIT_MAX_S))

    def steps_abort(self: _Actor) -> dict:
        """Stop the run and close the session (SITL stopped, logs kept): a step inside a tool
        call ends with its link. The run as it ended (``NodeRun.view``)."""
        run = self._steps_run
        if run is not None:
            run.abort.set()
        self._steps_close()
        if run is None:
            return {"aborted": False, "note": "no step run had started here; its session is closed", **self.ident}
        if run.thread is not None:
            run.thread.join(ABORT_WAIT_S)
        return run.view()


__all__ = ["NodeRun", "NodeSteps"]
