"""The dashboard's reader (``sitlpool.dashboard.Model``) on real files: a state file that
changes draws a track and an altitude series, the flight picture is drawn from them, a
state file whose writer is gone is stale, a removed one leaves the page, the pool's leases
(from a real holder process) appear without a full /proc scan, and readiness is derived
from the pre-arm bit, the EKF and a fix when the state file says them."""

from __future__ import annotations

import json
import os
import time

from conftest import hold_lease, wait_for
from sitlpool.dashboard import Model, vehicle_facts


def write(data_dir, n: int, writer_pid: int, **fields) -> None:
    d = data_dir / "sessions" / str(n)
    d.mkdir(parents=True, exist_ok=True)
    doc = {"schema": 1, "instance": n, "writer_pid": writer_pid, "writer_start_ticks": 0, "time": time.time()}
    doc.update(fields)
    tmp = d / ".tmp"
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, d / "state.json")


def test_track_altitudes_and_picture(env, data_dir, instances):
    n = instances[0]
    m = Model(full_period=60, logs_period=60)
    for i in range(5):
        write(data_dir, n, os.getpid(), mode="GUIDED" if i else "STABILIZE", armed=i > 1,
              relative_alt_m=2.0 * i, lat=-35.36 + i * 1e-4, lon=149.16, home=[-35.36, 149.16])  # fmt: skip
        assert m.poll()
        time.sleep(0.02)
    assert not m.poll() or m.version  # nothing new: cheap
    doc = m.document(tracks=True)
    [v] = doc["vehicles"]
    assert v["point"] == [-35.36 + 4e-4, 149.16] and len(v["track"]["points"]) == 5
    assert [a[1] for a in v["track"]["alts"]] == [0.0, 2.0, 4.0, 6.0, 8.0]
    kinds = [e[1] for e in m.tracks[n].events]
    assert kinds.count("mode") == 2 and "armed" in kinds
    png = m.picture(n)
    assert png.startswith(b"\x89PNG") and len(png) > 5000
    (data_dir / "sessions" / str(n) / "state.json").unlink()
    m.poll()
    assert m.document()["vehicles"] == []


def test_stale_writer_and_leases(env, data_dir, lock_dir, instances, procs):
    gone = procs.python("pass")
    gone.wait()
    write(data_dir, instances[1], gone.pid, mode="LAND")
    m = Model(full_period=60, logs_period=60)
    m.poll()
    [v] = m.document()["vehicles"]
    assert v["stale"] and "is gone" in v["stale_reason"]
    assert m.document()["pool"]["held"] == []
    hold_lease(procs, lock_dir, instances[2], "someone else")
    m._next_leases = 0  # the next poll reads the leases (once a second)
    m.poll()
    [h] = m.document()["pool"]["held"]
    assert h["instance"] == instances[2] and h["owner"] == "someone else"
    assert instances[2] not in m.document()["pool"]["free"]


def test_readiness_from_the_state_file():
    base = {"link": "connected", "gps_fix_type": 3, "home": [1, 2]}
    v = vehicle_facts(dict(base, prearm_ok=True, ekf_ok=True))
    assert v["ready_to_arm"] is True and v["not_ready_because"] == ""
    v = vehicle_facts(dict(base, prearm_ok=False, ekf_ok=False, prearm_texts=["PreArm: Need Position Estimate"]))
    assert v["ready_to_arm"] is False
    assert (
        v["not_ready_because"]
        == "pre-arm checks failing: PreArm: Need Position Estimate; the EKF is not ready to fly on GPS"
    )
    v = vehicle_facts(dict(base, booting=True, gps_fix_type=1))
    assert "booting" in v["not_ready_because"] and "no 3D GPS fix" in v["not_ready_because"]
    assert "ready_to_arm" not in vehicle_facts({"mode": "GUIDED"})  # the state file says nothing of it


def test_cluster_status_and_a_failing_reader(env):
    """With --ray the cluster's document is passed on as it comes; a reader that fails is one
    line under Problems and the rest of the page stays."""
    calls = []

    def cluster() -> dict:
        calls.append(1)
        if len(calls) > 1:
            raise ConnectionError("the head went away")
        return {"address": "10.0.0.1:6379", "nodes": [{"node_id": "abc", "host": "n1", "sitl": 4}], "held": []}

    m = Model(full_period=60, logs_period=60, fleet_status=cluster, fleet_period=0)

    def answered(n: int) -> dict | None:
        m.poll()
        return m.document() if len(calls) >= n and m.document()["fleet"] and not m._fleet_busy.is_set() else None

    assert wait_for(lambda: answered(1), 10, 0.05)["fleet"]["nodes"][0]["host"] == "n1"
    doc = wait_for(lambda: answered(2) and m.document()["errors"] and m.document(), 10, 0.05)
    assert doc["fleet"]["address"] == "10.0.0.1:6379"  # the last good answer stays
    assert doc["errors"] == ["Ray cluster: ConnectionError: the head went away"]
