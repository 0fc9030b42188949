"""A link's telemetry log (.tlog): every message received and sent, timestamped as MAVProxy
writes them, readable by pymavlink's mavutil and by mavlogdump.py, live and after close."""

from __future__ import annotations

import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import start_sim, wait_for
from sitlpool.errors import MavlinkError
from sitlpool.instances import ports


@pytest.fixture
def vehicle(procs, tmp_path, instances):
    n = instances[0]
    start_sim(procs, tmp_path / "v", n, "--speedup", 5)
    from sitlpool.mavlink.link import VehicleLink

    links = []

    def connect(**kw):
        link = VehicleLink(f"tcp:127.0.0.1:{ports(n).serial0}", connect_timeout=10, **kw).start()
        links.append(link)
        assert link.wait_heartbeat(10), "no HEARTBEAT"
        return link

    yield connect
    for link in links:
        link.close()


def read_tlog(path: Path) -> list:
    from pymavlink import mavutil

    m = mavutil.mavlink_connection(str(path))
    out = []
    while True:
        msg = m.recv_match()
        if msg is None:
            return out
        out.append(msg)


def test_a_tlog_holds_what_was_received_and_sent(vehicle, tmp_path):
    path = tmp_path / "out" / "flight.tlog"
    t0 = time.time()
    link = vehicle(tlog=path)
    assert link.get_param("RTL_ALT") == 1500
    wait_for(lambda: link.autopilot_version is not None, 10, what="AUTOPILOT_VERSION")
    wait_for(lambda: path.stat().st_size > 0, 5, what="the live .tlog to be written")  # readable while it runs
    assert read_tlog(path), "a live .tlog reads"
    link.close()
    t1 = time.time()
    msgs = read_tlog(path)
    got = {(m.get_type(), m.get_srcSystem()) for m in msgs}
    assert ("HEARTBEAT", 1) in got and ("PARAM_VALUE", 1) in got, "received"
    assert ("HEARTBEAT", 255) in got and ("PARAM_REQUEST_READ", 255) in got, "sent"
    assert ("COMMAND_LONG", 255) in got and ("AUTOPILOT_VERSION", 1) in got, "the version request and its answer"
    assert all(t0 - 1 <= m._timestamp <= t1 + 1 for m in msgs)
    assert [m._timestamp for m in msgs] == sorted(m._timestamp for m in msgs)
    # the frame exactly as MAVProxy writes it: 8-byte big-endian microseconds, then the raw message
    raw = path.read_bytes()
    (us,) = struct.unpack(">Q", raw[:8])
    assert t0 - 1 <= us / 1e6 <= t1 + 1 and raw[8] in (0xFD, 0xFE)
    assert link.autopilot_version == "4.7.0-dev (90700977)"


def test_mavlogdump_reads_a_tlog(vehicle, tmp_path):
    path = tmp_path / "f.tlog"
    link = vehicle(tlog=path)
    link.get_param("RTL_ALT")
    link.close()
    tool = Path(sys.executable).parent / "mavlogdump.py"
    out = subprocess.run(
        [sys.executable, str(tool), "--types", "HEARTBEAT,PARAM_VALUE", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    lines = out.splitlines()
    assert any(ln.split()[2:3] == ["HEARTBEAT"] and "type : 2," in ln for ln in lines), "the quad's HEARTBEATs"
    assert any(ln.split()[2:3] == ["HEARTBEAT"] and "type : 6," in ln for ln in lines), "ours (a GCS's)"
    assert any("PARAM_VALUE" in ln and "RTL_ALT" in ln for ln in lines)


def test_no_tlog_unless_asked_and_an_unwritable_one_is_one_clear_line(vehicle, tmp_path):
    from sitlpool.mavlink.link import VehicleLink

    link = vehicle()
    assert link.tlog_path is None and link._tlog is None
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(MavlinkError) as e:
        VehicleLink("tcp:127.0.0.1:1", tlog=blocker / "t.tlog")
    assert str(e.value).startswith(f"cannot write the telemetry log {blocker / 't.tlog'}:")
    assert "\n" not in str(e.value)
