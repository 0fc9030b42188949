"""The head node of a cluster lost (its process group SIGKILLed: the GCS gone): the SITLs on
the worker nodes, a ``RemoteSitl``'s and a ``map`` item's, stop and free their leases within
15 s, and each says so in its worker's log. Ray alone keeps them (and their leases) ~70 s,
waiting for its head. A small cluster of this test's own: it kills the head."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import processes_under, wait_for

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.xdist_group("fleet_head_loss")  # its own cluster (the head is killed), on any worker

from ray_cluster import RayCluster  # noqa: E402

LOST_WITHIN_S = 15.0
MESSAGE = "lost the Ray cluster"

DRIVER = """
import json, sys, threading, time
from sitlpool.fleet import Fleet

def hold(sitl, item):
    time.sleep(600)
    return item

fleet = Fleet(sys.argv[1])
s = fleet.open(speedup=10, label="head-loss")
print(json.dumps({"instance": s.instance, "pid": s.pid}), flush=True)
threading.Thread(target=lambda: fleet.map(hold, [0], speedup=10, progress=False), daemon=True).start()
time.sleep(3600)
"""


def sitls_of(data_dir: Path) -> list[int]:
    return [p for p in processes_under(data_dir) if "sitlpool.sim" in open(f"/proc/{p}/cmdline").read()]


def held(node) -> list[int]:
    from sitlpool.leases import LeasePool

    return [h.instance for h in LeasePool(node.data_dir / "leases", node.pool, check=False).status()]


def said(root: Path) -> list[str]:
    """The lines of the nodes' Ray logs that say the cluster was lost."""
    out = []
    for f in root.rglob("*"):
        if f.is_file() and f.suffix in (".err", ".out", ".log"):
            try:
                out += [line for line in f.read_text(errors="replace").splitlines() if MESSAGE in line]
            except OSError:
                continue
    return out


@pytest.fixture
def cluster(instances):
    # the head offers no sitl slot: every SITL lands on the worker, which outlives the head
    c = RayCluster.start([instances[0:2], instances[2:4]], sitl_counts=[0, 2], timeout=120)
    yield c
    c.stop()


def test_worker_sitls_stop_within_15s_of_losing_the_head(cluster, procs, tmp_path):
    head, worker = cluster.nodes
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_USAGE_STATS_ENABLED="0", HOME=str(cluster.root), SITLPOOL_DATA_DIR=str(tmp_path / "driver"))
    with open(tmp_path / "driver.err", "wb") as err:
        driver = procs.popen(
            [sys.executable, "-c", DRIVER, cluster.address],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    opened: dict = {}
    for line in driver.stdout:
        if line.startswith("{"):
            opened = json.loads(line)
            break
    assert opened.get("instance") in worker.pool, (tmp_path / "driver.err").read_text()[-3000:]
    wait_for(lambda: len(sitls_of(worker.data_dir)) == 2, 90, 0.2, "the handle's and the map item's SITLs")
    pids = sitls_of(worker.data_dir)
    assert sorted(held(worker)) == sorted(worker.pool)

    head.kill()  # the head machine lost: its GCS, raylet and workers SIGKILLed
    t0 = time.monotonic()
    wait_for(
        lambda: not [p for p in pids if os.path.exists(f"/proc/{p}")] and not held(worker),
        LOST_WITHIN_S + 30,
        0.2,
        "the worker's SITLs to stop and its leases to free",
    )
    took = time.monotonic() - t0
    assert took <= LOST_WITHIN_S, f"the SITLs and leases outlived the head by {took:.1f}s"
    lines = wait_for(lambda: said(cluster.root), 10, 0.5, "the nodes' logs to say the cluster was lost")
    assert any("session" in line and "released its lease" in line for line in lines), lines
    assert any("map item 0" in line and "released its lease" in line for line in lines), lines
