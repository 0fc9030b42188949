"""A/B batches of step programs with statistics, on the local pool or a Ray fleet (issue 24).

::

    from sitlpool import batch
    out = batch.batch_fly(
        {"A": {"params": {"WPNAV_SPEED_UP": 250}}, "B": {"params": {"WPNAV_SPEED_UP": 100}}},
        runs=10,
        steps=[{"tool": "set_mode", "mode": "GUIDED"}, {"tool": "arm"}, {"tool": "takeoff", "altitude_m": 10},
               {"tool": "wait_until", "condition": "altitude_above", "value": 9.5, "timeout_s": 60},
               {"tool": "land"}, {"tool": "wait_until", "condition": "disarmed", "timeout_s": 90}],
    )                                         # waits; wait=False returns {"batch_id"} at once
    batch.batch_status(out["batch_id"])       # progress per variant, ETA
    batch.batch_compare(out["batch_id"])      # per metric: n, mean, std, CI, p, p_adjusted, significant

Variants: ``params``, ``param_files``, ``binary``, ``wind_seed``/``failure_seed`` (``[first,
last]``), ``model``, ``home``, ``speedup``. Files: ``<data_dir>/batches/<batch_id>/``
(``batch.json``, ``runs.jsonl``, ``runs.csv``, ``compare.json``, ``compare.png``).
"""

from __future__ import annotations

import time
from importlib import import_module
from typing import Any

from ..config import load_settings
from .metrics import DEFAULT_METRICS, METRICS, kind_of
from .onfleet import fleet_item
from .plan import BatchError, check_runs, check_variants
from .runner import Batch, active, start_batch
from .store import BatchDir, batches_dir

# the statistics and the picture load scipy, numpy and Pillow (seconds of start-up on a busy
# machine): loaded on first use, so a Ray worker flying a batch's runs (it imports this package
# for ``fleet_item``) never pays for them
_LAZY = {
    "compare": "stats",
    "describe": "stats",
    "fisher": "stats",
    "hedges_g": "stats",
    "welch": "stats",
    "comparison_png": "draw",
}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'sitlpool.batch' has no attribute {name!r}")
    return getattr(import_module(f".{mod}", __name__), name)


__all__ = [
    "DEFAULT_METRICS",
    "METRICS",
    "Batch",
    "BatchError",
    "abort_batch",
    "batch_compare",
    "batch_fly",
    "batch_status",
    "check_runs",
    "check_variants",
    "compare",
    "describe",
    "fisher",
    "fleet_item",
    "hedges_g",
    "list_batches",
    "welch",
]


def _dir(batch_id: str) -> BatchDir:
    return BatchDir(load_settings().data_dir, batch_id).check()


def batch_fly(
    variants: Any,
    runs: Any,
    steps: Any,
    metrics: Any = None,
    label: str | None = None,
    time_limit_s: float = 600,
    seed: int | None = None,
    concurrency: int | None = None,
    fleet: Any = None,
    *,
    speedup: float | None = None,
    model: str = "quad",
    home: str | None = None,
    wait: bool = True,
) -> dict:
    """Fly ``runs`` runs of ``steps`` for each variant, shuffled and interleaved (``seed``),
    ``concurrency`` at a time (default: the pool's free instances, at most one per core; on a
    ``fleet``: its slots). ``metrics``: names (default all), or ``{name: fn(summary, log_path)}``
    for user-defined ones beside the named. ``time_limit_s``: sim seconds per run, then the run
    fails and its SITL is stopped. ``wait=False``: ``{"batch_id"}`` at once; else the final status."""
    b = start_batch(variants, runs, steps, metrics, label, time_limit_s, seed, concurrency, fleet, speedup, model, home)
    if not wait:
        return {"batch_id": b.id}
    try:
        b.wait()
    except KeyboardInterrupt:
        b.abort()
        b.wait()
        raise
    return batch_status(b.id)


def abort_batch(batch_id: str) -> dict:
    """Stop a batch flying in this process: runs in flight are aborted (counted as such)."""
    b = active(batch_id)
    if b is None:
        raise BatchError(f"batch {batch_id} is not flying in this process (batch_status says its state)")
    b.abort()
    return {"batch_id": batch_id, "aborting": True}


def batch_status(batch_id: str) -> dict:
    """Progress per variant (done, ok, failed, of total), the state, elapsed and ETA."""
    d = _dir(batch_id)
    meta = d.meta()
    runs = d.runs()
    per: dict[str, dict] = {}
    for name in meta["variants"]:
        mine = [r for r in runs if r["variant"] == name]
        per[name] = {
            "total": meta["runs_per_variant"],
            "done": len(mine),
            "ok": sum(1 for r in mine if r.get("success")),
            "failed": sum(1 for r in mine if not r.get("success")),
        }
    now = time.time()
    elapsed = (meta.get("finished") or now) - meta["created"]
    done, total = len(runs), meta["total"]
    eta = None
    if meta["state"] == "running" and done:
        eta = round(elapsed / done * (total - done), 1)
    failures = [
        {"index": r["index"], "variant": r["variant"], "run": r["run"], "error": r.get("error")}
        for r in runs
        if not r.get("success")
    ]
    return {
        "batch_id": batch_id,
        "label": meta.get("label"),
        "state": meta["state"],
        "partial": bool(meta.get("partial")) and meta["state"] != "running",
        "where": meta.get("where"),
        "concurrency": meta.get("concurrency"),
        **_pace(batch_id, meta),
        "done": done,
        "total": total,
        "variants": per,
        "elapsed_s": round(elapsed, 1),
        "eta_s": eta,
        "runs_per_minute": round(done / elapsed * 60, 2) if elapsed > 0 and done else None,
        "failures": failures[:20],
        "failed": len(failures),
        "directory": str(d.path),
    }


def _pace(batch_id: str, meta: dict) -> dict:
    """The default concurrency's figures: the limit now (a batch flying here), its peak and the
    measured CPU share of a run."""
    if not meta.get("concurrency_auto"):
        return {}
    b = active(batch_id)
    pace = b.pace if b is not None else None
    return {
        "concurrency_auto": True,
        "concurrency_now": pace.limit if pace is not None else None,
        "concurrency_peak": pace.peak if pace is not None else meta.get("concurrency_peak"),
        "cpu_share_per_run": (pace.share if pace is not None else meta.get("cpu_share_per_run")),
    }


def _values(meta: dict, runs: list[dict]) -> tuple[dict[str, dict[str, list[float]]], dict[str, str]]:
    order = list(meta["variants"])
    values: dict[str, dict[str, list[float]]] = {}
    for m in meta["metrics"]:
        values[m] = {v: [] for v in order}
        for r in runs:
            x = (r.get("metrics") or {}).get(m)
            if m == "success":
                x = 1.0 if r.get("success") else 0.0  # every run counts here, failed or not
            if x is not None:
                values[m][r["variant"]].append(float(x))
    kinds = {m: kind_of(m, [x for xs in values[m].values() for x in xs]) for m in values}
    return values, kinds


def batch_compare(batch_id: str, picture: bool = True) -> dict:
    """Per metric each variant's n, mean, std, 95% CI; per metric and variant (against the
    first) Welch's t-test or Fisher's exact test, BH-adjusted across all, effect size and a
    verdict. ``picture``: ``png`` (bytes) too, also written as compare.png. A batch still
    flying or cut short is compared on what it flew, marked ``partial``."""
    d = _dir(batch_id)
    meta = d.meta()
    runs = d.runs()
    order = list(meta["variants"])
    values, kinds = _values(meta, runs)
    out = import_module(".stats", __name__).compare(values, kinds, order)
    out.update(
        batch_id=batch_id,
        state=meta["state"],
        partial=meta["state"] != "done" or len(runs) < meta["total"],
        runs={v: sum(1 for r in runs if r["variant"] == v) for v in order},
        failed={v: sum(1 for r in runs if r["variant"] == v and not r.get("success")) for v in order},
        kinds=kinds,
    )
    if out["partial"]:
        out["verdict"] = f"PARTIAL ({len(runs)} of {meta['total']} runs): " + out["verdict"]
    d.write_json("compare.json", out)
    if picture:
        counts = ", ".join(f"{v} n={out['runs'][v]}" for v in order)
        title = f"batch {batch_id} ({meta.get('label')}): {counts}"
        png = import_module(".draw", __name__).comparison_png(out, values, kinds, order, title)
        d.write_bytes("compare.png", png)
        out["png"] = png
    return out


def list_batches(limit: int = 20) -> list[dict]:
    root = batches_dir(load_settings().data_dir)
    ids = sorted((p.name for p in root.glob("*") if (p / "batch.json").is_file()), reverse=True)[:limit]
    return [batch_status(i) for i in ids]
