"""Dashboard benchmark (issue 25): 40 fake vehicles whose state files are written at 1 Hz
(statefile's format, by a writer that also holds the 40 leases) -> the dashboard process's
CPU (target <= 5% of a core) and the page's state lag measured on its SSE stream (the time
an event arrives minus the time the state file says it was written; target <= 1.5 s).

Twice: without live logs (the state files only), then with every vehicle's live DataFlash log
growing as a real ArduCopter's does (``logs/LASTLOG.TXT`` and ``logs/NNNNNNNN.BIN`` in its
session's directory, appended every second with the next second of a real log,
``../shared/logs/copter-hop.BIN`` by default: 73 KB/s, 1,800 messages/s; a new log when it
ends, as a new flight would): the dashboard reads each to draw its small plots.

    .venv/bin/python bench/dashboard.py [--vehicles 40] [--seconds 60] [--live-logs both|off|on]

Runs in a scratch data dir on a pool of its own; the dashboard is a child process, served
exactly as ``sitlpool dashboard`` serves it. One SSE client (this script) reads the stream.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import report  # noqa: E402

FIRST = 3000  # the bench's pool: instances nobody's tests use (tests take theirs from a lock dir)

WRITER = r"""
import json, math, os, sys, time
from pathlib import Path
from sitlpool.leases import LeasePool
from sitlpool.procinfo import start_ticks
data, first, n = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
source = Path(sys.argv[4]).read_bytes() if sys.argv[4] else b""
per_s = int(len(source) / float(sys.argv[5])) if source else 0  # the source log's bytes per second of flight
pool = LeasePool(data / "leases", list(range(first, first + n)), check=False)
leases = [pool.acquire(f"bench agent {i}") for i in range(n)]
me, ticks = os.getpid(), start_ticks(os.getpid()) or 0
dirs = []
for i in range(n):
    d = data / "sessions" / str(first + i)
    d.mkdir(parents=True, exist_ok=True)
    dirs.append(d)
logs = []  # per vehicle: [log number, bytes of the source written]
for i, d in enumerate(dirs if source else []):
    (d / "logs").mkdir(exist_ok=True)
    (d / "logs" / "LASTLOG.TXT").write_text("1\r\n")
    done = min(len(source), per_s * (1 + i % 30))  # flights at different stages
    (d / "logs" / "00000001.BIN").write_bytes(source[:done])
    logs.append([1, done])
print("ready", flush=True)
k = 0
while True:
    t0 = time.time()
    for i, lg in enumerate(logs):  # one more second of each flight's log
        num, done = lg
        if done >= len(source):  # the flight ended: the next one writes a new log
            num, done = num + 1, 0
            (dirs[i] / "logs" / "LASTLOG.TXT").write_text(f"{num}\r\n")
        with open(dirs[i] / "logs" / f"{num:08d}.BIN", "ab") as f:
            f.write(source[done : done + per_s])
        lg[:] = [num, done + per_s]
    for i, d in enumerate(dirs):
        a = (k + i) / 20
        doc = {"schema": 1, "instance": first + i, "sitl_pid": None, "writer_pid": me, "writer_start_ticks": ticks,
               "time": round(time.time(), 3), "link": "connected", "mode": "AUTO" if k % 20 < 10 else "GUIDED",
               "armed": True, "relative_alt_m": round(10 + 5 * math.sin(a), 2), "battery_pct": 90,
               "battery_v": 12.4, "heartbeat_age_s": 0.2, "last_text": f"Reached command #{k % 7}",
               "last_text_time": round(time.time(), 3), "lat": -35.36 + 0.0003 * math.cos(a),
               "lon": 149.16 + 0.0003 * math.sin(a), "home": [-35.36, 149.16], "groundspeed_m_s": 5.0,
               "climb_m_s": 0.1, "gps_fix_type": 3, "gps_satellites": 10, "ready_to_arm": True}
        tmp = d / ".state.json.tmp"
        tmp.write_text(json.dumps(doc, separators=(",", ":")))
        os.replace(tmp, d / "state.json")
    k += 1
    time.sleep(max(0.0, 1.0 - (time.time() - t0)))
"""

SERVE = """
import sys
from sitlpool.dashboard import serve
serve(port=0)
"""


def cpu_s(pid: int) -> float:
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


LOG = Path(__file__).resolve().parents[1].parent / "shared" / "logs" / "copter-hop.BIN"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vehicles", type=int, default=40)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--live-logs", choices=("both", "off", "on"), default="both")
    ap.add_argument("--log-source", type=Path, default=LOG, help="the real log the vehicles' live logs replay")
    a = ap.parse_args()
    for live in {"both": (False, True), "off": (False,), "on": (True,)}[a.live_logs]:
        run(a, live)


def run(a, live: bool) -> None:
    what = "with every vehicle's live log growing" if live else "state files only, no live log"
    print(f"--- {what}", flush=True)
    source, duration = "", "1"
    if live:
        from sitlpool.logs import summary

        s = summary(a.log_source)
        source, duration = str(a.log_source), str(max(1.0, (s["end"]["last_time"] or 0) - (s["start"] or 0)))
    tmp = Path(tempfile.mkdtemp(prefix="sitlpool-bench-dashboard-"))
    env = dict(
        os.environ,
        SITLPOOL_DATA_DIR=str(tmp),
        SITLPOOL_POOL=f"{FIRST}-{FIRST + a.vehicles - 1}",
    )
    env.pop("SITLPOOL_LOCK_DIR", None)
    py = sys.executable
    writer = subprocess.Popen(
        [py, "-c", WRITER, str(tmp), str(FIRST), str(a.vehicles), source, duration],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    dash = None
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        dash = subprocess.Popen([py, "-c", SERVE], env=env, stdout=subprocess.PIPE, text=True)
        assert dash.stdout is not None
        line = dash.stdout.readline()
        url = line.split()[2]
        host, port = url.split("//")[1].split("/")[0].split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("GET", "/events")
        resp = conn.getresponse()
        lags: list[float] = []
        seen: dict[int, float] = {}
        events = plotted = 0
        warm = time.monotonic() + 5  # the first full status and the first log scan
        c0 = t0 = None
        end = None
        event = None
        for raw in resp:
            now = time.time()
            s = raw.decode().rstrip("\n")
            if s.startswith("event: "):
                event = s[7:]
            elif s.startswith("data: ") and event == "state":
                doc = json.loads(s[6:])
                events += 1
                if time.monotonic() < warm:
                    continue
                if c0 is None:
                    c0, t0, end = cpu_s(dash.pid), time.monotonic(), time.monotonic() + a.seconds
                plotted = sum(1 for v in doc["vehicles"] if (v.get("log") or {}).get("last"))
                for v in doc["vehicles"]:
                    if v.get("time") and seen.get(v["instance"]) != v["time"]:
                        seen[v["instance"]] = v["time"]
                        lags.append(now - v["time"])
                if end is not None and time.monotonic() >= end:
                    break
        assert c0 is not None and t0 is not None
        cpu = (cpu_s(dash.pid) - c0) / (time.monotonic() - t0)
        conn.close()
        lags.sort()
        report(f"dashboard CPU, {a.vehicles} vehicles at 1 Hz, 1 SSE client", f"{cpu * 100:.1f}% of a core", "≤ 5%")
        report(
            "state lag on the SSE stream (file written -> event read)",
            f"median {statistics.median(lags):.2f} s, p95 {lags[int(len(lags) * 0.95)]:.2f} s, "
            f"max {lags[-1]:.2f} s (n={len(lags)})",
            "≤ 1.5 s",
        )
        report("state events received", f"{events} in {a.seconds:g} s")
        if live:
            report("live logs on the page (a name and points)", f"{plotted} of {a.vehicles}")
    finally:
        for p in (dash, writer):
            if p is not None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
