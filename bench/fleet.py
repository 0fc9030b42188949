"""Fleet benchmarks on a 3-node loopback Ray cluster (each node: 2 sitl slots, its own pool
and data dir): open-to-ready against a local managed start, the snapshot round trip of
an actor call, and map throughput of N hop scenarios against pytest -n on one node.
``--open-only``: just the open-to-ready figures."""

from __future__ import annotations

import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import ray
from ray import cloudpickle

from sitlpool.config import load_settings
from sitlpool.fleet import Fleet, ItemFailed
from sitlpool.fleet.node import Slot
from sitlpool.process import ManagedManager

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from _util import fmt, report, stats  # noqa: E402

from ray_cluster import RayCluster  # noqa: E402

BASE = 1400  # instances 1400-1417 (cluster) and 1430-1435 (local): ports below Ray's 23000-32000
SPEEDUP = 10
N_HOPS = int(os.environ.get("BENCH_FLEET_HOPS", "12"))
ROUNDS = 8  # of the open-to-ready figures
OPEN_ONLY = "--open-only" in sys.argv  # just the open-to-ready figures (a few minutes shorter)


def hop(sitl, item):
    t = time.monotonic()
    sitl.arm_and_takeoff(4)
    sitl.link.land()
    sitl.wait_disarmed(60)
    return {"n": item, "fly_s": time.monotonic() - t}


PYTEST_HOPS = """
import time
import pytest

@pytest.mark.parametrize("n", range({n}))
def test_hop(sitl, n):
    sitl.arm_and_takeoff(4)
    sitl.link.land()
    sitl.wait_disarmed(60)
"""


def main() -> None:
    logging.getLogger("sitlpool").setLevel(logging.ERROR)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    tmp = Path(tempfile.mkdtemp(prefix="sitlpool-bench-fleet-"))
    t = time.monotonic()
    c = RayCluster.start([[BASE, BASE + 1], [BASE + 6, BASE + 7], [BASE + 12, BASE + 13]], sitl_per_node=2, timeout=180)
    report("3-node cluster up (ray start x3, one after another)", fmt(time.monotonic() - t))
    try:
        t = time.monotonic()
        fleet = Fleet(c.address)
        report("Fleet(address) connect", fmt(time.monotonic() - t))

        # interleaved rounds (empty actor, fleet.open, local start): the machine's load drifts
        # over a run, and all three figures of a round meet the same load
        slot = ray.remote(Slot)
        m = ManagedManager(settings=load_settings(data_dir=tmp / "local", pool=f"{BASE + 30}-{BASE + 35}"))
        actor_start, opens, local = [], [], []
        for i in range(ROUNDS):
            t = time.monotonic()
            a = slot.options(num_cpus=0).remote()
            ray.get(a.ready.remote())
            actor_start.append(time.monotonic() - t)
            ray.kill(a)
            t = time.monotonic()
            s = fleet.open(speedup=SPEEDUP, label=f"bench-{i}")
            opens.append(time.monotonic() - t)
            if i < ROUNDS - 1:
                s.close()
            t = time.monotonic()
            h = m.start(f"local-{i}", speedup=SPEEDUP)
            local.append(time.monotonic() - t)
            h.kill(wait=True)
        report("Ray actor start (empty actor to first answer)", stats(actor_start))
        mo, ml, ma = statistics.median(opens), statistics.median(local), statistics.median(actor_start)
        report("fleet.open to ready", stats(opens))
        report("local ManagedManager.start to ready", stats(local))
        report(
            "  fleet.open - one actor start (what sitlpool adds on the node)",
            fmt(mo - ma),
            f"≤ 1.5 x local = {fmt(1.5 * ml)}",
        )
        report("  fleet.open / (1.5 x local + one actor start)", f"{mo / (1.5 * ml + ma):.2f}", "≤ 1")
        if OPEN_ONLY:
            s.close()
            fleet.close()
            return

        snaps = []
        for _ in range(200):
            t = time.perf_counter()
            s.snapshot()
            snaps.append(time.perf_counter() - t)
        report("snapshot round trip through the actor", stats(snaps), "≤ 5 ms")
        s.close()

        # map: N hops over 6 slots on 3 nodes
        t = time.monotonic()
        results = fleet.map(hop, range(N_HOPS), speedup=SPEEDUP, progress=False)
        wall = time.monotonic() - t
        ok = [r for r in results if not isinstance(r, ItemFailed)]
        bad = [r for r in results if isinstance(r, ItemFailed)]
        report(
            f"fleet.map of {N_HOPS} hops, 6 slots on 3 nodes: wall",
            fmt(wall) + (f" ({len(bad)} failed, e.g. {bad[0]})" if bad else ""),
        )
        report("  one hop's flight (median inside fn)", fmt(statistics.median(r["fly_s"] for r in ok)))
        per_slot = wall * 6 / N_HOPS  # slot-seconds each scenario used
        report("  slot time per scenario (launch + flight + Ray)", fmt(per_slot))

        # the same hops with pytest -n 6 on this one machine
        (tmp / "suite").mkdir()
        (tmp / "suite" / "test_hops.py").write_text(textwrap.dedent(PYTEST_HOPS.format(n=N_HOPS)))
        env = dict(os.environ, SITLPOOL_DATA_DIR=str(tmp / "pytest"), SITLPOOL_POOL=f"{BASE + 30}-{BASE + 35}")
        t = time.monotonic()
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-n",
                "6",
                "-p",
                "xdist",
                "-p",
                "no:cacheprovider",
                f"--sitl-speedup={SPEEDUP}",
                "test_hops.py",
            ],
            cwd=tmp / "suite",
            env=env,
            capture_output=True,
            text=True,
        )
        pwall = time.monotonic() - t
        report(
            f"pytest -n 6 of the same {N_HOPS} hops on one machine: wall",
            fmt(pwall) + ("" if r.returncode == 0 else f" (FAILED: {r.stdout[-300:]})"),
        )
        over = (wall - pwall) / N_HOPS * 6 / per_slot * 100
        report("  Ray's overhead per scenario vs pytest -n (share of a scenario)", f"{over:.1f}%", "< 5% of a hop")
        fleet.close()
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
