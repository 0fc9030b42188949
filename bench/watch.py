"""Watch benchmark (issue 25): what forwarding one vehicle to 3 ground stations costs.

The built-in vehicle runs (a child process); this process holds the agent's link to it
(``VehicleLink``, streams at ``--stream-hz``) and, in a second phase, a ``Forwarder`` to three
UDP watchers living in another child process. Reported:

- CPU: this process's CPU with the forwarder minus without it, in % of one core (target
  <= 1% per vehicle), and the forwarder thread's own CPU (from /proc);
- latency: when a message reached a watcher minus when the link received it (both
  CLOCK_MONOTONIC, one machine; matched by message id and sequence number to the latest
  time the link received that pair before; target <= 20 ms).

The forwarder sends each read's messages from the link's thread, at the last message of the
read; ``--thread-hop`` makes it wake its own thread to send instead, as it did before (for
the comparison); ``--load N`` runs N busy processes beside it (a loaded machine: other work
on the cores is what makes a hop between threads slow).

    .venv/bin/python bench/watch.py [--seconds 20] [--speedup 1] [--stream-hz 4] [--load 3] [--thread-hop]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import report, stats  # noqa: E402

os.environ.setdefault("MAVLINK20", "1")
from sitlpool.mavlink.forward import Forwarder  # noqa: E402
from sitlpool.mavlink.link import VehicleLink  # noqa: E402

INSTANCE = 3190  # far from the tests' instances

WATCHERS = r"""
import json, select, socket, sys, time
ports, seconds, out = [int(p) for p in sys.argv[1].split(",")], float(sys.argv[2]), sys.argv[3]
socks = []
for p in ports:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", p))
    socks.append(s)
print("ready", flush=True)
got = [[] for _ in socks]
end = time.monotonic() + seconds
while time.monotonic() < end:
    r, _, _ = select.select(socks, [], [], 0.2)
    now = time.monotonic()
    for s in r:
        d, i, mine = s.recv(65536), 0, got[socks.index(s)]
        while i + 6 <= len(d):  # the frames of a datagram
            if d[i] == 0xFD and i + 10 <= len(d):  # MAVLink 2: seq at 4, msgid at 7..9
                mine.append((d[i + 7] | d[i + 8] << 8 | d[i + 9] << 16, d[i + 4], now))
                i += 12 + d[i + 1] + (13 if d[i + 2] & 1 else 0)
            elif d[i] == 0xFE:
                mine.append((d[i + 5], d[i + 2], now))
                i += 8 + d[i + 1]
            else:
                break
json.dump(got, open(out, "w"))
"""


def free_udp_ports(n: int) -> list[int]:
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def thread_cpu_s(tid: int) -> float:
    fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--speedup", type=float, default=1)
    ap.add_argument("--stream-hz", type=float, default=4)
    ap.add_argument("--load", type=int, default=0, help="busy processes running beside the bench")
    ap.add_argument("--thread-hop", action="store_true", help="the forwarder's thread sends (as before)")
    a = ap.parse_args()
    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True) for _ in range(a.load)]
    work = Path(tempfile.mkdtemp(prefix="sitlpool-bench-watch-"))
    sim = subprocess.Popen(
        [sys.executable, "-m", "sitlpool.sim", "-I", str(INSTANCE), "--model", "quad", "--speedup", str(a.speedup)],
        cwd=work,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    watchers = None
    try:
        link = VehicleLink(f"tcp:127.0.0.1:{5760 + 10 * INSTANCE}", connect_timeout=15, stream_hz=a.stream_hz).start()
        assert link.wait_heartbeat(15), "no HEARTBEAT from the built-in vehicle"
        seen: dict = {}
        received = [0]

        def stamp(m):  # when the link received each message (the agent's view)
            received[0] += 1
            seen.setdefault((m.get_msgId(), m.get_seq()), []).append(time.monotonic())

        link.add_listener(stamp)
        time.sleep(3)  # streams settle
        c0, r0, t0 = cpu_s(), received[0], time.monotonic()
        time.sleep(a.seconds)
        base = (cpu_s() - c0) / (time.monotonic() - t0)
        rate = (received[0] - r0) / (time.monotonic() - t0)

        ports = free_udp_ports(3)
        out = work / "watchers.json"
        watchers = subprocess.Popen(
            [sys.executable, "-c", WATCHERS, ",".join(map(str, ports)), str(a.seconds + 2), str(out)],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert watchers.stdout is not None and watchers.stdout.readline().startswith("ready")
        fw = Forwarder(link, [f"udp:127.0.0.1:{p}" for p in ports])
        if a.thread_hop:
            fw._parser = None  # as before: the link thread wakes the forwarder's thread, which sends
        sent_lat: list[float] = []
        send_queued = fw._send_queued

        def timed_send() -> None:  # when each message left this process (what the forwarder controls)
            bufs = list(fw._q)
            send_queued()
            now = time.monotonic()
            for b in bufs:
                key = (b[7] | b[8] << 8 | b[9] << 16, b[4]) if b[0] == 0xFD else (b[5], b[2])
                times = seen.get(key)
                if times and now - times[-1] < 1.0:
                    sent_lat.append(now - times[-1])

        fw._send_queued = timed_send  # type: ignore[method-assign]
        time.sleep(1)
        c1, t1, f1 = cpu_s(), time.monotonic(), thread_cpu_s(fw._thread.native_id or 0)
        time.sleep(a.seconds)
        dt = time.monotonic() - t1
        with_fw = (cpu_s() - c1) / dt
        fw_thread = (thread_cpu_s(fw._thread.native_id or 0) - f1) / dt
        info = fw.info()
        watchers.wait(a.seconds + 30)
        fw.close()
        link.close()
        lat = []
        got = json.loads(out.read_text())
        for per in got:
            for msgid, seq, when in per:
                times = seen.get((msgid, seq), [])
                i = bisect.bisect_right(times, when)  # the latest reception of this (id, seq) before it arrived
                if i and when - times[i - 1] < 1.0:
                    lat.append(when - times[i - 1])
        report(
            "vehicle messages received by the link", f"{rate:.0f}/s (speedup {a.speedup:g}, streams {a.stream_hz:g} Hz)"
        )
        report("this process's CPU, link only", f"{base * 100:.2f}% of a core")
        report("this process's CPU, link + forwarder to 3 watchers", f"{with_fw * 100:.2f}% of a core")
        report("forwarding's cost (difference)", f"{(with_fw - base) * 100:.2f}% of a core", "<= 1%")
        report("the forwarder thread alone", f"{fw_thread * 100:.2f}% of a core")
        report("messages delivered to each watcher", ", ".join(str(len(p)) for p in got))
        report("dropped by the forwarder", str(info["dropped"]))
        report("sent from", "the forwarder's thread (--thread-hop)" if a.thread_hop else "the link's thread")
        if a.load:
            report("load beside the bench", f"{a.load} busy processes on {os.cpu_count()} cores")
        if sent_lat:
            report("latency link -> sent (in this process)", stats(sent_lat))
        if lat:
            lat.sort()
            report("latency link -> watcher", stats(lat), "<= 20 ms")
            report("latency link -> watcher, worst", f"{lat[-1] * 1e3:.2f} ms")
        return 0
    finally:
        for p in (watchers, sim, *load):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)


if __name__ == "__main__":
    sys.exit(main())
