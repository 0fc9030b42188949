"""A worker node killed mid-map (its process group SIGKILLed): its SITLs exit, its leases free,
its items run again elsewhere, and a handle on it says died. The victim is a fourth node this
module adds to the fleet modules' shared cluster, so the three the other modules count on live on."""

from __future__ import annotations

import os
import threading

import pytest

from conftest import release_blocks, reserve_blocks, wait_for

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.xdist_group("fleet")  # the fleet modules share one worker and one cluster (--dist loadgroup)

import test_fleet  # noqa: E402
from test_fleet import SPEEDUP, assert_says_died, gone, held, hop, sitls_of  # noqa: E402


@pytest.fixture
def cluster(fleet_cluster):
    from ray import cloudpickle

    block = reserve_blocks(1)
    fleet_cluster.add_node(block[0:2], 2)  # the victim: killed below, the shared three untouched
    wait_for(lambda: fleet_cluster.fleet.capacity()[0] == 8, 60, 0.2, "the fourth node's slots")
    cloudpickle.register_pickle_by_value(test_fleet)  # hop travels to the nodes
    try:
        yield fleet_cluster
    finally:
        cloudpickle.unregister_pickle_by_value(test_fleet)
        victim = fleet_cluster.nodes.pop()
        victim.stop()
        release_blocks(block)


@pytest.fixture
def fleet(cluster):
    yield cluster.fleet
    cluster.fleet.close_all()


def test_a_worker_node_killed_mid_map_reruns_its_items_elsewhere(cluster, fleet):
    victim = cluster.nodes[-1]
    # a RemoteSitl on the victim too (Ray places: open until one lands there)
    opened = []
    while not any(o.instance in victim.pool for o in opened) and len(opened) < 8:
        opened.append(fleet.open(speedup=SPEEDUP, label=f"on-victim-{len(opened)}"))
    on_victim = next(o for o in opened if o.instance in victim.pool)
    for o in opened:
        if o is not on_victim:
            o.close()
    items = [{"n": i, "alt": 3, "hover_s": 2.0} for i in range(8)]
    out: list = []
    runner = threading.Thread(target=lambda: out.append(fleet.map(hop, items, speedup=SPEEDUP, progress=False)))
    runner.start()
    pids = wait_for(lambda: sitls_of(victim), 60, 0.1, "a map item on the victim node")
    assert held(victim)
    victim.kill()  # SIGKILL to its process group: raylet and its agents; its workers follow
    # its SITLs exit with their parent (the worker), and the kernel freed its leases
    wait_for(
        lambda: (
            not [
                p
                for p in pids
                if os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
            ]
        ),
        30,
        0.2,
        "the dead node's SITLs to exit",
    )
    wait_for(lambda: not held(victim), 30, 0.2, "the dead node's leases to be free")
    assert gone(on_victim.pid)
    runner.join(240)
    assert not runner.is_alive(), "map hung after a node died"
    results = out[0]
    assert [r["n"] for r in results] == list(range(8)), results
    victim_pool = set(victim.pool)
    assert not [r for r in results if r["instance"] in victim_pool and r["pid"] in pids]
    # the handle on the dead node says died, and the slot Ray re-placed on a live node is given
    # back, with no call on the handle and no open: the fleet watches for dead nodes (before, the
    # phantom slot stayed until its idle owner called it, and other drivers were told "all in use")
    wait_for(lambda: on_victim.state == "died", 30, 0.2, "the handle on the dead node to say died")
    wait_for(lambda: fleet.capacity() == (6, 6), 30, 0.2, "the three live nodes' six slots to be free")
    assert "died" in on_victim.snapshot()["reason"]
    assert_says_died(on_victim)
    s = fleet.open(speedup=SPEEDUP, label="after-node-death")
    s.close()
    wait_for(lambda: fleet.capacity() == (6, 6), 30, 0.2, "the three live nodes' six slots to be free")
