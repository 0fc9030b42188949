"""Logs written by real ArduPilot SITL (skipped without SITLPOOL_TEST_SITL_BINARY): an
ArduPlane with LOG_DISARMED=1 logs from boot; killed mid-write (SIGKILL, as a reaped SITL),
its log reads up to the cut, names a plane's modes, and the store keeps it whole."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

from conftest import wait_for  # tests/conftest.py (the shared helpers)
from sitlpool.instances import ports
from sitlpool.logs import LogReader, LogStore, fields, summary

ARDUPILOT = Path(__file__).resolve().parents[2].parent / "shared" / "ardupilot"


def fly_and_kill(binary: Path, model: str, defaults: list[Path], cwd: Path, instance: int, procs) -> Path:
    cwd.mkdir(parents=True)
    extra = cwd / "log.parm"
    extra.write_text("LOG_DISARMED 1\n")
    p = procs.popen(
        [
            str(binary),
            "--model",
            model,
            "-I",
            str(instance),
            "--speedup",
            "5",
            "--defaults",
            ",".join(str(d) for d in [*defaults, extra]),
        ],  # fmt: skip
        cwd=cwd,
        stdout=open(cwd / "out.txt", "wb"),
        stderr=open(cwd / "err.txt", "wb"),
    )
    port = ports(instance).serial0
    s = wait_for(lambda: _connect(port), timeout=60, what=f"SITL's serial0 on port {port}")
    log = cwd / "logs" / "00000001.BIN"
    try:
        wait_for(lambda: log.exists() and log.stat().st_size > 400_000, timeout=90, what="a log of 400 kB")
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # killed mid-write, as a reaped SITL
        p.wait(10)
        s.close()
    return log


def _connect(port: int):
    try:
        return socket.create_connection(("127.0.0.1", port), timeout=1)
    except OSError:
        return None


def test_real_arduplane_log_killed_mid_write(real_plane, instances, procs, data_dir):
    defaults = [ARDUPILOT / "Tools/autotest/default_params/plane.parm"]
    log = fly_and_kill(real_plane, "plane", [d for d in defaults if d.exists()], data_dir / "sitl", instances[0], procs)
    s = summary(log)
    assert s["vehicle"] == "ArduPlane" and s["firmware"].startswith("ArduPlane V")
    assert s["modes"] and s["modes"][0]["mode"] == "MANUAL"  # a plane's mode 0, not STABILIZE
    assert s["end"]["status"] in ("truncated", "complete") and s["end"]["last_time"] > 0
    assert s["phases"][0]["phase"] == "boot" and s["arming"] == []
    r = LogReader(log).describe()
    assert {"MODE", "PARM", "GPS", "BARO"} <= set(r["types"])
    assert fields(log, ["BARO.Alt"])["fields"]["BARO.Alt"]["count"] > 10
    size = log.stat().st_size
    (log.parent / "LASTLOG.TXT").exists()
    rec = LogStore(data_dir, 100).collect(log.parent, {"session": "plane", "model": "plane"})
    assert len(rec) == 1 and rec[0].size == size and not log.exists()
    assert summary(rec[0].path)["modes"] == s["modes"]
