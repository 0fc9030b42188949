"""A batch on the shared 3-node loopback Ray cluster: each run one Fleet.map item on
whichever node has room, the variant's parameters set as its first step, metrics read on
the node from the log it wrote; every run comes back once and no slot is left held."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.xdist_group("fleet")  # the fleet modules share one worker and one cluster (--dist loadgroup)

STEPS = [
    {"tool": "set_mode", "mode": "GUIDED"},
    {"tool": "arm"},
    {"tool": "takeoff", "altitude_m": 5},
    {"tool": "wait_until", "condition": "altitude_above", "value": 4.5, "timeout_s": 60},
    {"tool": "land"},
    {"tool": "wait_until", "condition": "disarmed", "timeout_s": 90},
]


def test_a_batch_on_a_ray_fleet(fleet_cluster, env):
    from sitlpool.batch import batch_compare, batch_fly

    fleet = fleet_cluster.fleet
    out = batch_fly(
        {"A": {"params": {"WPNAV_SPEED_UP": 250}}, "B": {"params": {"WPNAV_SPEED_UP": 100}}},
        runs=2,
        steps=STEPS,
        metrics=["time_to_alt_s"],
        speedup=20,
        fleet=fleet,
    )
    assert out["where"] == "fleet" and out["state"] == "done", out
    assert out["done"] == 4 and out["failed"] == 0, out["failures"]
    meta = json.loads((Path(out["directory"]) / "batch.json").read_text())
    # one actor per node held its slots: a worker started once per node, not once per slot
    assert meta["slots"]["slots"] == out["concurrency"] and meta["slots"]["workers"] == meta["slots"]["nodes"], meta
    c = batch_compare(out["batch_id"], picture=False)
    t = c["metrics"]["time_to_alt_s"]
    assert t["A"]["n"] == 2 and t["B"]["n"] == 2 and t["B"]["mean"] > t["A"]["mean"] * 1.2
    deadline = time.monotonic() + 20
    while fleet.capacity()[1] < fleet.capacity()[0] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert fleet.capacity()[1] == fleet.capacity()[0]  # every slot free again


def test_binary_variants_are_refused_on_a_fleet(fleet_cluster, env):
    from sitlpool.batch import BatchError, batch_fly

    with pytest.raises(BatchError, match="cannot be sent to a Ray fleet"):
        batch_fly({"A": {}, "B": {"binary": "/bin/true"}}, 1, STEPS, fleet=fleet_cluster.fleet)
