"""A batch on a Ray cluster that loses a node mid-batch: the runs that were flying there are
flown again on the live nodes and each run is counted once (one record per run, every run a
success, none of them from the dead node). The cluster is this module's own (3 loopback
nodes, 2 sitl slots each): a node of the fleet modules' shared cluster must stay alive. The
batch is driven by ``sitlpool ab --ray`` in a child process, so this test process never joins
a Ray cluster (the fleet modules' one may be joined here)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from conftest import processes_under, release_blocks, reserve_blocks, wait_for

pytest.importorskip("ray")

STEPS = [
    {"tool": "set_mode", "mode": "GUIDED"},
    {"tool": "arm"},
    {"tool": "takeoff", "altitude_m": 5},
    {"tool": "wait_until", "condition": "altitude_above", "value": 4.5, "timeout_s": 60},
    {"hold_s": 10},
    {"tool": "land"},
    {"tool": "wait_until", "condition": "disarmed", "timeout_s": 90},
]


@pytest.fixture(scope="module")
def cluster():
    from ray_cluster import RayCluster

    blocks = reserve_blocks(3)
    c = RayCluster.start([blocks[0:2], blocks[6:8], blocks[12:14]], sitl_per_node=2, timeout=120)
    try:
        yield c
    finally:
        c.stop()
        release_blocks(blocks)


def sitls_on(node) -> list[int]:
    """The built-in vehicles running in the node's data dir (a SITL's cwd is its session dir)."""
    out = []
    for pid in processes_under(node.data_dir):
        try:
            if b"sitlpool.sim" in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(pid)
        except OSError:
            continue
    return out


def test_runs_lost_with_a_node_are_flown_elsewhere_and_counted_once(cluster, env, tmp_path, procs):
    victim = cluster.nodes[2]
    (tmp_path / "a.json").write_text(json.dumps({"WPNAV_SPEED_UP": 250}))
    (tmp_path / "b.json").write_text(json.dumps({"WPNAV_SPEED_UP": 100}))
    (tmp_path / "steps.json").write_text(json.dumps(STEPS))
    args = ["--a", "a.json", "--b", "b.json", "--steps", "steps.json", "--runs", "3", "--speedup", "20"]
    p = procs.popen(
        [sys.executable, "-m", "sitlpool", "ab", *args, "--metrics", "time_to_alt_s", "--json"]
        + ["--ray", cluster.address],
        cwd=tmp_path,
        env=env,
        stdout=open(tmp_path / "out.json", "w"),
        stderr=open(tmp_path / "err.txt", "w"),
    )
    pids = wait_for(lambda: sitls_on(victim), 120, 0.1, "a run of the batch flying on the victim node")
    victim.kill()  # SIGKILL to its process group: raylet and its agents; its workers follow
    wait_for(lambda: not [q for q in pids if os.path.exists(f"/proc/{q}")], 30, 0.2, "the dead node's SITLs to exit")
    assert p.wait(300) == 0, (tmp_path / "err.txt").read_text()[-2000:]

    (bdir,) = list((Path(env["SITLPOOL_DATA_DIR"]) / "batches").iterdir())
    lines = [json.loads(x) for x in (bdir / "runs.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in lines) == list(range(6)), lines  # each run once: no lost run, no double
    assert all(r["success"] for r in lines), [r.get("error") for r in lines]
    dead = str(victim.data_dir)
    assert not [r for r in lines if str(r.get("log_path") or "").startswith(dead)]  # none counted from the dead node
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["runs"] == {"A": 3, "B": 3} and not out["partial"]
    meta = json.loads((bdir / "batch.json").read_text())
    assert meta["state"] == "done" and meta["where"] == "fleet"
