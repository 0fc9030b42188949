"""A/B batch benchmarks on the built-in vehicle: a batch of 2 variants x 10 runs of a
60-sim-second step program at speedup 10 (``batch_fly``, the local pool) against the same
runs scripted one by one through the Python API (sitlpool.steps.fly); runs per minute
against slots (1, 2, 4, 6); and a model of a 20-node x 16-slot cluster from the measured
per-run costs (wall and CPU seconds of a run). ``--runs N``: runs per variant (default 10);
``--sweep-runs N``: per variant in the slot sweep (default 6); ``--quick``: 3 and 2; ``--ray``: the same batch on a 3-node loopback Ray cluster too
(Ray's per-run overhead, with each node announcing 1 CPU and 2 CPUs); ``--ray-only``: the local batch and the
Ray ones, nothing else. On Ray a batch flies in one actor per node (``fleet.SlotPool``); ``--map``: each run
a one-item ``Fleet.map`` instead (a task per run, every slot's worker started first; ``--no-warm``: not
started first); ``--both``: each way, on clusters of their own, one after the other (the map first;
``--actors-first``: the actors)."""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _util import report  # noqa: E402

POOL = "1440-1451"  # 12 instances, away from the tests' 1000-1299 and the default 40-59
SPEEDUP = 10
# ~60 sim seconds: climb to 10 m (~5-10 s), hover 30 s, land from 10 m (~20 s)
STEPS = [
    {"tool": "set_mode", "mode": "GUIDED"},
    {"tool": "arm"},
    {"tool": "takeoff", "altitude_m": 10},
    {"tool": "wait_until", "condition": "altitude_above", "value": 9.5, "timeout_s": 60},
    {"hold_s": 30},
    {"tool": "land"},
    {"tool": "wait_until", "condition": "disarmed", "timeout_s": 90},
]
VARIANTS = {"A": {"params": {"WPNAV_SPEED_UP": 250}}, "B": {"params": {"WPNAV_SPEED_UP": 100}}}
CLUSTER_NODES, CLUSTER_SLOTS, CLUSTER_CORES = 20, 16, 16


def _arg(name: str, default: int) -> int:
    if name in sys.argv:
        return int(sys.argv[sys.argv.index(name) + 1])
    return default


def cpu_s() -> float:
    """CPU seconds of this process and its reaped children (every SITL is one)."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def sequential(runs: int) -> dict:
    """The same runs scripted one by one through the Python API (``sitlpool.steps.fly``)."""
    from sitlpool.steps import fly

    t0, c0 = time.monotonic(), cpu_s()
    ok = 0
    sim = []
    for i in range(runs):
        for name, v in VARIANTS.items():
            r = fly(STEPS, speedup=SPEEDUP, params=v["params"], label=f"bench-seq-{name}-{i}", time_limit_s=600)
            ok += bool(r.ok)
            if r.sim_duration_s:
                sim.append(r.sim_duration_s)
    wall, cpu = time.monotonic() - t0, cpu_s() - c0
    n = runs * len(VARIANTS)
    return {"runs": n, "ok": ok, "wall_s": wall, "cpu_s": cpu, "sim_s_mean": sum(sim) / max(1, len(sim))}


def batched(runs: int, concurrency: int | None) -> dict:
    from sitlpool.batch import batch_fly

    t0, c0 = time.monotonic(), cpu_s()
    st = batch_fly(VARIANTS, runs, STEPS, metrics=["time_to_alt_s"], speedup=SPEEDUP, concurrency=concurrency, seed=1)
    wall, cpu = time.monotonic() - t0, cpu_s() - c0
    meta = json.loads((Path(st["directory"]) / "batch.json").read_text())
    return {
        "runs": st["done"],
        "ok": st["done"] - st["failed"],
        "wall_s": wall,
        "cpu_s": cpu,
        "concurrency": st["concurrency"],
        "peak": meta.get("concurrency_peak"),
        "cpu_share": meta.get("cpu_share_per_run"),
        "batch_id": st["batch_id"],
    }


def records(batch_id: str, first: int = 0) -> list[dict]:
    """The successful runs of a batch, from flying-order index ``first`` on."""
    from sitlpool.batch.store import BatchDir
    from sitlpool.config import load_settings

    runs = BatchDir(load_settings().data_dir, batch_id).runs()
    return [r for r in runs if r.get("success") and r["index"] >= first]


def avg(rs: list[dict], key: str) -> float:
    return mean([r[key] for r in rs if r.get(key) is not None])


def on_ray(runs: int, local: dict, slots: int, num_cpus: int, how: str = "actors") -> dict:
    """The same batch on a 3-node loopback Ray cluster (2 sitl slots each, ``num_cpus`` CPUs
    announced by each node: a real machine announces its cores, at least its slots): wall, runs/min, and
    Ray's per-run overhead: a run's wall on the fleet less a run's wall here at the same number
    of runs at once (``local``, that batch's figures), over all runs and over the runs after the first wave (each
    slot's first run waits for its Ray worker process to start: a one-time cost per slot).
    ``how``: "actors" (one actor per node), "map" (a one-item map per run, workers started
    first) or "map-no-warm"."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    import ray

    from ray_cluster import RayCluster
    from sitlpool.batch import batch_fly, onfleet
    from sitlpool.fleet import Fleet

    base = 1460
    onfleet.NODE_ACTORS = how == "actors"
    onfleet.WARM_SLOTS = how != "map-no-warm"  # else each slot's first run waits for its Ray worker
    c = RayCluster.start(
        [[base, base + 1], [base + 6, base + 7], [base + 12, base + 13]],
        sitl_per_node=2,
        num_cpus=num_cpus,
        timeout=180,
    )
    try:
        fleet = Fleet(c.address)
        try:
            t0 = time.monotonic()
            st = batch_fly(VARIANTS, runs, STEPS, metrics=["time_to_alt_s"], speedup=SPEEDUP, fleet=fleet, seed=1)
            wall = time.monotonic() - t0
        finally:
            fleet.close()
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.stop()
    bid = st["batch_id"]
    meta = json.loads((Path(st["directory"]) / "batch.json").read_text())
    ray_all, ray_warm, ray_cold = records(bid), records(bid, slots), records(bid)[:slots]
    here_all, here_warm = records(local["batch_id"]), records(local["batch_id"], slots)
    out = {
        "runs": st["done"],
        "ok": st["done"] - st["failed"],
        "wall_s": wall,
        "local_wall_s": local["wall_s"],
        "num_cpus": num_cpus,
        "how": how,
        "warm": meta.get("warm") or {},
        "slots": meta.get("slots") or {},
        "concurrency": st["concurrency"],
        "run_wall_s": avg(ray_all, "wall_s"),
        "local_run_wall_s": avg(here_all, "wall_s"),
        "warm_run_wall_s": avg(ray_warm, "wall_s"),
        "local_warm_run_wall_s": avg(here_warm, "wall_s"),
        "node_s": avg(ray_all, "node_s"),  # flying and measuring on the node
        "launch_s": avg(ray_warm, "launch_s"),  # the driver's call to the flight's start there (warm slots)
        "close_s": avg(ray_all, "close_s"),  # the flight's end there to the record here
        "local_launch_s": avg(here_warm, "launch_s"),
        "local_close_s": avg(here_all, "close_s"),
        "slot_start_s": avg(ray_cold, "launch_s") - avg(ray_warm, "launch_s"),  # a slot's first run, more
    }
    for k, (x, y) in {
        "": ("run_wall_s", "local_run_wall_s"),
        "warm_": ("warm_run_wall_s", "local_warm_run_wall_s"),
    }.items():
        out[f"{k}overhead_s"] = out[x] - out[y]
        out[f"{k}overhead_pct"] = (out[x] - out[y]) / out[y] * 100
    return out


def mean(xs: list[float]) -> float:
    return sum(xs) / max(1, len(xs))


def per_min(d: dict) -> float:
    return d["runs"] / d["wall_s"] * 60


def ray_report(runs: int, r: dict) -> None:
    w, a = r["warm"], r["slots"]
    how = {"actors": "one actor per node", "map": "a map per run", "map-no-warm": "a map per run, no warm-up"}
    report(f"3-node loopback Ray, --num-cpus {r['num_cpus']} a node (2 sitl slots each), {how[r['how']]}", "")
    report(
        f"  2 x {runs} runs (concurrency {r['concurrency']})",
        f"{r['wall_s']:.1f} s wall, {per_min(r):.1f} runs/min, {r['ok']}/{r['runs']} ok",
    )
    more = r["wall_s"] - r["local_wall_s"]
    report(
        "  the batch's wall against here at concurrency 6 (Ray's starts in it)",
        f"+{more:.1f} s (+{more / r['local_wall_s'] * 100:.1f}%)",
    )
    report(
        "Ray per-run overhead, every run",
        f"{r['overhead_s']:.2f} s ({r['overhead_pct']:.1f}% of a {r['local_run_wall_s']:.1f} s run)",
        "<= 5%",
    )
    report(
        "Ray per-run overhead, runs after each slot's first",
        f"{r['warm_overhead_s']:.2f} s ({r['warm_overhead_pct']:.1f}% of a {r['local_warm_run_wall_s']:.1f} s run)",
        "<= 5%",
    )
    report("  a slot's first run, more than the others", f"{r['slot_start_s']:.2f} s more, once per slot")
    report(
        "  launch / fly and measure / close, keep logs: here, cluster",
        f"{r['local_launch_s']:.2f} / {r['local_warm_run_wall_s'] - r['local_launch_s'] - r['local_close_s']:.2f} / "
        f"{r['local_close_s']:.2f} s, {r['launch_s']:.2f} / {r['node_s']:.2f} / {r['close_s']:.2f} s",
    )
    if w:
        report(
            "  every slot's worker started at once, before the runs (in the wall time)",
            f"{w.get('warm_s', float('nan')):.2f} s, {w.get('workers')} workers for {w.get('slots')} slots",
        )
    if a:
        report(
            "  every node's actor started at once (in the wall time)",
            f"{a.get('start_s') or float('nan'):.2f} s, {a.get('workers')} workers for {a.get('slots')} slots",
        )


def main() -> None:
    quick = "--quick" in sys.argv
    runs = _arg("--runs", 3 if quick else 10)
    sweep_runs = _arg("--sweep-runs", 2 if quick else 6)
    tmp = tempfile.mkdtemp(prefix="sitlpool-bench-batch-")
    os.environ.update(SITLPOOL_DATA_DIR=tmp, SITLPOOL_POOL=POOL)
    cores = os.cpu_count() or 1
    print(f"# batch bench: built-in vehicle, speedup {SPEEDUP}, {cores} cores, data dir {tmp}", flush=True)
    figures: dict = {"cores": cores}

    b = batched(runs, None)
    figures["batch"] = b
    report(
        f"batch_fly 2 x {runs} runs (default concurrency: up to {b['concurrency']})",
        f"{b['wall_s']:.1f} s wall, {per_min(b):.1f} runs/min, {b['ok']}/{b['runs']} ok",
    )
    report(
        "  measured CPU share per run, peak runs at once",
        f"{b['cpu_share']:.3f} cores, {b['peak']}" if b.get("cpu_share") else "not measured",
    )
    if "--ray" in sys.argv or "--ray-only" in sys.argv:
        # a run's wall time here at the cluster's slot count (6): Ray's cost is what a run on the
        # cluster takes beyond it, with as many runs at once on this machine
        same = batched(runs, 6)
        report(f"batch_fly 2 x {runs} runs here at concurrency 6", f"{same['wall_s']:.1f} s wall")
        # each node announcing 1 CPU (Ray then starts its workers one at a time), and as many CPUs
        # as its sitl slots (what a real machine with a core per slot announces by itself)
        if "--both" in sys.argv:
            ways = ["actors", "map"] if "--actors-first" in sys.argv else ["map", "actors"]
        else:
            ways = ["map-no-warm" if "--no-warm" in sys.argv else "map" if "--map" in sys.argv else "actors"]
        for cpus in (1, 2):
            for how in ways:
                r = on_ray(runs, same, 6, cpus, how)
                figures[f"ray_cpus{cpus}_{how}"] = r
                ray_report(runs, r)
    if "--ray-only" in sys.argv:
        print(json.dumps(figures, default=str))
        return
    s = sequential(runs)
    figures["sequential"] = s
    report(
        "the same runs one by one (Python API)",
        f"{s['wall_s']:.1f} s wall, {per_min(s):.1f} runs/min, "
        f"{s['ok']}/{s['runs']} ok, {s['sim_s_mean']:.1f} sim s per run",
    )
    report("throughput batch / one by one", f"{per_min(b) / per_min(s):.2f}x", ">= 2x")

    sweep = {}
    for k in (1, 2, 4, 6):
        d = batched(sweep_runs, k)
        sweep[k] = d
        report(f"slots {k}: 2 x {sweep_runs} runs", f"{per_min(d):.1f} runs/min ({d['wall_s']:.1f} s wall)")
    figures["sweep"] = sweep

    # per-run costs, measured: the wall time of one run alone, and CPU seconds per run
    wall_run = s["wall_s"] / s["runs"]
    cpu_run = s["cpu_s"] / s["runs"]
    per_slot = 60 / wall_run  # runs/min one slot gives when the CPU is not the limit
    per_node_cpu = CLUSTER_CORES * 60 / cpu_run  # runs/min a node's cores can carry
    per_node = min(CLUSTER_SLOTS * per_slot, per_node_cpu)
    model = {
        "wall_s_per_run": wall_run,
        "cpu_s_per_run": cpu_run,
        "per_node_runs_min": per_node,
        "node_limit": "slots" if CLUSTER_SLOTS * per_slot <= per_node_cpu else "cpu",
        "cluster_runs_min": CLUSTER_NODES * per_node,
    }
    figures["model"] = model
    report("measured per run", f"{wall_run:.2f} s wall alone, {cpu_run:.2f} CPU s")
    report(
        f"model: 1 node, {CLUSTER_SLOTS} slots, {CLUSTER_CORES} cores",
        f"{per_node:.0f} runs/min (limited by {model['node_limit']})",
    )
    report(
        f"model: {CLUSTER_NODES} nodes x {CLUSTER_SLOTS} slots",
        f"{model['cluster_runs_min']:.0f} runs/min (Ray overhead not included)",
    )
    print(json.dumps(figures, default=str))


if __name__ == "__main__":
    main()
