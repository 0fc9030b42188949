"""MAVProxy (mavproxy.py from the package registry), driven through its command shell on stdin,
flies the built-in vehicle and real ArduCopter; the two records must match (issue 11 §3)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gcs_scenarios import Autotest, arducopter_vehicle, assert_same, builtin_vehicle, cases, check, offset, records  # noqa: F401

MAVPROXY = shutil.which("mavproxy.py", path=str(Path(sys.executable).parent)) or shutil.which("mavproxy.py")
pytestmark = [
    pytest.mark.skipif(MAVPROXY is None, reason="mavproxy.py not installed (pip install MAVProxy)"),
    pytest.mark.xdist_group("gcs_mavproxy"),
]  # one worker flies the module's vehicles (--dist loadgroup)

# MAVProxy handles every message in Python, with its modules: at the built-in vehicle's usual
# speedup (20) its replies to the mission protocol fall seconds behind on a loaded machine
SPEEDUP_OVERRIDE = {"builtin": 10}


class MavProxy:
    """mavproxy.py on a vehicle's SERIAL0, its shell fed through stdin, its output kept by line.
    It runs in a temp dir with --state-basedir there and --no-state: nothing lands in the checkout."""

    def __init__(self, port: int, workdir: Path, streamrate: int = 1):
        workdir.mkdir(parents=True, exist_ok=True)
        self.t0 = time.monotonic()
        self.lines: list[tuple[float, str]] = []
        self.proc = subprocess.Popen(
            [
                MAVPROXY,
                f"--master=tcp:127.0.0.1:{port}",
                f"--state-basedir={workdir}",
                "--no-state",
                f"--streamrate={streamrate}",
            ],
            cwd=workdir,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env={**os.environ, "HOME": str(workdir)},
        )
        self.cursor = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.monotonic() - self.t0, line.rstrip()))

    def send(self, cmd: str) -> None:
        self.cursor = len(self.lines)  # wait_line looks at what the command caused
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()

    def wait_line(self, pattern: str, timeout: float, since: int | None = None):
        """The first output line from ``since`` (default: the last command) matching ``pattern``:
        (seconds since start, match), or None."""
        rx = re.compile(pattern)
        i = self.cursor if since is None else since
        deadline = time.monotonic() + timeout
        while True:
            while i < len(self.lines):
                t, line = self.lines[i]
                i += 1
                m = rx.search(line)
                if m:
                    return t, m
            if time.monotonic() > deadline or self.proc.poll() is not None:
                return None
            time.sleep(0.02)

    def close(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(10)
        self.proc.stdin.close()
        self.proc.stdout.close()


def _wpl(items) -> str:
    """A QGC WPL 110 file (what `wp save` writes and `wp load` reads)."""
    rows = ["QGC WPL 110"]
    for seq, (frame, cmd, lat, lon, alt) in enumerate(items):
        rows.append(
            "\t".join(map(str, [seq, int(seq == 0), frame, cmd, 0, 0, 0, 0, f"{lat:.7f}", f"{lon:.7f}", alt, 1]))
        )
    return "\n".join(rows) + "\n"


WP_LINE = re.compile(r"^(\d+) (\d+) (-?[\d.]+) (-?[\d.]+) (-?[\d.]+) p1=")


def mavproxy_session(v) -> dict:
    """Connect, download parameters, `wp load` a mission in several frames and `wp list` it,
    then `mode GUIDED`, `arm throttle`, `takeoff 10`, `mode LAND`."""
    rec: dict = {}
    work = v.cwd / "mavproxy"
    mp = MavProxy(v.serial0, work)
    side = None
    try:
        hit = mp.wait_line(r"Detected vehicle 1:1", 30, since=0)
        rec["connected"] = hit is not None
        if not hit:
            rec["output"] = [line for _t, line in mp.lines[-20:]]
            return rec
        hit = mp.wait_line(r"Received (\d+) parameters(?: \((ftp)\))?", v.wall(300), since=0)
        rec["params_received"] = hit is not None
        rec["params_via_ftp"] = bool(hit and hit[1].group(2))
        rec["param_count"] = int(hit[1].group(1)) if hit else None
        if hit:  # reported by the test, never compared
            rec["_param_download_s"] = round(hit[0] - mp.wait_line(r"Detected vehicle", 1, since=0)[0], 2)
        # a GCS on SERIAL2 watches the flight (MAVProxy prints no altitude)
        side = Autotest(v.serial2, v.speedup)
        side.streams()
        rec["ready_to_arm"] = side.wait_ready_to_arm()
        h = side.home()
        hl, ho, ha = h.latitude / 1e7, h.longitude / 1e7, h.altitude / 1000
        items = [
            (0, 16, hl, ho, ha),
            (3, 22, 0, 0, 10),
            (0, 16, *offset(hl, ho, 20, 0), ha + 15),
            (3, 16, *offset(hl, ho, 20, 20), 15),
            (6, 16, *offset(hl, ho, 0, 20), 16),
            (0, 20, 0, 0, 0),
        ]
        wpl = work / "mission.txt"
        wpl.write_text(_wpl(items))
        mp.send(f"wp load {wpl}")
        rec["wp_load_ack"] = bool(mp.wait_line(r"Got MISSION_ACK: TYPE_MISSION: ACCEPTED", 10))
        mp.send("wp list")
        start = len(mp.lines)
        back = []
        if mp.wait_line(r"Requesting (\d+) waypoints", 10):
            deadline = time.monotonic() + 10
            while len(back) < len(items) and time.monotonic() < deadline:
                back = [WP_LINE.match(line) for _t, line in mp.lines[start:]]
                back = [m for m in back if m]
                time.sleep(0.05)
        # (command, frame, altitude) from item 1 on, AMSL items as height above home
        rec["wp_list"] = [
            (
                int(m.group(1)),
                int(m.group(2)),
                round(float(m.group(5)) - (ha if int(m.group(2)) == 0 and int(m.group(1)) == 16 else 0), 1),
            )
            for m in back[1:]
        ]
        mp.send("wp clear")
        mp.wait_line(r"MISSION_ACK|cleared|Clear", 5)

        mp.send("mode GUIDED")
        rec["mode_guided"] = bool(mp.wait_line(r"DO_SET_MODE: ACCEPTED|^GUIDED>|Mode GUIDED", 10))
        armed = False
        deadline = time.monotonic() + v.wall(30)
        while not armed and time.monotonic() < deadline:  # as a user does: again while refused
            mp.send("arm throttle")
            hit = mp.wait_line(r"COMPONENT_ARM_DISARM: (\w+)", 10)
            armed = bool(hit and hit[1].group(1) == "ACCEPTED")
            if not armed:
                time.sleep(0.5)
        rec["arm_throttle"] = armed
        mp.send("takeoff 10")
        hit = mp.wait_line(r"NAV_TAKEOFF: (\w+)", 10)
        rec["takeoff"] = hit[1].group(1) if hit else None
        rec["reached_10m"] = side.wait_altitude(9.5, 12, v.wall(40)) is not None
        mp.send("mode LAND")
        rec["mode_land"] = bool(mp.wait_line(r"DO_SET_MODE: ACCEPTED|Mode LAND", 10))
        rec["landed_and_disarmed"] = side.wait_disarmed(v.wall(120))
        return rec
    finally:
        if side is not None:
            side.close()
        mp.close()


SCENARIOS = {"session": mavproxy_session}

EXPECT = {
    "connect_params": {
        "connected": True,
        "params_received": True,
        "params_via_ftp": True,
        "param_count": lambda n: isinstance(n, int) and n > 1000,
    },
    # `wp list` shows the frames ArduCopter stores: GLOBAL (AMSL) and GLOBAL_RELATIVE_ALT stay as
    # loaded, GLOBAL_RELATIVE_ALT_INT comes back as GLOBAL_RELATIVE_ALT
    "wp_load_list": {
        "wp_load_ack": True,
        "wp_list": [(22, 3, 10.0), (16, 0, 15.0), (16, 3, 15.0), (16, 3, 16.0), (20, 0, 0.0)],
    },
    "mode_arm_takeoff": {
        "ready_to_arm": True,
        "mode_guided": True,
        "arm_throttle": True,
        "takeoff": "ACCEPTED",
        "reached_10m": True,
        "mode_land": True,
        "landed_and_disarmed": True,
    },
}
TOLERANCES: dict = {}
XFAIL: dict[str, str] = {}
# the differential test's known differences: scenario -> reason
XFAIL_DIFF: dict[str, str] = {}


@pytest.mark.parametrize("group,kind", cases(EXPECT, XFAIL))
def test_mavproxy(records, group, kind):
    bad = check(records.get("session", kind), EXPECT[group])
    assert not bad, f"MAVProxy on {kind}: " + "; ".join(bad)


@pytest.mark.parametrize("name,kind", cases(SCENARIOS, XFAIL_DIFF, kinds=("diff",)))
def test_mavproxy_same_as_arducopter(records, name, kind):
    assert_same("MAVProxy", name, records, TOLERANCES)
