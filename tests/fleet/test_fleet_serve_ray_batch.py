"""``batch_fly`` through ``sitlpool serve --ray ADDRESS`` flies its runs on the cluster's nodes
(not on the server's machine), and ``batch_status``/``batch_compare`` answer as locally."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.xdist_group("fleet_b")  # a second worker and its own shared cluster (--dist loadgroup)

CLIMB = [
    {"tool": "wait_until", "condition": "ready_to_arm", "timeout_s": 60},
    {"tool": "arm"},
    {"tool": "takeoff", "altitude_m": 5},
    {"tool": "wait_until", "condition": "altitude_above", "value": 4.7, "timeout_s": 60},
]


def test_batch_fly_on_a_ray_server_flies_on_the_nodes(fleet_cluster, env):
    import anyio

    from mcp_client import server

    async def agent():
        async with server(env, args=["--ray", fleet_cluster.address]) as call:
            started = await call(
                "batch_fly",
                variants={"fast": {"params": {"WPNAV_SPEED_UP": 250}}, "slow": {"params": {"WPNAV_SPEED_UP": 100}}},
                runs=1,
                steps=CLIMB,
                metrics=["success", "time_to_alt_s"],
                speedup=10,
            )
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                st = await call("batch_status", batch_id=started["batch_id"])
                if st["state"] != "running":
                    break
                await anyio.sleep(1)
            compared = await call("batch_compare", batch_id=started["batch_id"])
            return st, compared

    st, compared = anyio.run(agent)
    assert st["state"] == "done" and st["where"] == "fleet", st
    d = Path(st["directory"])
    meta = json.loads((d / "batch.json").read_text())
    assert meta["where"] == "fleet", meta
    runs = [json.loads(x) for x in (d / "runs.jsonl").read_text().splitlines() if x.strip()]
    nodes = {n["node_id"] for n in fleet_cluster.fleet.nodes()}
    assert len(runs) == 2 and all(r["ok"] and r["node_id"] in nodes for r in runs), runs
    t = {r["variant"]: r["metrics"]["time_to_alt_s"] for r in runs}
    assert t["fast"] < t["slow"], t  # WPNAV_SPEED_UP 250 climbs faster than 100
    assert compared is not None
