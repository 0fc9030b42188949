"""A batch on a Ray fleet pays for Ray's worker start once per node, not once per slot: its
runs fly in one long-lived actor per node (``fleet.SlotPool``), so every run of a node comes
back from the same worker process; a slot another user holds is not waited for; and after
the batch nothing of it remains: no actor alive, its workers gone, every ``sitl`` slot free,
no lease held on any node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import wait_for

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.xdist_group("fleet_b")  # the second half of the fleet modules' shared cluster

STEPS = [
    {"tool": "set_mode", "mode": "GUIDED"},
    {"tool": "arm"},
    {"tool": "takeoff", "altitude_m": 3},
    {"tool": "wait_until", "condition": "altitude_above", "value": 2.5, "timeout_s": 60},
    {"tool": "land"},
    {"tool": "wait_until", "condition": "disarmed", "timeout_s": 90},
]


def held(node) -> list[int]:
    from sitlpool.leases import LeasePool

    return [h.instance for h in LeasePool(node.data_dir / "leases", node.pool, check=False).status()]


def slot_actors() -> list[dict]:
    """The node actors of every batch this cluster flew (Ray's actor table, dead ones too)."""
    from ray._private import state

    return [a for a in state.actors().values() if a["ActorClassName"].endswith("NodeSlots")]


def gone(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_batchs_runs_fly_in_one_worker_per_node_and_nothing_remains(fleet_cluster, env):
    from sitlpool.batch import batch_fly

    fleet = fleet_cluster.fleet
    other = fleet.open(speedup=20, label="another user")  # holds one slot through the batch
    try:
        out = batch_fly(
            {"A": {"params": {"WPNAV_SPEED_UP": 250}}, "B": {"params": {"WPNAV_SPEED_UP": 100}}},
            runs=4,
            steps=STEPS,
            metrics=["time_to_alt_s"],
            speedup=20,
            fleet=fleet,
            seed=3,
        )
        assert other.snapshot()["state"] == "running", "the batch disturbed a SITL it does not own"
    finally:
        other.close()
    assert out["where"] == "fleet" and out["state"] == "done", out
    assert out["done"] == 8 and out["failed"] == 0, out["failures"]
    bdir = Path(out["directory"])
    recs = [json.loads(x) for x in (bdir / "runs.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in recs) == list(range(8))  # each run once
    pids_by_node: dict[str, set[int]] = {}
    for r in recs:
        assert r["attempts"] == 1 and r["worker_pid"], r
        pids_by_node.setdefault(r["node_id"], set()).add(r["worker_pid"])
    # one worker process per node flew all of that node's runs (8 runs on 3 nodes: some node
    # flew 3 or more; a task per run runs them in a worker per slot)
    assert all(len(p) == 1 for p in pids_by_node.values()), pids_by_node
    workers = {p for ps in pids_by_node.values() for p in ps}
    assert len(workers) == len(pids_by_node)
    meta = json.loads((bdir / "batch.json").read_text())["slots"]
    # every node's free slots, the one held by another user left to it (not waited for)
    assert meta["nodes"] == meta["workers"] == 3 and meta["slots"] == 5, meta
    # nothing remains: the actors dead and their workers gone, the slots and leases free
    ours = [a for a in slot_actors() if a["Pid"] in workers]
    assert len(ours) == len(workers), ours  # the workers that flew the runs were the node actors
    wait_for(lambda: all(a["State"] == "DEAD" for a in slot_actors()), 30, 0.2, "the batch's node actors to be dead")
    wait_for(lambda: all(gone(p) for p in workers), 30, 0.2, "the node actors' worker processes to exit")
    wait_for(lambda: fleet.capacity() == (6, 6), 30, 0.2, "every sitl slot free")
    assert not [n.name for n in fleet_cluster.nodes if held(n)]
