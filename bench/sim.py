"""Built-in vehicle benchmarks: start to first HEARTBEAT, idle CPU, RSS, vehicles at once."""

from __future__ import annotations

import os
import selectors
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import fmt, report, stats  # noqa: E402

os.environ["MAVLINK20"] = "1"
from pymavlink.dialects.v20 import ardupilotmega as mavlink  # noqa: E402

from sitlpool.instances import ports  # noqa: E402

BASE = 2100
TICK = os.sysconf("SC_CLK_TCK")


def start(instance: int, cwd: Path, *args) -> subprocess.Popen:
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "sitlpool.sim", "-I", str(instance), "--model", "quad", *args],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def connect(port: int, deadline: float) -> socket.socket:
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.002)


def first_heartbeat(sock: socket.socket) -> None:
    mav = mavlink.MAVLink(None)
    while True:
        for m in mav.parse_buffer(sock.recv(4096)) or []:
            if m.get_type() == "HEARTBEAT":
                return


def cpu_seconds(pid: int) -> float:
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def stop(ps):
    for p in ps:
        try:
            os.killpg(p.pid, 9)
        except ProcessLookupError:
            pass
        p.wait()


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="sitlpool-bench-sim-"))
    lat = []
    for i in range(10):
        t = time.monotonic()
        p = start(BASE, tmp / "start")
        s = connect(ports(BASE).serial0, t + 10)
        first_heartbeat(s)
        lat.append(time.monotonic() - t)
        s.close()
        stop([p])
    report("process start to first HEARTBEAT", stats(lat), "≤ 0.4 s (real SITL 1.02 s)")

    # wind with turbulence (issue 22): 10 m/s without the altitude profile, turbulence 2
    wind = tmp / "wind.parm"
    wind.write_text("SIM_WIND_SPD 10\nSIM_WIND_DIR 90\nSIM_WIND_TURB 2\nSIM_WIND_T 1\n")
    for speed, streams, windy in ((1, False, False), (1, True, False), (10, True, False), (1, True, True)):
        extra = ["--defaults", str(wind), "--ready-delay", "1"] if windy else []
        p = start(BASE + 1, tmp / f"idle{speed}{streams}{windy}", "--speedup", str(speed), *extra)
        s = connect(ports(BASE + 1).serial0, time.monotonic() + 10)
        first_heartbeat(s)
        gcs = mavlink.MAVLink(None, 255, 190)
        if streams:  # a GCS asks for everything at 4 Hz (as MAVProxy does); unasked only HEARTBEAT flows
            s.sendall(mavlink.MAVLink_request_data_stream_message(1, 1, 0, 4, 1).pack(gcs))
        if windy:  # hovering in it: GUIDED, armed, taken off to 10 m (the lean and drag computed)
            time.sleep(1.5)
            for cmd, params in ((176, (1, 4)), (400, (1,)), (22, (0, 0, 0, 0, 0, 0, 10))):
                p7 = list(params) + [0] * (7 - len(params))
                s.sendall(mavlink.MAVLink_command_long_message(1, 1, cmd, 0, *p7).pack(gcs))
                time.sleep(0.5)
        s.setblocking(False)
        time.sleep(2)
        c0, t0 = cpu_seconds(p.pid), time.monotonic()
        end = t0 + 10
        while time.monotonic() < end:  # drain what it sends, as a GCS would
            try:
                s.recv(65536)
            except BlockingIOError:
                pass
            time.sleep(0.05)
        cpu = (cpu_seconds(p.pid) - c0) / (time.monotonic() - t0) * 100
        what = "all streams at 4 Hz" if streams else "nothing asked"
        what += ", hovering in wind 10 m/s + turbulence 2" if windy else ""
        report(
            f"CPU with one client, speedup {speed}, {what}",
            f"{cpu:.2f}% of a core",
            "≤ 2% at speedup 1 (real SITL 4.2%)" if speed == 1 else "",
        )
        if speed == 1 and not streams:
            report("RSS of one vehicle", f"{rss_mib(p.pid):.1f} MiB", "(real SITL ~8 MiB)")
        s.close()
        stop([p])

    counts: tuple[int, ...] = () if "--quick" in sys.argv else (40, 80, 120, 160)  # --quick: start and CPU only
    for a in sys.argv[1:]:  # --counts=40: only these fleet sizes
        if a.startswith("--counts="):
            counts = tuple(int(x) for x in a.split("=", 1)[1].split(","))
    for count in counts:  # up to the first count that no longer keeps 1 Hz
        ps = [start(BASE + 10 + i, tmp / f"many{i}", "--defaults", str(wind)) for i in range(count)]  # in wind
        sel = selectors.DefaultSelector()
        deadline = time.monotonic() + 60
        last: dict[int, float] = {}
        gaps: dict[int, float] = {}
        for i in range(count):
            s = connect(ports(BASE + 10 + i).serial0, deadline)
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ, (i, mavlink.MAVLink(None)))
        warm = time.monotonic() + 3
        end = warm + 15
        while time.monotonic() < end:
            for key, _ in sel.select(0.1):
                i, mav = key.data
                try:
                    data = key.fileobj.recv(65536)
                except BlockingIOError:
                    continue
                for m in mav.parse_buffer(data) or []:
                    if m.get_type() == "HEARTBEAT":
                        now = time.monotonic()
                        if i in last and now > warm:
                            gaps[i] = max(gaps.get(i, 0), now - last[i])
                        last[i] = now
        worst = max(gaps.values()) if len(gaps) == count else float("inf")
        ok = len(gaps) == count and worst < 1.5
        report(
            f"{count} vehicles at once (wind + turbulence): worst HEARTBEAT gap over 15 s",
            f"{fmt(worst)} ({'all keep 1 Hz' if ok else 'NOT kept'})",
            "≥ 40 vehicles keep 1 Hz",
        )
        for key in list(sel.get_map().values()):
            key.fileobj.close()
        stop(ps)
        if not ok:
            break
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
