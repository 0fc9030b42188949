"""Step programs through ``sitlpool serve --ray``: fly_steps runs the program on the node, next
to its SITL (``fleet.nodesteps``: timed on the vehicle's clock there), steps_status mirrors it,
the server keeps the node's log records and writes the recipe; repro(run_id) flies it again on
the cluster and compares the two logs (one machine: the nodes' paths are readable here; on
another machine they are fetched, ``serve.logs_here``); abort_steps stops a long hold on its
node and frees its ``sitl`` slot. The fleet modules' one loopback cluster (conftest's fleet_cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import wait_for

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.xdist_group("fleet")  # the fleet modules share one worker and one cluster (--dist loadgroup)

HOP = [
    {"tool": "set_mode", "mode": "GUIDED"},
    {"tool": "arm"},
    {"tool": "takeoff", "altitude_m": 5},
    {"tool": "wait_until", "condition": "altitude_above", "value": 4.7, "timeout_s": 60},
    {"hold_s": 3},
    {"tool": "land"},
    {"tool": "wait_until", "condition": "disarmed", "timeout_s": 60},
]


def test_steps_fly_on_the_node_repeat_exactly_and_abort_frees_the_slot(fleet_cluster, env, tmp_path):
    import anyio

    from mcp_client import server
    from sitlpool.fleet.serve import logs_here

    fleet = fleet_cluster.fleet
    nodes = {n["node_id"] for n in fleet.nodes()}

    async def done(call, run_id: str) -> dict:
        while True:
            st = await call("steps_status", run_id=run_id)
            if st["done"]:
                return st
            await anyio.sleep(0.2)

    async def agent() -> tuple[dict, dict, dict, dict]:
        async with server(env, args=["--ray", fleet_cluster.address]) as call:
            with anyio.fail_after(240):
                started = await call("fly_steps", steps=HOP, speedup=10, label="ray-steps")
                first = await done(call, started["run_id"])
                again = await call("repro", run_id=started["run_id"])
                hold = await call("fly_steps", steps=[{"hold_s": 3600}], speedup=10, label="ray-hold")
                while (await call("steps_status", run_id=hold["run_id"]))["current_step"] != 1:
                    await anyio.sleep(0.1)
                aborted = await call("abort_steps", run_id=hold["run_id"])
                held = await call("steps_status", run_id=hold["run_id"])
                assert aborted["aborted"] is True and held["done"], (aborted, held)
                second = await done(call, again["run_id"])
                return first, second, aborted, held

    first, second, aborted, held = anyio.run(agent)

    assert first["state"] == "done" and first["ok"] is True, first["error"]
    outs = first["outcomes"]
    assert [o["tool"] for o in outs] == ["set_mode", "arm", "takeoff", "wait_until", "hold_s", "land", "wait_until"]
    assert all(o["ok"] for o in outs), outs
    times = [t for o in outs for t in (o["sim_time_start_s"], o["sim_time_end_s"])]
    assert all(t is not None for t in times) and times == sorted(times), times  # the node's vehicle clock
    hold_s = outs[4]["sim_time_end_s"] - outs[4]["sim_time_start_s"]
    assert 3.0 <= hold_s < 4.0, outs[4]  # 3 sim seconds, ended at the first message after them
    assert outs[-1]["position"]["armed"] is False and first["sim_duration_s"] > 10, first
    bins = [lg for lg in first["logs"] if lg["kind"] == "bin"]
    assert bins and bins[0]["node_id"] in nodes and bins[0]["host"], first["logs"]  # the node's records
    assert first["log_ids"] == [lg["id"] for lg in first["logs"]]
    recipe = json.loads(Path(first["recipe"]).read_text())  # written by the server, under its own data dir
    assert Path(first["recipe"]).is_relative_to(Path(env["SITLPOOL_DATA_DIR"])), first["recipe"]
    assert recipe["steps"] == HOP and recipe["speedup"] == 10 and recipe["binary"]["builtin"], recipe
    assert recipe["binary"]["sha256"] and recipe["home_seen"]["lat"] is not None, recipe  # made on the node
    assert [t["sim_time_end_s"] for t in recipe["timeline"]] == [o["sim_time_end_s"] for o in outs]

    # the built-in vehicle repeats exactly, on the cluster as on one machine (the node closes the
    # SITL as the last step ends, so the logs end alike)
    assert second["ok"] is True and second["repro_of"] == first["run_id"], second["error"]
    c = second["comparison"]
    assert c["logs"]["differences"] == [], c["logs"]
    assert c["exact"] is True and c["same_binary"] is True, c
    assert c["logs"]["a"] == bins[0]["path"], c["logs"]  # the node's own file: this machine sees it

    # aborted during its hold, on the node: the session closed there and its slot given back
    assert aborted["state"] == held["state"] == "aborted", held
    assert held["outcomes"][0]["error"] == "aborted" and "aborted during step 1" in held["error"], held
    assert held["outcomes"][0]["sim_time_end_s"] < 3600, held["outcomes"]
    wait_for(lambda: fleet.capacity()[1] == fleet.capacity()[0], 30, 0.2, "every sitl slot free again")

    # on another machine the node's path is not here: the log is fetched from its node
    gone = "/nonexistent" + bins[0]["path"]
    elsewhere = [{**bins[0], "path": gone}, {**bins[0], "path": gone, "id": "20000101-000000-000000"}]
    got = logs_here(fleet, elsewhere, tmp_path)
    assert got[0]["fetched_from"] == gone and Path(got[0]["path"]).parent == tmp_path, got[0]
    assert Path(got[0]["path"]).read_bytes() == Path(bins[0]["path"]).read_bytes()
    assert "keeps no log" in got[1]["fetch_error"] and got[1]["path"] == gone, got[1]
