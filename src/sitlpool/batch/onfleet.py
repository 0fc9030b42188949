"""A batch's runs on a Ray fleet (``Batch``'s half for ``fleet=``): one actor per node holding
its free ``sitl`` slots (``fleet.SlotPool``), a slot thread each feeding it runs one at a time,
so Ray starts a worker once per node; a run lost with its node is flown again elsewhere and
recorded once. ``fleet_item`` is what a node runs for one run: the steps flown on the SITL
launched with the variant's parameters, the metrics read from the log it writes there."""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from typing import Any

from .. import logs
from ..sessions import Session
from ..steps import run_steps
from .metrics import RunData, UserMetric, measure
from .plan import Run, Variant, open_options
from .store import BatchDir

log = logging.getLogger("sitlpool.batch")
#: what a node's worker imports to fly a run (``fleet_item``), before the batch's first run
WARM_MODULES = ["sitlpool.batch.onfleet", "sitlpool.fleet.node", "sitlpool.logs"]
#: False: each run a one-item ``Fleet.map`` (a task on a slot, in a worker per slot: bench/batch.py --map)
NODE_ACTORS = True
WARM_SLOTS = True  # the map path: False, each slot's first run starts its worker (bench/batch.py --no-warm)
RETRIES = 2  # a run lost with its node is flown again elsewhere this many times
WARM_TIMEOUT_S = 30.0  # the longest a batch waits for its slots' workers before flying anyway


def fleet_item(sitl: Any, item: dict) -> dict:
    """One run on a Ray node (``Fleet.map``'s fn, on a SITL launched with the variant's
    parameters): the steps flown, the metrics read from the log it is writing there; only the
    record comes back."""
    t0, started = time.monotonic(), time.time()
    session = Session(f"fleet-{item['index']}", item["label"], sitl.handle, "managed")
    # abort: the node actor's event (``SlotPool.abort``), None in a map's task
    r = run_steps(session, item["steps"], time_limit_s=item["time_limit_s"], abort=item.get("abort"), then_close=True)
    path = sitl.log_path
    summary = logs.summary(path) if path else None
    data = RunData(bool(r.ok), item["steps"], str(path) if path else None, summary)
    values, problems = measure(data, item["metrics"], item.get("custom") or {})
    return {
        "ok": bool(r.ok),
        "error": r.error,
        "metrics": values,
        "problems": problems,
        "log_path": data.log_path,
        "node_s": round(time.monotonic() - t0, 3),  # flying and measuring on the node, its launch not counted
        "node_started": started,  # wall clock (the driver's, on one machine): how long dispatch and launch took
        "node_finished": time.time(),
    }


class FleetRuns:
    """``Batch``'s runs on a fleet (mixed into ``runner.Batch``, whose attributes these are)."""

    id: str
    dir: BatchDir
    fleet: Any
    order: list[Run]
    steps: list
    names: list[str]
    custom: dict[str, UserMetric]
    opts: dict
    concurrency: int
    variants: dict[str, Variant]
    abort_event: threading.Event

    def _record(self, run: Run, rec: dict, t0: float) -> None:
        raise NotImplementedError

    def _fleet_item(self, run: Run) -> dict:
        return {
            "index": run.index,
            "label": f"batch {self.id} {run.variant}#{run.run}",
            "steps": self.steps,
            "time_limit_s": self.opts["time_limit_s"],
            "metrics": self.names,
            "custom": self.custom,
            "abort": None,  # a node actor puts its abort event here
        }

    def _fleet_record(self, result: dict, host: Any, node_id: Any, logs_: list, submitted: float) -> dict:
        """The record of a run flown on a node, from what ``fleet_item`` returned."""
        rec = dict(result)
        log_ids = [x["id"] for x in logs_ if x.get("kind") == "bin"]
        rec.update(host=host, node_id=node_id, log_id=log_ids[0] if log_ids else None)
        started, finished = rec.pop("node_started", None), rec.pop("node_finished", None)
        if started is not None and finished is not None:  # one machine's clock: a loopback cluster's figures
            rec["launch_s"] = round(started - submitted, 3)  # placing, launching, Ray's way there
            rec["close_s"] = round(time.time() - finished, 3)  # stopping, keeping its logs, the way back
        return rec

    def _fly_fleet(self, runs: list[Run]) -> list[dict]:
        """Runs that share their launch options, as one ``Fleet.map`` (a map shares them)."""
        from ..fleet import ItemFailed  # ray: only for a batch on a fleet

        o = open_options(self.variants[runs[0].variant], runs[0], self.opts)
        submitted = time.time()
        outs = self.fleet.map(
            fleet_item,
            [self._fleet_item(run) for run in runs],
            model=o["model"],
            speedup=o["speedup"],
            home=o["home"],
            params=o["params"],
            retries=RETRIES,
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
            recs.append(self._fleet_record(out.result, out.host, out.node_id, out.logs, submitted))
        return recs

    def _group(self, runs: list[Run]) -> None:
        """Runs that share their launch options, flown as one map; each recorded."""
        t0 = time.monotonic()
        try:
            recs = self._fly_fleet(runs)
        except Exception as e:  # the map itself failed (the cluster is gone): each run's failure, recorded
            recs = [{"ok": False, "error": f"{type(e).__name__}: {e}"} for _ in runs]
        for run, rec in zip(runs, recs, strict=True):
            self._record(run, rec, t0)

    def _fleet_stream(self) -> None:
        """On a fleet: one actor per node holding its free ``sitl`` slots (``SlotPool``: a Ray
        worker started once per node, every node's at once), a slot thread each taking the next
        run of the flying order as soon as its last one came back. A run lost with its node is
        flown again on a live node and comes back once; each record is written as it comes
        back, so a batch cut short loses only the runs in flight. Slots held by others are not
        waited for; runs no slot is left for (every node lost) fly as one-item maps."""
        from ..fleet import SlotPool  # ray: only for a batch on a fleet

        free = min(self.concurrency, int(self.fleet.capacity()[1]))
        if not NODE_ACTORS or free < 1:
            self._fleet_stream_map(self.order)
            return
        runs = {r.index: r for r in self.order}
        checked: dict[str, dict] = {}  # launch options checked once per distinct set

        def opts_of(run: Run) -> dict:
            o = open_options(self.variants[run.variant], run, self.opts)
            key = json.dumps(o, sort_keys=True)
            if key not in checked:
                checked[key] = self.fleet.item_options(**o, label=f"batch-{self.id}", keep_logs=True)
            return checked[key]

        jobs = [(r.index, self._fleet_item(r), opts_of(r)) for r in self.order]
        with SlotPool(free, WARM_MODULES) as pool:
            left = pool.run_all(fleet_item, jobs, self._fleet_done(runs), retries=RETRIES, abort=self.abort_event)
        self.dir.update_meta(slots=pool.info())
        if left and not self.abort_event.is_set():  # every node's actor gone: Ray places what is left
            log.warning("batch %s: no node actor left; flying its last %d runs as maps", self.id, len(left))
            self._fleet_stream_map([runs[i] for i, _item, _opts in left])

    def _fleet_done(self, runs: dict[int, Run]):
        def done(index: int, out: dict, attempts: int, t0: float) -> None:
            kind = out["kind"]
            if kind == "ok":
                rec = self._fleet_record(out["result"], out["host"], out["node_id"], out.get("logs") or [], out["sent"])
                rec["worker_pid"] = out["pid"]
            elif kind == "error":
                rec = {"ok": False, "error": f"{out['type']}: {out['message']}", "host": out.get("host")}
            elif kind == "lost":
                rec = {"ok": False, "error": f"Lost: {out['message']}"}
            else:
                rec = {"ok": False, "error": out.get("message") or "aborted"}
            rec["attempts"] = attempts
            self._record(runs[index], rec, t0)

        return done

    def _fleet_stream_map(self, runs: list[Run]) -> None:
        """Each run a one-item ``Fleet.map`` (its own launch options; a run lost with its node
        is flown again elsewhere by the map and comes back once), by one slot thread per
        ``sitl`` slot."""
        from ..fleet.warm import warm  # ray: only for a batch on a fleet

        # every slot's Ray worker process started (and sitlpool imported there) at once, before
        # the first runs: else each slot's first run waits for its worker, which a node starts a
        # few at a time. Counted in the batch's wall time (batch.json's warm_s), not in a run's
        free = min(self.concurrency, int(self.fleet.capacity()[1]))  # slots held by others are not waited for
        if free > 0 and WARM_SLOTS and len(runs) == len(self.order):
            self.dir.update_meta(warm=warm(free, WARM_MODULES, timeout_s=WARM_TIMEOUT_S))
        todo: queue.Queue[Run] = queue.Queue()
        for r in runs:
            todo.put(r)

        def worker() -> None:
            while not self.abort_event.is_set():
                try:
                    run = todo.get_nowait()
                except queue.Empty:
                    return
                self._group([run])

        workers = [
            threading.Thread(target=worker, name=f"batch {self.id} fleet slot {i}", daemon=True)
            for i in range(min(self.concurrency, len(runs)))
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
