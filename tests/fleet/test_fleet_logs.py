"""A log written on a Ray node is listed and read from the driver: a RemoteSitl's live log
while it runs and its kept logs after close (copied back in chunks), and the log ids of each
``map(..., keep_logs=True)`` item's flight."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from conftest import processes_under

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.xdist_group("fleet")  # the fleet modules share one worker and one cluster (--dist loadgroup)

REAL_LOG = Path(__file__).resolve().parents[3] / "shared" / "logs" / "copter-hop.BIN"
SPEEDUP = 10


def hop(sitl, item):
    sitl.arm_and_takeoff(3)
    sitl.link.land()
    sitl.wait_disarmed(60)
    return {"n": item, "instance": sitl.instance}


@pytest.fixture
def fleet(fleet_cluster, by_value):
    yield fleet_cluster.fleet
    fleet_cluster.fleet.close_all()


def test_a_remote_flights_logs_are_listed_and_fetched_from_the_driver(fleet_cluster, fleet, tmp_path):
    from pymavlink import mavutil

    from sitlpool.fleet import FlightResult
    from sitlpool.logs import LogStore

    s = fleet.open(speedup=SPEEDUP, label="log-hop")
    node = next(n for n in fleet_cluster.nodes if s.instance in n.pool)
    assert s.pid in processes_under(node.data_dir)
    logs_dir = Path(os.readlink(f"/proc/{s.pid}/cwd")) / "logs"
    assert s.set_mode("GUIDED")["ok"] and s.arm()["ok"]  # the built-in vehicle, as ArduCopter, logs from arming
    time.sleep(1)
    if not any(logs_dir.glob("*.BIN")):  # a built-in vehicle that writes no log yet: the log it would write
        logs_dir.mkdir(exist_ok=True)
        shutil.copy(REAL_LOG, logs_dir / "00000001.BIN")
        (logs_dir / "LASTLOG.TXT").write_text("1\r\n")
    [live] = [r for r in s.logs() if r["id"] == "live"]
    assert live["session"] == s.session_id and live["label"] == "log-hop" and live["node_id"] == s.node_id
    copy = s.fetch_log("live", tmp_path / "live")
    assert copy.name == live["name"] and copy.stat().st_size >= live["size"] > 0
    s.close()

    [kept] = [r for r in s.logs() if r["kind"] == "bin"]
    assert (kept["session"], kept["label"], kept["instance"]) == (s.session_id, "log-hop", s.instance)
    assert kept["node_id"] == s.node_id and kept["managed"]
    assert not any(logs_dir.glob("*.BIN")), "moved off the instance's directory"
    on_node = Path(LogStore(node.data_dir).get(kept["id"]).path)
    got = s.fetch_log(kept["id"], tmp_path / "kept")  # after close: a small task on that node
    assert got.name == f"{kept['id']}.BIN" and got.read_bytes() == on_node.read_bytes()
    assert not list((tmp_path / "kept").glob(".*")), "no partial copy left"

    # map(..., keep_logs=True): each item's flight's logs (its telemetry at least), by node
    [r] = fleet.map(hop, [7], speedup=SPEEDUP, progress=False, keep_logs=True)
    assert isinstance(r, FlightResult) and r.result == {"n": 7, "instance": r.instance}
    assert r.node_id and r.host and r.log_ids == [x["id"] for x in r.logs]
    assert all(x["label"] == "map" and x["extra"]["fleet_item"] == 0 for x in r.logs)
    tlog_id = next(x["id"] for x in r.logs if x["kind"] == "tlog")
    path = fleet.fetch_log(r.node_id, tlog_id, tmp_path / "map")
    m = mavutil.mavlink_connection(str(path))
    types = set()
    while (msg := m.recv_match()) is not None:
        types.add(msg.get_type())
    assert {"HEARTBEAT", "GLOBAL_POSITION_INT", "COMMAND_LONG", "COMMAND_ACK"} <= types
