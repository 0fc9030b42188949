"""The agent toolkit's figures: flight_picture of a 10-minute flight, get_params of every
parameter of real ArduCopter (when a binary is given), and the state-file writer's CPU.

    ./dev bench toolkit            # SITLPOOL_SITL_BINARY (or ../shared/ardupilot) for the real-ArduCopter figure
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

# bench/mcp.py is named like the SDK: keep this folder off the path while importing the SDK
_here = str(Path(__file__).resolve().parent)
sys.path = [p for p in sys.path if str(Path(p or ".").resolve()) != _here]
from mcp.server.mcpserver import MCPServer  # noqa: E402

sys.path.insert(0, _here)
from _util import report, stats, timeit  # noqa: E402

BASE = 230  # real SITL keeps -I in a uint8: instances below 256 (flight's tests use 200-251 in blocks, ours 230+)
HOME = (-35.3632621, 149.1652374, 584.0)


class FakeLink:
    """Just what the recorder and the state writer read from a VehicleLink."""

    def __init__(self):
        from sitlpool.mavlink.link import VehicleState

        self.vehicle = VehicleState(
            mode="AUTO",
            armed=True,
            rel_alt=12.3,
            battery_remaining=87,
            voltage=12.1,
            last_heartbeat=time.monotonic(),
            home=HOME,
        )
        self.vehicle.texts.append((time.time(), 6, "Mission: 2 WP"))
        self.state = "connected"
        self.name = "bench"

    def add_listener(self, fn):
        pass


def ten_minute_recorder():
    """A FlightRecorder holding a 10-minute mission flight (5 positions a second, as recorded)."""
    from sitlpool.mavlink.recorder import FlightRecorder

    rec = FlightRecorder(FakeLink())
    now = time.monotonic()
    t0 = now - 600
    n = 3000
    for i in range(n):
        t = t0 + i * 0.2
        ang = i / 500
        north, east = 150 * math.sin(ang), 220 * math.sin(ang * 0.5)
        lat = HOME[0] + math.degrees(north / 6378137)
        lon = HOME[1] + math.degrees(east / (6378137 * math.cos(math.radians(HOME[0]))))
        alt = min(30.0, i * 0.1) if i < n - 300 else max(0.0, 30 - (i - n + 300) * 0.1)
        rec.track.append((t, lat, lon, alt, HOME[2] + alt))
    rec.events = deque(
        [
            (t0 - 5, "mode", "STABILIZE"),
            (t0 + 1, "mode", "GUIDED"),
            (t0 + 2, "armed", ""),
            (t0 + 3, "mode", "AUTO"),
            (t0 + 300, "mode", "LOITER"),
            (t0 + 320, "mode", "AUTO"),
            (t0 + 560, "mode", "LAND"),
            (t0 + 599, "disarmed", ""),
        ]
    )
    rec.mission = (
        [{"command": "takeoff", "alt_m": 30}]
        + [
            {"command": "waypoint", "lat": HOME[0] + 0.001 * k, "lon": HOME[1] + 0.0015 * (k % 3), "alt_m": 30}
            for k in range(1, 8)
        ]
        + [{"command": "land"}]
    )
    return rec


def bench_picture() -> None:
    code = (
        "import time; t=time.perf_counter(); import sys; sys.path.insert(0, %r); from toolkit import ten_minute_recorder;"
        "rec=ten_minute_recorder(); t1=time.perf_counter(); from sitlpool import picture; png=picture.of_recorder(rec);"
        "print(time.perf_counter()-t1, len(png))" % str(Path(__file__).resolve().parent)
    )
    cold = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
        cold.append(float(out[0]))
    report("flight_picture, 10-min flight, first call (Pillow import)", stats(cold))
    from sitlpool import picture

    rec = ten_minute_recorder()
    png = picture.of_recorder(rec)
    warm = timeit(lambda: picture.of_recorder(rec), 20)
    report("flight_picture, 10-min flight (3000 positions)", stats(warm) + f", {len(png) // 1024} kB PNG", "≤ 200 ms")


def bench_state_writer() -> None:
    from sitlpool.statefile import StateWriter

    with tempfile.TemporaryDirectory() as d:
        w = StateWriter(FakeLink(), Path(d) / "state.json", 1, os.getpid())
        n = 2000
        c0 = time.process_time()
        for _ in range(n):
            w.write()
        per = (time.process_time() - c0) / n
        report("state file: one write (CPU)", f"{per * 1e6:.0f} µs, i.e. {per * 100:.3f}% of a core at 1 Hz", "≤ 0.2%")
        # the real thing: a writer thread for 10 s, measured by this process's CPU while idle otherwise
        w2 = StateWriter(FakeLink(), Path(d) / "state2.json", 2, os.getpid(), period=1.0)
        c0, t0 = time.process_time(), time.monotonic()
        w2.start()
        time.sleep(10)
        w2.stop()
        cpu = (time.process_time() - c0) / (time.monotonic() - t0)
        report("state file writer thread, 10 s at 1 Hz (whole process CPU)", f"{cpu * 100:.3f}% of a core", "≤ 0.2%")


def real_binary() -> Path | None:
    given = os.environ.get("SITLPOOL_SITL_BINARY") or os.environ.get("SITLPOOL_TEST_SITL_BINARY")
    p = Path(given) if given else Path(__file__).resolve().parents[2] / "shared/ardupilot/build/sitl/bin/arducopter"
    return p if p.is_file() and os.access(p, os.X_OK) else None


def bench_params() -> None:
    binary = real_binary()
    if binary is None:
        report("get_params, every parameter of real ArduCopter", "skipped (no SITLPOOL_SITL_BINARY)")
        return
    from sitlpool.config import load_settings
    from sitlpool.mavlink import params
    from sitlpool.process import ManagedManager

    with tempfile.TemporaryDirectory() as d:
        s = load_settings(data_dir=d, pool=f"{BASE}-{BASE + 9}", sitl_binary=str(binary))
        m = ManagedManager(s)
        h = m.start("bench-params", speedup=1)
        try:
            h.link.wait(lambda v: not getattr(v, "booting", False), 15)
            got = []
            samples = timeit(lambda: got.append(params.get_all(h.link)), 5)
            report(
                f"get_params, all {got[-1]['total']} parameters of real ArduCopter (speedup 1)", stats(samples), "≤ 3 s"
            )
        finally:
            h.kill(wait=True)


def bench_register() -> None:
    """What registering the tools adds to ``sitlpool serve``'s start (before it serves)."""
    from sitlpool.server.tools import SUBJECTS

    for subject in SUBJECTS:
        samples, count = [], 0
        for _ in range(5):
            mcp = MCPServer("bench")
            t = time.process_time()
            subject.register(mcp, None, None)
            samples.append(time.process_time() - t)
            count = len(mcp._tool_manager.list_tools())
        name = subject.__name__.rsplit(".", 1)[-1]
        report(f"register the {name} tools ({count}) CPU, part of MCP start", stats(samples))
    code = "import sys, sitlpool.server.app; print(sorted({'PIL', 'matplotlib'} & set(sys.modules)))"  # pymavlink: the flight layer's
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    report("heavy modules imported by the server at start", out, "[]")


if __name__ == "__main__":
    bench_register()
    bench_picture()
    bench_state_writer()
    bench_params()
