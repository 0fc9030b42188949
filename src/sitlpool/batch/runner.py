"""Flying a batch: every run a fresh SITL (leased, launched, flown through the step runner,
stopped, its log kept), as many at once as the pool and the machine allow, on this machine or
on a Ray fleet (one ``Fleet.map`` item per run, so a run lost with its node is flown again
elsewhere and counted once). Each finished run is written at once: a batch cut short keeps
what it flew."""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any

from .. import logs
from ..config import load_settings
from ..sessions import Session, Sessions
from ..steps import StepRuns, run_steps, validate_steps
from .metrics import RunData, UserMetric, check_metrics, measure
from .plan import BatchError, Run, Variant, check_runs, check_variants, plan
from .store import BatchDir

log = logging.getLogger("sitlpool.batch")
DEFAULT_SPEEDUP = 10.0
MAX_TIME_LIMIT_S = 24 * 3600.0
LEASE_WAIT_S = 60.0  # a run waits this long for a free instance (others' SITLs come and go)
MAX_TOTAL_RUNS = 5000

_active: dict[str, Batch] = {}  # batches flying in this process, by id
_active_lock = threading.Lock()


def _open_opts(v: Variant, run: Run, base: dict) -> dict:
    params = dict(v.params)
    if v.seed_param is not None and run.seed is not None:
        params[v.seed_param] = float(run.seed)
    return {
        "model": v.model or base["model"],
        "speedup": v.speedup or base["speedup"],
        "home": v.home or base["home"],
        "params": params or None,
    }


def fleet_item(sitl: Any, item: dict) -> dict:
    """One run on a Ray node (``Fleet.map``'s fn, on a SITL launched with the variant's
    parameters): the steps flown, the metrics read from the log it is writing there; only the
    record comes back."""
    session = Session(f"fleet-{item['index']}", item["label"], sitl.handle, "managed")
    r = run_steps(session, item["steps"], time_limit_s=item["time_limit_s"])
    path = sitl.log_path
    summary = logs.summary(path) if path else None
    data = RunData(bool(r.ok), item["steps"], str(path) if path else None, summary)
    values, problems = measure(data, item["metrics"], item.get("custom") or {})
    return {"ok": bool(r.ok), "error": r.error, "metrics": values, "problems": problems, "log_path": data.log_path}


class Batch:
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
        try:
            o = _open_opts(v, run, self.opts)
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
            )
            rec["session_id"], rec["run_id"] = step_run.session.id, step_run.id
            while not step_run.finished.wait(0.5):
                if self.abort_event.is_set():
                    step_run.abort.set()
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
        rec["ok"] = ok
        rec["log_path"] = path
        rec["log_id"] = next((x["id"] for x in (result.logs if result else []) if x.get("kind") == "bin"), None)
        rec["recipe"] = result.recipe if result else None
        return rec

    def _fly_fleet(self, runs: list[Run]) -> list[dict]:
        """Runs that share their launch options, as one ``Fleet.map`` (a map shares them)."""
        from ..fleet import ItemFailed  # ray: only for a batch on a fleet

        o = _open_opts(self.variants[runs[0].variant], runs[0], self.opts)
        items = [
            {
                "index": run.index,
                "label": f"batch {self.id} {run.variant}#{run.run}",
                "steps": self.steps,
                "time_limit_s": self.opts["time_limit_s"],
                "metrics": self.names,
                "custom": self.custom,
            }
            for run in runs
        ]
        outs = self.fleet.map(
            fleet_item,
            items,
            model=o["model"],
            speedup=o["speedup"],
            home=o["home"],
            params=o["params"],
            retries=2,
            progress=False,
            label=f"batch-{self.id}",
            keep_logs=True,
        )
        recs = []
        for out in outs:
            if isinstance(out, ItemFailed):
                recs.append(
                    {"ok": False, "error": f"{out.type}: {out.error}", "host": out.host, "attempts": out.attempts}
                )
                continue
            rec = dict(out.result)
            log_ids = [x["id"] for x in out.logs if x.get("kind") == "bin"]
            rec.update(host=out.host, node_id=out.node_id, log_id=log_ids[0] if log_ids else None)
            recs.append(rec)
        return recs

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
        self._record(run, rec, t0)

    def _group(self, runs: list[Run]) -> None:
        t0 = time.monotonic()
        try:
            recs = self._fly_fleet(runs)
        except Exception as e:  # the map itself failed (the cluster is gone): each run's failure, recorded
            recs = [{"ok": False, "error": f"{type(e).__name__}: {e}"} for _ in runs]
        for run, rec in zip(runs, recs, strict=True):
            self._record(run, rec, t0)

    def _fleet_rounds(self) -> None:
        """On a fleet: the flying order in rounds of ``concurrency`` runs; in a round, one map
        per set of launch options (a variant; each seed of a seeded variant), all at once. A
        map per run would cost Ray's per-call setup on every run; a round's records are
        written when it ends, so a batch cut short loses at most the round in flight."""
        order = list(self.order)
        while order and not self.abort_event.is_set():
            chunk, order = order[: self.concurrency], order[self.concurrency :]
            groups: dict[str, list[Run]] = {}
            for run in chunk:
                key = json.dumps(_open_opts(self.variants[run.variant], run, self.opts), sort_keys=True)
                groups.setdefault(key, []).append(run)
            threads = [threading.Thread(target=self._group, args=(g,), daemon=True) for g in groups.values()]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

    def _run(self) -> None:
        todo: queue.Queue[Run] = queue.Queue()
        for r in self.order:
            todo.put(r)

        def worker() -> None:
            while not self.abort_event.is_set():
                try:
                    run = todo.get_nowait()
                except queue.Empty:
                    return
                self._one(run)

        workers = [
            threading.Thread(target=worker, name=f"batch {self.id} slot {i}", daemon=True)
            for i in range(self.concurrency)
        ]
        state = "done"
        try:
            if self.fleet is not None:
                workers = []
                self._fleet_rounds()
            for w in workers:
                w.start()
                time.sleep(0.05)  # staggered: launches do not all contend at once
            for w in workers:
                w.join()
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


def default_concurrency(settings: Any, fleet: Any = None) -> int:
    if fleet is not None:
        return max(1, int(fleet.capacity()[0]))
    from ..leases import LeasePool

    free = len(LeasePool.from_settings(settings).free())
    return max(1, min(free, os.cpu_count() or 1))


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
    if concurrency is None:
        concurrency = default_concurrency(settings, fleet)
    elif isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= 256:
        raise BatchError(f"concurrency is a whole number from 1 to 256, not {concurrency!r}")
    order = plan(checked, runs, seed)
    concurrency = min(concurrency, len(order))
    bdir = BatchDir.create(settings.data_dir)
    opts = {
        "speedup": float(speedup or DEFAULT_SPEEDUP),
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
    return Batch(bdir, checked, order, list(steps), names, custom, opts, concurrency, fleet).start()


def active(batch_id: str) -> Batch | None:
    with _active_lock:
        return _active.get(batch_id)
