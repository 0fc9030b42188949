"""``sitlpool fly FILE --ray ADDRESS``: a step program flown on a node of a Ray cluster, the steps
run there beside the SITL (as ``fly_steps`` through ``serve --ray``); the result document
names the node's logs, the recipe is written on this machine, and nothing stays on the node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import wait_for

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.xdist_group("fleet")  # the fleet modules share one worker and one cluster (--dist loadgroup)

from test_fleet_batch_cli import run_cli  # noqa: E402

HOP = [
    {"tool": "wait_until", "condition": "ready_to_arm", "timeout_s": 60},
    {"tool": "arm"},
    {"tool": "takeoff", "altitude_m": 5},
    {"tool": "wait_until", "condition": "altitude_above", "value": 4.7, "timeout_s": 60},
    {"tool": "land"},
    {"tool": "wait_until", "condition": "disarmed", "timeout_s": 90},
    {"hold_s": 1},
]


def test_sitlpool_fly_ray_runs_the_program_on_a_node(fleet_cluster, env, tmp_path):
    prog = tmp_path / "hop.json"
    prog.write_text(json.dumps(HOP))
    free = fleet_cluster.fleet.capacity()[1]
    r, _ = run_cli(env, "fly", str(prog), "--ray", fleet_cluster.address, "--speedup", "10", "--json", timeout=240)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    doc = json.loads(r.stdout)
    assert doc["ok"] and doc["steps_done"] == len(HOP), doc.get("error")
    assert all(o["sim_time_end_s"] >= o["sim_time_start_s"] for o in doc["outcomes"]), doc["outcomes"]
    nodes = {n["node_id"] for n in fleet_cluster.fleet.nodes()}
    bins = [lg for lg in doc["logs"] if lg["kind"] == "bin"]
    assert bins and bins[0]["node_id"] in nodes, doc["logs"]  # kept on the node that flew it
    assert any(str(n.data_dir) in bins[0]["path"] for n in fleet_cluster.nodes), bins[0]["path"]
    recipe = json.loads(Path(doc["recipe"]).read_text())  # written here, on the driver
    assert Path(doc["recipe"]).is_relative_to(Path(env["SITLPOOL_DATA_DIR"])), doc["recipe"]
    assert recipe["speedup"] == 10 and recipe["steps"] == HOP, recipe
    wait_for(lambda: fleet_cluster.fleet.capacity()[1] == free, 60, 0.2, "the node's slot free again")
