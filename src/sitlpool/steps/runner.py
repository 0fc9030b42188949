"""Running a step program on one session, timed on the vehicle's clock (its time_boot_ms):
``hold_s`` and ``wait_until``'s ``timeout_s`` are sim seconds, and so is the run's time limit,
so neither the caller's thinking time nor the machine's load changes what the vehicle does."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .. import conditions, world
from ..errors import SitlpoolError
from ..process.binaries import runs_builtin
from .vocabulary import HOLD, HOLD_UNTIL, NOTE, TOOLS, StepError, validate_steps

CLOCK_WAIT_S = 10.0  # wall seconds for a first sim time from the vehicle
STALL_S = 30.0  # wall seconds the vehicle's clock may stand still before the run fails
POLL_S = 0.25


@dataclass
class StepOutcome:
    """What one step did: sim times (seconds since the vehicle booted), its answer or error."""

    index: int  # from 1
    tool: str  # a tool name, or "hold_s"
    step: dict
    ok: bool | None = None  # None: running
    sim_time_start_s: float | None = None
    sim_time_end_s: float | None = None
    wall_s: float | None = None
    result: Any = None
    error: str | None = None
    position: dict | None = None  # where the vehicle was when the step ended

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class RunResult:
    """A step program's run: ``ok`` once every step did what it asked."""

    steps: list
    session_id: str | None = None
    run_id: str | None = None
    label: str | None = None
    state: str = "starting"  # starting, running, done, failed, aborted
    ok: bool | None = None
    error: str | None = None
    outcomes: list[StepOutcome] = field(default_factory=list)
    current_step: int | None = None  # from 1
    sim_time_start_s: float | None = None
    sim_time_s: float | None = None  # the vehicle's clock, last seen
    time_limit_s: float | None = None
    started: float = field(default_factory=time.time)
    wall_s: float | None = None
    log_ids: list[str] = field(default_factory=list)
    logs: list[dict] = field(default_factory=list)
    recipe: str | None = None  # path of its recipe.json
    repro_of: str | None = None
    comparison: dict | None = None

    @property
    def done(self) -> bool:
        return self.state in ("done", "failed", "aborted")

    @property
    def sim_duration_s(self) -> float | None:
        if self.sim_time_start_s is None or self.sim_time_s is None:
            return None
        return round(self.sim_time_s - self.sim_time_start_s, 3)

    def mirror(self, d: dict) -> list[StepOutcome]:
        """Take the progress of this run flown elsewhere (``d``: the ``as_dict()`` of its copy
        there, a Ray node's); the outcomes new or changed since the last one taken."""
        for k in MIRRORED:
            setattr(self, k, d.get(k))
        before = {(o.index, o.ok) for o in self.outcomes}
        self.outcomes = [StepOutcome(**{k: o.get(k) for k in OUTCOME_FIELDS}) for o in d.get("outcomes") or []]
        return [o for o in self.outcomes if (o.index, o.ok) not in before]

    def as_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "outcomes"}
        d["outcomes"] = [o.as_dict() for o in self.outcomes]
        d["done"] = self.done
        d["steps_total"] = len(self.steps)
        d["steps_done"] = sum(1 for o in self.outcomes if o.ok is not None)
        d["sim_duration_s"] = self.sim_duration_s
        return d


#: what ``RunResult.mirror`` takes from a copy of the run flown elsewhere (its ids, steps and logs are this one's)
MIRRORED = ("state", "ok", "error", "current_step", "sim_time_start_s", "sim_time_s", "wall_s")
OUTCOME_FIELDS = tuple(f.name for f in fields(StepOutcome))


def position(link) -> dict:
    v = link.vehicle
    return {
        "lat": v.lat,
        "lon": v.lon,
        "relative_alt_m": None if v.rel_alt is None else round(v.rel_alt, 3),
        "mode": v.mode,
        "armed": v.armed,
    }


def _compact(result: Any) -> Any:
    """A tool's answer without its full snapshot (the position is kept per step)."""
    if isinstance(result, dict) and isinstance(result.get("snapshot"), dict):
        out = {k: v for k, v in result.items() if k != "snapshot"}
        veh = result["snapshot"].get("vehicle") or {}
        out["vehicle"] = {k: veh.get(k) for k in ("mode", "armed", "relative_alt_m") if k in veh}
        return out
    return result


class _Stop(Exception):
    def __init__(self, state: str, error: str):
        super().__init__(error)
        self.state, self.error = state, error


class Runner:
    """One run of ``steps`` on ``session`` (a local session: its link carries the clock).
    ``result`` is filled in as the run goes (for a status call from another thread)."""

    def __init__(
        self,
        session,
        steps: list,
        *,
        time_limit_s: float | None = None,
        abort=None,
        result: RunResult | None = None,
        on_step: Callable[[StepOutcome], None] | None = None,
        then_close: bool = False,
    ):
        self.plan = validate_steps(steps)
        if callable(getattr(session, "run_steps_there", None)):  # its link is a stand-in: the clock is there
            raise StepError(
                f"session {session.id} flies on a Ray node: its steps run there, beside its SITL; "
                "start them with StepRuns (fly_steps), which runs them on its node"
            )
        if time_limit_s is not None and not (isinstance(time_limit_s, (int, float)) and time_limit_s > 0):
            raise StepError(f"time_limit_s {time_limit_s!r} must be sim seconds above 0")
        self.session = session
        self.abort = abort if abort is not None else threading.Event()
        self.result = result if result is not None else RunResult(list(steps))
        self.result.session_id = session.id
        self.result.time_limit_s = time_limit_s
        self.limit_at: float | None = None
        self.on_step = on_step
        # the caller closes the session when the steps end: the built-in vehicle is slowed to the
        # pace speed then, so that the sim seconds its log gains before the close do not depend on
        # the load (a repeat's log is as long as the first's). Not real SITL: its logger runs on
        # sim time, and slowed so, the log's end was not always flushed before the close
        self.then_close = then_close

    # ---- the vehicle's clock --------------------------------------------------------------

    @property
    def link(self):
        link = self.session.link
        if link is None:
            raise SitlpoolError(f"session {self.session.id} has no link to its vehicle; step programs need one")
        return link

    def now(self) -> float | None:
        t = world.sim_time_s(self.link)
        if t is not None:
            self.result.sim_time_s = t
        return t

    def _dead(self) -> bool:
        s = self.session
        return s.closing or s.closed or s.handle.dead or self.link.state == "closed"

    def wait(self, pred, until: float | None) -> str:
        """Wait on the vehicle's clock: "met" once ``pred(vehicle)``, "timeout" at sim time
        ``until``; raises ``_Stop`` at the run's limit, on abort, a death or a clock stopped."""
        link = self.link
        last_t, last_change = self.now(), time.monotonic()
        while True:
            t = self.now()
            self.session.last_used = time.monotonic()  # a long hold is use: the idle reaper leaves it
            if self.abort.is_set():
                raise _Stop("aborted", "aborted")
            if pred(link.vehicle):
                return "met"
            if self._dead():
                raise _Stop("failed", f"the SITL of session {self.session.id} is {self.session.state}")
            if t is not None and self.limit_at is not None and t >= self.limit_at:
                raise _Stop("failed", f"time limit of {self.result.time_limit_s:g} sim seconds reached")
            if t is not None and until is not None and t >= until:
                return "timeout"
            if t != last_t:
                last_t, last_change = t, time.monotonic()
            elif time.monotonic() - last_change > STALL_S:
                raise _Stop("failed", f"the vehicle's clock stood still for {STALL_S:g} s (sim time {t})")
            ends = [x for x in (until, self.limit_at) if x is not None]
            end = min(ends) if ends else None

            def check(v, end=end):
                ms = world.world_of(link).sim_time_s
                return self.abort.is_set() or pred(v) or (end is not None and ms is not None and ms >= end)

            link.wait(check, POLL_S)

    # ---- the run ------------------------------------------------------------------------

    def run(self) -> RunResult:
        r = self.result
        r.state = "running"
        t_wall = time.monotonic()
        try:
            w = world.world_of(self.link)  # its listener reads time_boot_ms from here on
            if not self.link.wait(lambda _v: w.boot_ms is not None, CLOCK_WAIT_S):
                raise _Stop("failed", f"the vehicle said no time_boot_ms within {CLOCK_WAIT_S:g} s")
            r.sim_time_start_s = self.now()
            if r.time_limit_s is not None and r.sim_time_start_s is not None:
                self.limit_at = r.sim_time_start_s + r.time_limit_s
            for i, (name, args) in enumerate(self.plan, 1):
                self._step(i, name, args)
            r.state, r.ok = "done", True
        except _Stop as e:
            r.state, r.ok, r.error = e.state, False, e.error
        except Exception as e:  # a step's failure is the run's: said, never raised from a thread
            r.state, r.ok, r.error = "failed", False, str(e) or type(e).__name__
        finally:
            if self.abort.is_set() and r.state == "failed":
                r.state = "aborted"  # closed under it by abort: the abort is what happened
            r.current_step = None
            r.wall_s = round(time.monotonic() - t_wall, 3)
            try:
                self.now()
            except SitlpoolError:
                pass
            if self.then_close and not self._dead() and runs_builtin(getattr(self.session.handle, "argv", None)):
                world.send_speedup(self.link, world.PACE_SPEEDUP)
        return r

    def _step(self, i: int, name: str, args: dict) -> None:
        r = self.result
        if self.abort.is_set():
            raise _Stop("aborted", "aborted")
        raw = r.steps[i - 1]
        o = StepOutcome(i, name, dict(raw))
        r.outcomes.append(o)
        r.current_step = i
        self.session.last_used = time.monotonic()
        o.sim_time_start_s = self.now()
        self._tell(o)
        if self.limit_at is not None and o.sim_time_start_s is not None and o.sim_time_start_s >= self.limit_at:
            o.ok, o.error = False, "not started: time limit reached"
            raise _Stop("failed", f"time limit of {r.time_limit_s:g} sim seconds reached before step {i}")
        t0 = time.monotonic()
        try:
            o.result, o.ok = self._do(name, args, o.sim_time_start_s)
            if not o.ok:
                o.error = f"{name} {args.get('condition', '')} {o.result.get('result')}".replace("  ", " ")
        except _Stop as e:
            o.ok, o.error = False, e.error
            why = (
                f"aborted during step {i} ({name})" if e.state == "aborted" else f"step {i} ({name}) failed: {e.error}"
            )
            raise _Stop(e.state, why) from None
        except Exception as e:
            o.ok, o.error = False, str(e) or type(e).__name__
        finally:
            o.wall_s = round(time.monotonic() - t0, 3)
            o.sim_time_end_s = self.now()
            try:
                o.position = position(self.link)
            except SitlpoolError:
                pass
            self._tell(o)
        if not o.ok:
            note = f" ({raw.get(NOTE)})" if isinstance(raw, dict) and raw.get(NOTE) else ""
            raise _Stop("failed", f"step {i} ({name}){note} failed: {o.error}")

    def _tell(self, o: StepOutcome) -> None:
        if self.on_step is not None:
            try:
                self.on_step(o)
            except Exception:  # pragma: no cover - a progress printer never stops a run
                pass

    def _do(self, name: str, args: dict, start: float | None) -> tuple[Any, bool]:
        if name == HOLD:
            until = (start or 0.0) + args[HOLD]
            self.wait(lambda _v: False, until)
            return {"held_s": args[HOLD]}, True
        if name == HOLD_UNTIL:  # until the vehicle's clock reads it (at once when it is past)
            if (start or 0.0) < args[HOLD_UNTIL]:
                self.wait(lambda _v: False, args[HOLD_UNTIL])
            return {"held_until_s": args[HOLD_UNTIL]}, True
        if name == "wait_until":
            return self._wait_until(args, start)
        return _compact(TOOLS[name].run(self.session, args)), True

    def _wait_until(self, args: dict, start: float | None) -> tuple[dict, bool]:
        cond, value = args["condition"], args.get("value")
        s = self.session
        pred = conditions.predicate(s.flight, cond, value, getattr(s, "last_goto", None))
        t0 = time.time()
        got = self.wait(lambda v: pred(v, t0), (start or 0.0) + float(args.get("timeout_s", 30)))
        return {"result": got, "condition": cond, "value": value}, got == "met"


def run_steps(
    session, steps: list, *, time_limit_s: float | None = None, abort=None, then_close: bool = False
) -> RunResult:
    """Run ``steps`` on ``session`` (already open) and return when they end: ``RunResult``
    (``ok``, per-step outcomes with sim times, results, errors). Stops at the first step that
    fails, on ``abort`` (a ``threading.Event``), or after ``time_limit_s`` sim seconds. The
    session stays open: closing it is the caller's (``fly`` closes its own); ``then_close``:
    the caller closes it next, so the built-in vehicle is slowed to ``world.PACE_SPEEDUP`` at the
    end (what its log gains before the close then does not depend on the machine's load)."""
    return Runner(session, steps, time_limit_s=time_limit_s, abort=abort, then_close=then_close).run()
