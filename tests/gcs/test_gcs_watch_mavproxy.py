"""MAVProxy watching a session's vehicle through sitlpool's link (``Forwarder``, what
``sitlpool watch`` and ``open_sitl(watch=...)`` run): it connects on UDP as to any vehicle,
downloads the parameters and the mission (answered by sitlpool), sees the agent's hop live,
and its ``mode LAND`` is refused and explained, while the agent's flight completes."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import wait_for
from sitlpool.mavlink.forward import Forwarder
from sitlpool.mavlink.recorder import recorder_for
from sitlpool.sessions import Sessions

MAVPROXY = shutil.which("mavproxy.py", path=str(Path(sys.executable).parent)) or shutil.which("mavproxy.py")
pytestmark = pytest.mark.skipif(MAVPROXY is None, reason="mavproxy.py not installed (pip install MAVProxy)")


class MavProxyWatcher:
    """mavproxy.py with ``--master=udp:127.0.0.1:PORT`` (it listens there), in a temp dir."""

    def __init__(self, port: int, workdir: Path):
        workdir.mkdir(parents=True, exist_ok=True)
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [MAVPROXY, f"--master=udp:127.0.0.1:{port}", f"--state-basedir={workdir}", "--no-state", "--streamrate=1"],
            cwd=workdir,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env={**os.environ, "HOME": str(workdir)},
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())

    def send(self, cmd: str) -> int:
        n = len(self.lines)
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return n

    def wait_line(self, pattern: str, timeout: float, since: int = 0):
        rx = re.compile(pattern)

        def hit():
            return next((m for line in self.lines[since:] if (m := rx.search(line))), None)

        try:
            return wait_for(hit, timeout, interval=0.05, what=f"MAVProxy to print {pattern!r}")
        except AssertionError:
            raise AssertionError(f"MAVProxy never printed {pattern!r}; its last lines: {self.lines[-15:]}") from None

    def close(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(10)
        self.proc.stdin.close()
        self.proc.stdout.close()


@pytest.fixture
def session(env, vehicle_binary, monkeypatch):
    if vehicle_binary is not None:
        monkeypatch.setenv("SITLPOOL_SITL_BINARY", str(vehicle_binary))
    sessions = Sessions()
    sessions.start()
    s = sessions.open(speedup=5)
    yield s
    sessions.close_all()


def test_mavproxy_watches_a_hop_read_only_and_the_agent_never_notices(session, tmp_path):
    link, flight = session.link, session.flight
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fw = Forwarder(link, [f"udp:127.0.0.1:{port}"])
    mp = MavProxyWatcher(port, tmp_path / "mavproxy")
    try:
        mp.wait_line(r"Detected vehicle 1:1", 30)
        n = int(mp.wait_line(r"Received (\d+) parameters", 90)[1])  # MAVLink FTP refused: by PARAM_REQUEST_LIST
        assert n > 1000
        t0 = time.monotonic()
        since = mp.send("mode LAND")
        mp.wait_line(r"DO_SET_MODE: DENIED|SET_MODE", 10, since)
        mp.wait_line(r"sitlpool: read-only watch", 10, since)
        since = mp.send("param show RTL_ALT")
        assert float(mp.wait_line(r"RTL_ALT\s+(\S+)", 10, since)[1]) == link.get_param("RTL_ALT")
        since = mp.send("wp list")
        mp.wait_line(r"Requesting [01] waypoints", 10, since)  # home at most: nobody uploaded a mission
        since = len(mp.lines)
        flight.arm_and_takeoff(5)  # the agent's hop, seen live by MAVProxy
        mp.wait_line(r"ARMED", 30, since)
        mp.wait_line(r"GUIDED>", 30, since)
        wait_for(lambda: (link.vehicle.rel_alt or 0) >= flight.reached(5), 60, what="the agent's takeoff")
        t_land = time.monotonic()
        flight.land()
        mp.wait_line(r"Mode LAND|LAND>", 30, since)
        wait_for(lambda: not link.vehicle.armed, 120, what="the agent's landing")
        mp.wait_line(r"DISARMED", 30, since)
        modes = [e[2] for e in recorder_for(link).events_between(t0, t_land) if e[1] == "mode"]
        assert "LAND" not in modes, f"MAVProxy's read-only mode change went through: {modes}"
        assert fw.info()["refused"] >= 1 and fw.info()["dropped"] == 0
    finally:
        mp.close()
        fw.close()
