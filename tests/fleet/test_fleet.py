"""Fleets on Ray: a real 3-node Ray cluster on this machine (loopback), each node with its
own pool and data dir, SITLs placed by Ray and leased by each node's flock leases."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import listening, processes_under, start_sim, wait_for

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.xdist_group("fleet")  # the fleet modules share one worker and one cluster (--dist loadgroup)

from ray_cluster import RayCluster  # noqa: E402

SPEEDUP = 10  # the vehicle disarms DISARM_DELAY (10 s sim) after arming on the ground: 1 s wall leaves room on a loaded machine


# ---- scenarios, shipped to the nodes by value (as a user's script would be) ----------------


def hop(sitl, item):
    """The pytest plugin's helpers on the node's local handle: up to a few metres, land."""
    sitl.arm_and_takeoff(item.get("alt", 4))
    top = sitl.vehicle.rel_alt
    if item.get("hover_s"):
        time.sleep(item["hover_s"])
    if item.get("boom"):
        raise AssertionError(f"boom at {top:.1f} m")
    sitl.link.land()
    sitl.wait_disarmed(60)
    return {"n": item["n"], "instance": sitl.instance, "top_m": round(top, 1), "pid": sitl.pid}


def fly_hop(s) -> dict:
    """A hop through a RemoteSitl, with the MCP tools' calls."""
    assert s.set_mode("GUIDED")["ok"]
    assert s.arm()["ok"]
    assert s.takeoff(4)["ok"]
    up = s.wait_until("altitude_above", 3.5, 30)
    assert up["result"] == "met", up
    assert s.land()["ok"]
    down = s.wait_until("disarmed", None, 50)
    assert down["result"] == "met", down
    return up["snapshot"]


# ---- the cluster -------------------------------------------------------------------------


@pytest.fixture
def cluster(fleet_cluster, by_value):
    return fleet_cluster


def node_of(c: RayCluster, pool_instance: int):
    return next(n for n in c.nodes if pool_instance in n.pool)


def sitls_of(node) -> list[int]:
    """The SITL processes running in a node's data dir (their cwd is sessions/<n>/)."""
    return [p for p in processes_under(node.data_dir) if "sitlpool.sim" in open(f"/proc/{p}/cmdline").read()]


def held(node) -> list[int]:
    from sitlpool.leases import LeasePool

    return [h.instance for h in LeasePool(node.data_dir / "leases", node.pool, check=False).status()]


@pytest.fixture
def fleet(cluster):
    yield cluster.fleet
    cluster.fleet.close_all()
    for n in cluster.nodes:
        if n.alive:
            wait_for(lambda: not sitls_of(n) and not held(n), 20, 0.2, f"node {n.name}'s SITLs to stop")


# ---- tests -------------------------------------------------------------------------------


def test_ray_resources_is_the_pool_size(monkeypatch):
    from sitlpool.fleet.cli import ray_resources_json

    monkeypatch.setenv("SITLPOOL_POOL", "40-45,50")
    assert json.loads(ray_resources_json()) == {"sitl": 7}


def test_importing_sitlpool_never_imports_ray():
    code = (
        "import sys, sitlpool, sitlpool.fleet, sitlpool.fleet.cli; from sitlpool import cli; "
        "assert 'ray' not in sys.modules, 'ray imported'; print('ok')"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "ok", r.stderr


def test_six_open_two_per_node_fly_and_a_seventh_waits(cluster, fleet):
    from sitlpool.fleet import NoRoom

    with ThreadPoolExecutor(6) as ex:
        sitls = list(ex.map(lambda i: fleet.open(speedup=SPEEDUP, label=f"six-{i}"), range(6)))
    # Ray placed them on every node, two per node, each on an instance of that node's pool
    per_node = {}
    for s in sitls:
        per_node.setdefault(s.node_id, []).append(s)
        node = node_of(cluster, s.instance)
        assert s.host == "127.0.0.1"
        assert s.endpoint("serial1") == f"tcp:127.0.0.1:{s.ports.serial1}"
        assert s.instance in held(node)
    assert sorted(len(v) for v in per_node.values()) == [2, 2, 2]
    assert len({s.instance for s in sitls}) == 6

    # status --ray: every node's leases, the node in each row
    from sitlpool.fleet.cli import status_main

    out = status_main(["--ray", cluster.address, "--json"])
    doc = json.loads(out)
    assert len(doc["nodes"]) == 3 and all("error" not in n for n in doc["nodes"])
    rows = {(r["node_id"], r["instance"]): r for r in doc["held"]}
    for s in sitls:
        r = rows[(s.node_id, s.instance)]
        assert r["owner"] == f"sitlpool session {s.session_id} ({s.label})"
        assert r["host"] == "127.0.0.1"
    assert len(doc["held"]) == 6
    table = status_main(["--ray", cluster.address])
    assert all(s.node_id[:8] in table for s in sitls)

    # a seventh: refused at once when asked not to wait...
    with pytest.raises(NoRoom, match="no node of the cluster had a free sitl slot at once"):
        fleet.open(speedup=SPEEDUP, wait_s=0)
    # ... and placed as soon as a slot frees when it waits
    got = []
    waiter = threading.Thread(
        target=lambda: got.append(fleet.open(speedup=SPEEDUP, label="seventh", wait_s=120)), daemon=True
    )
    waiter.start()
    time.sleep(2)
    assert not got, "the seventh SITL started while every slot was taken"

    # two of them fly (one per node of two nodes: flying is the same code on each), the others answer
    flown = [per_node[k][0] for k in list(per_node)[:2]]
    with ThreadPoolExecutor(2) as ex:
        snaps = list(ex.map(fly_hop, flown))
    for s, snap in zip(flown, snaps):
        assert snap["instance"] == s.instance and snap["node_id"] == s.node_id
        assert snap["vehicle"]["relative_alt_m"] >= 3.5
    for s in sitls:
        snap = s.snapshot()
        assert snap["state"] == "running" and (snap["instance"], snap["node_id"]) == (s.instance, s.node_id)
    first = sitls[0]
    assert first.get_param("RTL_ALT") > 0
    assert first.set_param("RTL_ALT", 2000) == 2000
    first.close()
    assert first.status.success and first.state == "closed"
    waiter.join(60)
    assert got and got[0].node_id == first.node_id
    assert fly_hop(got[0])["vehicle"]["relative_alt_m"] >= 3.5


def test_an_instance_taken_outside_sitlpool_is_skipped(cluster, fleet, procs, tmp_path):
    from sitlpool.fleet import NoRoom
    from sitlpool.instances import ports

    head = cluster.nodes[0]
    outside_n = head.pool[0]
    outside = start_sim(procs, tmp_path / "outside", outside_n, "--speedup", "5")  # no lease: someone else's
    wait_for(lambda: listening(ports(outside_n).serial0), 10, 0.05, "the outside SITL")
    with ThreadPoolExecutor(5) as ex:
        sitls = list(ex.map(lambda i: fleet.open(speedup=SPEEDUP, label=f"skip-{i}"), range(5)))
    assert outside_n not in {s.instance for s in sitls}
    assert sum(s.instance in head.pool for s in sitls) == 1
    # Ray still counts a free slot on the head: its lease refuses, and no other node has room
    wait_for(lambda: fleet.capacity()[1] >= 1, 20, 0.2, "Ray to count the head's last slot free")
    with pytest.raises(NoRoom, match="refused"):
        fleet.open(speedup=SPEEDUP, wait_s=0)
    assert outside.poll() is None, "the outside SITL was disturbed"
    assert outside_n not in held(head)


def test_a_launch_that_fails_on_the_node_raises_its_own_error(cluster, fleet):
    """What the node refuses at launch reaches the caller of open as sitlpool's own error
    (the node's words, not a dead actor), the actor is gone and its slot free again."""
    from sitlpool.errors import SitlpoolError
    from sitlpool.fleet import FleetError

    with pytest.raises(SitlpoolError, match="speedup 0 is out of range") as e:
        fleet.open(speedup=0)
    assert not isinstance(e.value, FleetError)  # the node's own words, not "the actor died"
    with pytest.raises(SitlpoolError, match="home"):
        fleet.open(speedup=SPEEDUP, home="nowhere")
    wait_for(lambda: fleet.capacity()[1] == 6, 20, 0.2, "Ray to count every slot free again")
    assert not any(held(n) for n in cluster.nodes)
    s = fleet.open(speedup=SPEEDUP, label="after-failures")
    assert s.snapshot()["state"] == "running"


def test_the_actor_runs_on_its_nodes_settings_read_by_the_fleet(cluster, fleet):
    """Each node's settings are read once by a task on that node (pydantic-settings, in the
    node's environment) and handed to the actors placed there, whose fresh processes then do
    not import pydantic-settings: what they lease and where they write is still the node's."""
    wait_for(lambda: len(fleet._node_settings()) == 3, 30, 0.2, "every node's settings to be read")
    s = fleet.open(speedup=SPEEDUP, label="node-settings")
    kind, imported, data_dir, pool = ray.get(
        s._actor.__ray_call__.remote(
            lambda a: (
                type(a.sessions.settings).__name__,
                "pydantic_settings" in sys.modules,
                str(a.sessions.settings.data_dir),
                list(a.sessions.settings.pool),
            )
        )
    )
    node = node_of(cluster, s.instance)
    assert (kind, imported) == ("ValidatedSettings", False)
    assert (data_dir, pool) == (str(node.data_dir), node.pool)
    assert held(node) == [s.instance] and sitls_of(node)
    assert s.snapshot()["state"] == "running"
    # a node whose settings are not in (joined since, or bad) is left to read its own
    fleet._settings.clear()
    other = fleet.open(speedup=SPEEDUP, label="reads-its-own")
    kind, data_dir = ray.get(
        other._actor.__ray_call__.remote(
            lambda a: (type(a.sessions.settings).__name__, str(a.sessions.settings.data_dir))
        )
    )
    assert kind == "Settings" and data_dir == str(node_of(cluster, other.instance).data_dir)
    fleet._settings_total = 0  # read every node again, for the tests after this one
    fleet._read_settings(fleet.capacity()[0])


def ppid_of(pid: int) -> int:
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])


def gone(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def assert_says_died(s) -> None:
    """Every call on the handle of a lost actor or node says died, with Ray's reason."""
    from sitlpool.fleet.errors import SitlDied

    snap = s.snapshot()
    assert snap["state"] == "died" and snap["reason"].startswith("died: ") and s.label in snap["reason"], snap
    assert s.wait_until("altitude_above", 5, timeout_s=30)["result"] == "died"
    for call in (
        s.arm,
        lambda: s.set_mode("GUIDED"),
        lambda: s.takeoff(5),
        s.land,
        s.rtl,
        lambda: s.get_param("RTL_ALT"),
        lambda: s.set_param("RTL_ALT", 1500),
    ):
        with pytest.raises(SitlDied, match=r"^died: .*its lease went with its processes"):
            call()
    assert s.state == "died" and s.dead and not s.alive
    assert s.status is not None and not s.status.success and s.status.reason.startswith("died: ")
    s.close()  # harmless after a death
    assert s.state == "died"


def test_an_actor_that_dies_makes_every_call_say_died(cluster, fleet):
    """The actor's worker process SIGKILLed (an out-of-memory kill, say): its SITL exits with
    it, the kernel frees the lease, Ray frees the slot, and every call says died at once."""
    s = fleet.open(speedup=SPEEDUP, label="doomed")
    node = node_of(cluster, s.instance)
    worker = ppid_of(s.pid)  # the actor's worker process is the SITL's parent
    assert "ray::" in open(f"/proc/{worker}/cmdline").read().replace("\0", " ")
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: gone(s.pid), 30, 0.1, "the SITL to exit with its actor")
    wait_for(lambda: s.instance not in held(node), 30, 0.1, "the lease to be freed with the actor")
    # with no call on the handle (an idle owner), its slot is given back and it says died: the
    # fleet pings its actors (before, the slot stayed reserved until the owner's next call)
    wait_for(lambda: fleet.capacity()[1] == 6, 30, 0.2, "the dead actor's slot free with no call on its handle")
    assert s.state == "died"
    assert_says_died(s)
    assert "doomed" in s.snapshot()["reason"] and "actor" in s.snapshot()["reason"].lower()
    again = fleet.open(speedup=SPEEDUP, label="after-death")
    assert again.snapshot()["state"] == "running"


def test_map_returns_every_result_in_item_order(cluster, fleet):
    items = [{"n": i, "alt": 3 + i % 3} for i in range(8)]  # more than the 6 slots: some wait for a free one
    t0 = time.monotonic()
    results = fleet.map(hop, items, speedup=SPEEDUP, progress=False)
    from sitlpool.fleet import ItemFailed

    assert not [r for r in results if isinstance(r, ItemFailed)], [str(r) for r in results if isinstance(r, ItemFailed)]
    assert [r["n"] for r in results] == list(range(8)), results
    assert all(r["top_m"] >= items[r["n"]]["alt"] - 0.6 for r in results)
    pools = {n for node in cluster.nodes for n in node.pool}
    assert {r["instance"] for r in results} <= pools
    print(f"map of 8 hops: {time.monotonic() - t0:.1f}s")


def test_a_failing_item_is_its_result_with_texts_and_stderr(cluster, fleet):
    from sitlpool.fleet import ItemFailed

    results = fleet.map(hop, [{"n": 0}, {"n": 1, "boom": True}], speedup=SPEEDUP, progress=False)
    assert results[0]["n"] == 0
    err = results[1]
    assert isinstance(err, ItemFailed) and err.index == 1
    assert err.type == "AssertionError" and "boom at" in err.error
    assert any("Arm" in t or "Takeoff" in t or "GUIDED" in t or t for t in err.texts) and err.texts
    assert "SERIAL0" in err.stderr_tail or "bind port" in err.stderr_tail, err.stderr_tail
    assert "hop" in err.traceback


def test_serve_backend_flies_a_hop_on_the_cluster(cluster, fleet):
    """The sessions backend ``sitlpool serve --ray`` uses: open_sitl lands on the cluster and
    every flight tool answers through it."""
    from sitlpool.fleet.serve import RaySessions
    from sitlpool.sessions import SessionLike

    sessions = RaySessions(cluster.address)
    s = sessions.open(label="mcp-hop", speedup=SPEEDUP)
    info = s.info()
    assert info["connect"]["serial1"] == f"tcp:127.0.0.1:{ports_of(info['instance']).serial1}"
    assert info["node_id"] in {n["node_id"] for n in fleet.nodes()}
    assert isinstance(s, SessionLike)  # the session contract the MCP tools use
    sessions.get(s.id).set_mode("GUIDED")
    sessions.get(s.id).arm()
    sessions.get(s.id).takeoff(4)
    assert sessions.get(s.id).wait_until("altitude_above", 3.5, 30)["result"] == "met"
    assert sessions.get(s.id).snapshot()["vehicle"]["armed"] is True
    assert sessions.get(s.id).link.get_param("RTL_ALT") > 0
    sessions.get(s.id).land()
    assert sessions.get(s.id).wait_until("disarmed", None, 50)["result"] == "met"
    closed = sessions.close(s.id)
    assert closed["closed"].startswith("SITL stopped")
    sessions.close_all()


def test_serve_ray_flies_a_hop_through_the_mcp_client(cluster, fleet, tmp_path):
    """`sitlpool serve --ray ADDRESS` as an agent uses it: the MCP client over stdio, open_sitl
    placed on the cluster from a preset of the server's machine (its parameter file carried
    to the node by content) and paced (between tool calls the node holds the vehicle at the
    paced speedup: a ground station on its serial1 reads SIM_SPEEDUP; during a call at the
    session's), the flight tools unchanged, close_sitl frees the node's lease."""
    import anyio

    from conftest import Gcs
    from mcp_client import server
    from sitlpool.world import PACE_SPEEDUP

    (tmp_path / "frame.parm").write_text("WPNAV_SPEED,750\n")
    (tmp_path / "presets.toml").write_text(f"[mcp-fleet]\nspeedup = {SPEEDUP}\nparams = {{ RTL_ALT = 1700 }}\n")
    env = dict(
        os.environ,
        SITLPOOL_DATA_DIR=str(tmp_path / "data"),
        SITLPOOL_POOL="1-2",
        SITLPOOL_PRESETS=str(tmp_path / "presets.toml"),
    )

    def speedup_seen(gcs: Gcs) -> float:
        gcs.m.mav.param_request_read_send(1, 1, b"SIM_SPEEDUP", -1)
        m = gcs.recv("PARAM_VALUE", 5, lambda m: m.param_id.rstrip("\x00") == "SIM_SPEEDUP")
        return m.param_value if m is not None else -1.0

    async def agent():
        async with server(env, args=["--ray", cluster.address]) as call:
            s = await call("open_sitl", preset="mcp-fleet", param_files=["frame.parm"], pace=True, label="mcp-ray-hop")
            assert s["node_id"] in {n["node_id"] for n in fleet.nodes()}
            assert any(s["instance"] in n.pool for n in cluster.nodes)
            assert s["config"]["params"]["RTL_ALT"] == 1700 and s["config"]["params"]["WPNAV_SPEED"] == 750
            assert s["config"]["param_files"] == [str(tmp_path / "frame.parm")]  # the server's name for it
            assert s["pace"]["between_calls_speedup"] == PACE_SPEEDUP and s["pace"]["during_calls_speedup"] == SPEEDUP
            gcs = await anyio.to_thread.run_sync(Gcs, s["ports"]["serial1"])
            try:
                await anyio.to_thread.run_sync(
                    lambda: wait_for(lambda: abs(speedup_seen(gcs) - PACE_SPEEDUP) < 1e-3, 30, 0.2, "paced")
                )
                during = await call("get_param", session_id=s["session_id"], name="SIM_SPEEDUP")
                assert during["value"] == SPEEDUP, during  # the call waited for the node to speed it up
            finally:
                gcs.close()
            await call("set_mode", session_id=s["session_id"], mode="GUIDED")
            await call("arm", session_id=s["session_id"])
            await call("takeoff", session_id=s["session_id"], altitude_m=4)
            w = await call(
                "wait_until", session_id=s["session_id"], condition="altitude_above", value=3.5, timeout_s=30
            )
            assert w["result"] == "met", w
            await call("land", session_id=s["session_id"])
            w = await call("wait_until", session_id=s["session_id"], condition="disarmed", timeout_s=50)
            assert w["result"] == "met", w
            closed = await call("close_sitl", session_id=s["session_id"])
            assert closed["closed"].startswith("SITL stopped")
            return s["instance"]

    n = anyio.run(agent)
    node = next(nd for nd in cluster.nodes if n in nd.pool)
    wait_for(lambda: n not in held(node), 20, 0.2, f"instance {n}'s lease on {node.name} to be released")


def ports_of(n):
    from sitlpool.instances import ports

    return ports(n)


SCENARIOS = """
def items():
    return [{"alt": 3}, {"alt": 4, "boom": True}]

def run(sitl, item):
    sitl.arm_and_takeoff(item["alt"])
    if item.get("boom"):
        raise RuntimeError("scenario refused to land")
    sitl.link.land()
    sitl.wait_disarmed(60)
    return {"instance": sitl.instance}
"""


def test_batch_runs_a_scenario_file_as_json_lines(cluster, fleet, tmp_path, capsys):
    import argparse

    from sitlpool.fleet.cli import add_subcommands

    (tmp_path / "scenarios.py").write_text(SCENARIOS)
    p = argparse.ArgumentParser()
    add_subcommands(p.add_subparsers())
    a = p.parse_args(["batch", str(tmp_path / "scenarios.py"), "--ray", cluster.address, "--speedup", str(SPEEDUP)])
    code = a.fn(a)
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert code == 1  # one item failed
    assert [x["index"] for x in lines] == [0, 1]
    assert lines[0]["ok"] and lines[0]["item"] == {"alt": 3} and "instance" in lines[0]["result"]
    assert not lines[1]["ok"] and lines[1]["type"] == "RuntimeError" and "refused to land" in lines[1]["message"]
    assert lines[1]["texts"] and lines[1]["host"] == "127.0.0.1"


def test_pytest_backend_gives_the_plugin_helpers_a_remote_sitl(cluster, fleet):
    """What ``pytest --sitl-ray`` gives sitl_factory: the plugin's Sitl over a RemoteSitl."""
    from sitlpool.fleet.testing import manager
    from sitlpool.process.base import SitlHandle
    from sitlpool.pytest_plugin import Sitl

    m = manager(cluster.address)
    s = Sitl(m.start("test_x-0", speedup=SPEEDUP, wait=60, owner="pytest test_x [sitl 0]"))
    assert isinstance(s.handle, SitlHandle)  # the process-handle contract, as a local handle
    try:
        s.arm_and_takeoff(4)
        assert s.vehicle.rel_alt >= 3.5
        s.link.land()
        s.wait_disarmed(60)
        assert s.instance in {n for node in cluster.nodes for n in node.pool}
    finally:
        m.close_all()
    assert s.dead


def test_pytest_sitl_ray_option_puts_a_suites_sitls_on_the_cluster(cluster, fleet, pytester, env):
    """A user's suite run with `pytest --sitl-ray ADDRESS`: its `sitl` fixture comes from the fleet."""
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    pytester.makepyfile(
        test_on_cluster="""
def test_hop(sitl):
    sitl.arm_and_takeoff(4)
    assert sitl.vehicle.rel_alt >= 3.5
    sitl.link.land()
    sitl.wait_disarmed(60)
    print("ON INSTANCE", sitl.instance)
"""
    )
    r = pytester.runpytest_subprocess(
        "-p", "no:randomly", "-s", "--sitl-ray", cluster.address, "--sitl-speedup", str(SPEEDUP), timeout=240
    )
    r.assert_outcomes(passed=1)
    n = int(next(line.split()[-1] for line in r.outlines if "ON INSTANCE" in line))
    assert n in {i for node in cluster.nodes for i in node.pool}
