"""Flying a batch: every run a fresh SITL (leased, launched, flown through the step runner,
stopped, its log kept), as many at once as the pool and the machine's CPU allow (``Pace``),
on this machine or on a Ray fleet (``fleet.SlotPool``: one actor per node holding its free
``sitl`` slots, a slot thread each feeding it runs one at a time, so a run lost with its node
is flown again elsewhere and counted once). Each finished run is written at once: a batch
cut short keeps what it flew."""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any

from .. import locations, logs
from ..config import load_settings
from ..errors import SitlpoolError
from ..process.binaries import resolve_binary
from ..sessions import Sessions, check_open_args
from ..steps import StepRuns, validate_steps
from .metrics import RunData, UserMetric, check_metrics, measure
from .onfleet import FleetRuns
from .pace import MAX_AUTO, Pace
from .plan import BatchError, Run, Variant, check_runs, check_variants, open_options, plan
from .store import BatchDir

log = logging.getLogger("sitlpool.batch")
DEFAULT_SPEEDUP = 10.0
MAX_TIME_LIMIT_S = 24 * 3600.0
LEASE_WAIT_S = 60.0  # a run waits this long for a free instance (others' SITLs come and go)
MAX_TOTAL_RUNS = 5000

_active: dict[str, Batch] = {}  # batches flying in this process, by id
_active_lock = threading.Lock()


class Batch(FleetRuns):
    """A batch flying in the background of this process."""

    def __init__(
        self,
        bdir: BatchDir,
        variants: list[Variant],
        order: list[Run],
        steps: list,
        names: list[str],
        custom: dict[str, UserMetric],
        opts: dict,
        concurrency: int,
        fleet: Any = None,
    ):
        self.dir, self.id = bdir, bdir.id
        self.variants = {v.name: v for v in variants}
        self.order, self.steps, self.names, self.custom = order, steps, names, custom
        self.opts, self.concurrency, self.fleet = opts, concurrency, fleet
        self.abort_event = threading.Event()
        self._runs: dict[str | None, StepRuns] = {}
        self._flying = 0  # local runs in flight
        self._pids: dict[int, int] = {}  # run index -> its SITL's pid, while it flies
        self.pace: Pace | None = None  # the default concurrency: measured as the batch flies
        self._sessions_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"batch {self.id}", daemon=True)
        self.error: str | None = None

    # ---- local runs ---------------------------------------------------------------------

    def _step_runs_for(self, binary: str | None) -> StepRuns:
        with self._sessions_lock:
            r = self._runs.get(binary)
            if r is None:
                settings = load_settings()
                if binary is not None:
                    settings = settings.model_copy(update={"sitl_binary": Path(binary)})
                r = self._runs[binary] = StepRuns(Sessions(settings, server_id=f"batch-{self.id}"))
            return r

    def _fly_local(self, run: Run) -> dict:
        """One run as a step run of its own (``StepRuns.start``): a fresh SITL, the steps on
        sim time, its logs kept and its recipe written (``repro(run_id=...)`` flies it again)."""
        v = self.variants[run.variant]
        runs = self._step_runs_for(v.binary)
        rec: dict[str, Any] = {}
        result = None
        t0 = time.monotonic()
        step_ended = [t0]  # when its last step ended: the close, log keeping and measuring come after
        try:
            o = open_options(v, run, self.opts)
            step_run = runs.start(
                self.steps,
                label=f"batch {self.id} {run.variant}#{run.run}",
                time_limit_s=self.opts["time_limit_s"],
                model=o["model"],
                speedup=o["speedup"],
                home=o["home"],
                params=o["params"],
                param_files=[f["path"] for f in v.param_files] or None,
                wait_s=LEASE_WAIT_S,
                on_step=lambda _o: step_ended.__setitem__(0, time.monotonic()),
            )
            rec["session_id"], rec["run_id"] = step_run.session.id, step_run.id
            rec["launch_s"] = round(time.monotonic() - t0, 3)
            pid = step_run.session.handle.pid
            if pid is not None:
                with self._sessions_lock:
                    self._pids[run.index] = pid
            while not step_run.finished.wait(0.5):
                if self.abort_event.is_set():  # as abort_steps: its session closed, a step inside a tool call ends too
                    runs.abort(step_run.id)
                    break
            result = step_run.result
        except Exception as e:  # the run's failure (no instance, the SITL would not start): counted, said
            rec["error"] = str(e) or type(e).__name__
        path = next((str(x["path"]) for x in (result.logs if result else []) if x.get("kind") == "bin"), None)
        summary = None
        if path:
            try:
                summary = logs.summary(path)
            except logs.LogError as e:
                rec.setdefault("error", f"its log {path} cannot be read: {e}")
        ok = bool(result is not None and result.ok)
        if result is not None and not result.ok:
            rec["error"] = result.error
            rec["state"] = result.state
        data = RunData(ok, self.steps, path, summary)
        rec["metrics"], rec["problems"] = measure(data, self.names, self.custom)
        if result is not None and "launch_s" in rec:
            rec["close_s"] = round(time.monotonic() - step_ended[0], 3)  # stopping, keeping its logs, measuring
        rec["ok"] = ok
        rec["log_path"] = path
        rec["log_id"] = next((x["id"] for x in (result.logs if result else []) if x.get("kind") == "bin"), None)
        rec["recipe"] = result.recipe if result else None
        return rec

    def flying(self) -> int:
        return self._flying

    def pids(self) -> list[int]:
        """The SITL pids of the runs flying now."""
        with self._sessions_lock:
            return list(self._pids.values())

    # ---- the batch ----------------------------------------------------------------------

    def _record(self, run: Run, rec: dict, t0: float) -> None:
        rec.setdefault("metrics", {})["success"] = 1.0 if rec.get("ok") else 0.0
        rec.update(
            run.as_dict(),
            status="ok" if rec.get("ok") else ("aborted" if self.abort_event.is_set() else "failed"),
            success=bool(rec.get("ok")),
            wall_s=round(time.monotonic() - t0, 3),
            finished=time.time(),
        )
        self.dir.add_run(rec, self.names + list(self.custom))

    def _one(self, run: Run) -> None:
        t0 = time.monotonic()
        try:
            rec = self._fly_local(run)
        except Exception as e:  # never lose a run: a failure here is the run's, recorded
            rec = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        finally:
            with self._sessions_lock:
                self._pids.pop(run.index, None)
        self._record(run, rec, t0)

    def _fly_local_all(self) -> None:
        """The flying order from a queue, by ``concurrency`` slot threads; with ``pace`` (the
        default concurrency) a slot takes its next run only while fewer than ``pace.limit``
        are in flight."""
        todo: queue.Queue[Run] = queue.Queue()
        for r in self.order:
            todo.put(r)
        gate = self.pace.changed if self.pace is not None else threading.Condition()

        def worker() -> None:
            while not self.abort_event.is_set():
                with gate:
                    while self.pace is not None and self._flying >= self.pace.limit:
                        if self.abort_event.is_set():
                            return
                        gate.wait(0.5)
                    try:
                        run = todo.get_nowait()
                    except queue.Empty:
                        return
                    self._flying += 1
                try:
                    self._one(run)
                finally:
                    with gate:
                        self._flying -= 1
                        gate.notify_all()

        if self.pace is not None:
            self.pace.start()
        workers = [
            threading.Thread(target=worker, name=f"batch {self.id} slot {i}", daemon=True)
            for i in range(self.concurrency)
        ]
        try:
            for w in workers:
                w.start()
                time.sleep(0.05)  # staggered: launches do not all contend at once
            for w in workers:
                w.join()
        finally:
            if self.pace is not None:
                self.pace.stop()
                self.dir.update_meta(concurrency_peak=self.pace.peak, cpu_share_per_run=self.pace.share)

    def _run(self) -> None:
        state = "done"
        try:
            if self.fleet is not None:
                self._fleet_stream()
            else:
                self._fly_local_all()
            if self.abort_event.is_set():
                state = "aborted"
        except Exception as e:  # pragma: no cover - the batch's own failure, written down
            state, self.error = "failed", f"{type(e).__name__}: {e}"
        finally:
            for step_runs in self._runs.values():
                step_runs.sessions.close_all()
            done = len(self.dir.runs())
            self.dir.update_meta(state=state, finished=time.time(), partial=done < len(self.order), error=self.error)
            with _active_lock:
                _active.pop(self.id, None)

    def start(self) -> Batch:
        with _active_lock:
            _active[self.id] = self
        self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def abort(self) -> None:
        self.abort_event.set()


def _check_launch(
    settings: Any, model: str, speedup: float, home: str | None, binary: str | None, local: bool
) -> tuple:
    """``(model, speedup, home)`` checked as ``open_sitl`` checks them (a named home resolved),
    before a batch is written: one line, not a batch whose every run fails on it. Whether the
    SITL can fly ``model`` is this machine's to say only when the runs fly here."""
    model, speedup, _label, _home, _params = check_open_args(model, speedup)
    if local:
        if binary is not None:
            settings = settings.model_copy(update={"sitl_binary": Path(binary)})
        resolve_binary(settings, model)
    home = locations.resolve_home(home, settings)
    check_open_args(model, speedup, home=home)
    return model, speedup, home


def default_concurrency(settings: Any, fleet: Any = None) -> int:
    """On a fleet its ``sitl`` slots; here the pool's free instances (``Pace`` then admits
    as many of them at once as the CPU carries, measured as the batch flies)."""
    if fleet is not None:
        return max(1, int(fleet.capacity()[0]))
    from ..leases import LeasePool

    return max(1, min(len(LeasePool.from_settings(settings).free()), MAX_AUTO))


def start_batch(
    variants: Any,
    runs: Any,
    steps: Any,
    metrics: Any = None,
    label: str | None = None,
    time_limit_s: float = 600,
    seed: int | None = None,
    concurrency: int | None = None,
    fleet: Any = None,
    speedup: float | None = None,
    model: str = "quad",
    home: str | None = None,
) -> Batch:
    """Check everything (one line for what is wrong), write the batch's record, and fly it in
    the background: ``Batch`` (``id``, ``wait()``, ``abort()``)."""
    checked = check_variants(variants)
    if len(checked) < 2:
        raise BatchError("a batch compares variants: give at least two (A and B)")
    runs = check_runs(runs)
    if runs * len(checked) > MAX_TOTAL_RUNS:
        raise BatchError(f"{runs} runs x {len(checked)} variants is more than {MAX_TOTAL_RUNS} runs in one batch")
    validate_steps(steps)
    names, custom = check_metrics(metrics)
    if (
        isinstance(time_limit_s, bool)
        or not isinstance(time_limit_s, int | float)
        or not 0 < time_limit_s <= MAX_TIME_LIMIT_S
    ):
        raise BatchError(
            f"time_limit_s is sim seconds per run, above 0 and at most {MAX_TIME_LIMIT_S:g}, not {time_limit_s!r}"
        )
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise BatchError(f"seed is a whole number, not {seed!r}")
    if fleet is not None and any(v.binary for v in checked):
        raise BatchError(
            "a variant's binary cannot be sent to a Ray fleet (each node flies its own SITL binary); "
            "fly binary variants on this machine"
        )
    settings = load_settings()
    try:
        model, speedup, home = _check_launch(
            settings, model, DEFAULT_SPEEDUP if speedup is None else speedup, home, None, fleet is None
        )
    except SitlpoolError as e:
        raise BatchError(str(e)) from None
    for v in checked:  # a variant's own launch options, as its runs will fly them
        if v.model is None and v.home is None and v.speedup is None and v.binary is None:
            continue
        try:
            _m, _s, v_home = _check_launch(
                settings, v.model or model, v.speedup or speedup, v.home or home, v.binary, fleet is None
            )
        except SitlpoolError as e:
            raise BatchError(f"variant {v.name}: {e}") from None
        if v.home:
            v.home = v_home
    auto = concurrency is None
    if concurrency is None:
        concurrency = default_concurrency(settings, fleet)
    elif isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= 256:
        raise BatchError(f"concurrency is a whole number from 1 to 256, not {concurrency!r}")
    order = plan(checked, runs, seed)
    concurrency = min(concurrency, len(order))
    bdir = BatchDir.create(settings.data_dir)
    opts = {
        "speedup": float(speedup),
        "model": model,
        "home": home,
        "time_limit_s": float(time_limit_s),
    }
    bdir.write_meta(
        {
            "batch_id": bdir.id,
            "label": label or bdir.id,
            "state": "running",
            "partial": True,
            "pid": os.getpid(),
            "created": time.time(),
            "where": "fleet" if fleet is not None else "local",
            "concurrency": concurrency,
            "concurrency_auto": auto and fleet is None,
            "variants": {v.name: v.as_dict() for v in checked},
            "runs_per_variant": runs,
            "total": len(order),
            "order": [r.as_dict() for r in order],
            "steps": steps,
            "metrics": names + list(custom),
            "options": opts,
            "seed": seed,
        }
    )
    b = Batch(bdir, checked, order, list(steps), names, custom, opts, concurrency, fleet)
    if auto and fleet is None:
        b.pace = Pace(concurrency, b.pids, b.flying)
    return b.start()


def active(batch_id: str) -> Batch | None:
    with _active_lock:
        return _active.get(batch_id)
