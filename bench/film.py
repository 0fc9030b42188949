"""Film benchmarks (issue 25: "rendering a 2-minute flight film <= 30 s here"): render_flight
on the real logs of ../shared/logs, each in a child process (clean peak RSS; the CPU time of
ffmpeg, a child of that child, counted apart).

    .venv/bin/python bench/film.py [--keep DIR]

Cases: two minutes of the 22.7 MB copter-gcs-scenarios log at real time (the target), MP4
and GIF; the whole 311 s log at the default speed (real time up to 2 minutes of film,
faster beyond: x2.6 here); the same at real time (3110 frames); the 33 s copter-hop log.
Wall times on a shared machine move with its load: CPU times are printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import fmt, report  # noqa: E402

LOGS = Path(__file__).resolve().parents[1].parent / "shared" / "logs"

CHILD = r"""
import json, resource, sys, time
t = time.perf_counter(); c = time.process_time()
from sitlpool.logs.film import render_flight
args = json.loads(sys.argv[3])
film = render_flight(sys.argv[1], sys.argv[2], **args)
wall = time.perf_counter() - t
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall": wall, "cpu": time.process_time() - c, "ffmpeg_cpu": kids.ru_utime + kids.ru_stime,
                  "ffmpeg_rss_mb": kids.ru_maxrss / 1024, "rss_mb": hwm / 1024, **film.as_dict()}))
"""


def film(log: Path, out: Path, **kw) -> dict:
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(log), str(out), json.dumps(kw)], capture_output=True, text=True
    )
    if r.returncode:
        raise SystemExit(r.stderr)
    return json.loads(r.stdout)


def show(name: str, r: dict, target: str = "") -> None:
    report(
        f"{name}: {r['frames']} frames, x{r['speed']:g}",
        f"{fmt(r['wall'])} wall ({r['frames'] / r['wall']:.0f} frames/s)",
        target,
    )
    report(
        "  CPU: render / ffmpeg; peak RSS render / ffmpeg",
        f"{fmt(r['cpu'])} / {fmt(r['ffmpeg_cpu'])}; {r['rss_mb']:.0f} / {r['ffmpeg_rss_mb']:.0f} MB",
    )
    report("  file", f"{r['bytes'] / 1e6:.2f} MB, {r['duration_s']:.1f} s of film, {r['width']}x{r['height']}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", type=Path, help="keep the films in this directory")
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="sitlpool-bench-film-"))
    out = a.keep or tmp
    out.mkdir(parents=True, exist_ok=True)
    try:
        gcs = tmp / "copter-gcs-scenarios.BIN"
        with open(gcs, "wb") as f:
            subprocess.run(["xz", "-dc", str(LOGS / "copter-gcs-scenarios.BIN.xz")], stdout=f, check=True)
        t0 = 60.0
        r = film(gcs, out / "gcs-2min.mp4", speed=1.0, t0=t0, t1=t0 + 120)
        show("2 minutes of the 22.7 MB log, real time, MP4", r, "<= 30 s")
        r = film(gcs, out / "gcs-2min.gif", speed=1.0, t0=t0, t1=t0 + 120)
        show("2 minutes of the 22.7 MB log, real time, GIF", r, "<= 30 s")
        r = film(gcs, out / "gcs-default.mp4")
        show("the whole 311 s log, default speed, MP4", r)
        r = film(gcs, out / "gcs-1x.mp4", speed=1.0)
        show("the whole 311 s log, real time, MP4", r)
        hop = LOGS / "copter-hop.BIN"
        show("copter-hop (33 s), MP4", film(hop, out / "hop.mp4"))
        show("copter-hop (33 s), GIF", film(hop, out / "hop.gif"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
