"""Flight-log benchmarks (issue 21): summary of the 22.7 MB real ArduCopter log beside
mcardupilot's reference time, one field series, list_logs with 1000 kept logs, and peak
memory for a 500 MB log. Each measurement that needs a clean peak RSS runs in a child.

    .venv/bin/python bench/logs.py [--huge-mb 500]

mcardupilot is not installable here: its figure (``logread.summary``: 1.26 s in-process,
1.77 s as a whole process, on the same file and machine) is from ../shared/logs/README.md.
Wall times on a shared machine move with its load: CPU times are printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import fmt, report, stats  # noqa: E402

LOGS = Path(__file__).resolve().parents[1].parent / "shared" / "logs"
MCARDUPILOT_SUMMARY_S = 1.26
MCARDUPILOT_PROCESS_S = 1.77

CHILD = r"""
import json, sys, time
t = time.perf_counter(); c = time.process_time()
from sitlpool import logs
imp = time.perf_counter() - t
what, path = sys.argv[1], sys.argv[2]
walls, cpus = [], []
for _ in range(int(sys.argv[3])):
    t = time.perf_counter(); c = time.process_time()
    if what == "summary":
        out = logs.summary(path); n = len(out["phases"])
    else:
        out = logs.fields(path, sys.argv[4].split(","), max_points=500); n = sum(f["count"] for f in out["fields"].values())
    walls.append(time.perf_counter() - t); cpus.append(time.process_time() - c)
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across fork+exec, so a child would report
# its parent's peak when that was higher
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"import": imp, "walls": walls, "cpus": cpus, "n": n, "rss_mb": hwm / 1024}))
"""


def child(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def unpack(tmp: Path) -> Path:
    big = tmp / "copter-gcs-scenarios.BIN"
    with open(big, "wb") as f:
        subprocess.run(["xz", "-dc", str(LOGS / "copter-gcs-scenarios.BIN.xz")], stdout=f, check=True)
    return big


def bench_list(tmp: Path) -> None:
    from sitlpool.logs import LogStore

    store = LogStore(tmp / "data", 100_000)
    d = tmp / "one"
    d.mkdir()
    (d / "00000001.BIN").write_bytes(b"\xa3\x95" + b"\0" * 100)
    rec = store.collect(d, {"session": "bench", "label": "bench"})[0]
    proto = json.loads((store.records / f"{rec.id}.json").read_text())
    for i in range(999):
        rid = f"20260101-000000-{i:06x}"
        (store.records / f"{rid}.json").write_text(json.dumps(dict(proto, id=rid, end=1000.0 + i)))
    samples, cpus = [], []
    for _ in range(20):
        t, c = time.perf_counter(), time.process_time()
        n = len(store.list())
        samples.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    assert n == 1000
    report("list_logs, 1000 kept logs (wall)", stats(samples), "<= 100 ms")
    report("list_logs, 1000 kept logs, CPU time", stats(cpus))
    samples = []
    for _ in range(20):
        t = time.perf_counter()
        store.list(session="bench", since="1h")
        samples.append(time.perf_counter() - t)
    report("list_logs, 1000 kept logs, filtered (session, since)", stats(samples))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--huge-mb", type=int, default=500)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="sitlpool-bench-logs-"))
    try:
        big = unpack(tmp)
        size_mb = big.stat().st_size / 1e6
        r = child("summary", str(big), str(a.runs))
        best_wall, best_cpu = min(r["walls"]), min(r["cpus"])
        report(f"log_summary, {size_mb:.1f} MB real ArduCopter log (wall)", stats(r["walls"]), "<= 0.63 s")
        report("log_summary, same, CPU time", stats(r["cpus"]))
        report("mcardupilot logread.summary, same file (reference)", f"{MCARDUPILOT_SUMMARY_S:.2f} s")
        report("ours / mcardupilot (best wall, best CPU)",
               f"{best_wall / MCARDUPILOT_SUMMARY_S:.2f}x, {best_cpu / MCARDUPILOT_SUMMARY_S:.2f}x", "<= 0.5x")  # fmt: skip
        report("peak RSS of that process (summary)", f"{r['rss_mb']:.0f} MB")
        report("import sitlpool.logs", fmt(r["import"]))
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"from sitlpool import logs; logs.summary({str(big)!r})"], check=True)
        report("whole process: python -c 'logs.summary(...)'", fmt(time.perf_counter() - t),
               f"mcardupilot {MCARDUPILOT_PROCESS_S:.2f} s")  # fmt: skip
        r = child("fields", str(big), str(a.runs), "CTUN.Alt")
        report("log_fields CTUN.Alt over the 22.7 MB log (wall)", stats(r["walls"]), "<= 1 s")
        report("log_fields CTUN.Alt, CPU time", stats(r["cpus"]))
        r = child("fields", str(big), "2", "ESC.RPM")
        report(f"log_fields ESC.RPM ({r['n']} points) (wall)", stats(r["walls"]), "<= 1 s")
        bench_list(tmp)
        huge = tmp / "huge.BIN"
        data = big.read_bytes()[:22704122]  # up to its last whole message
        with open(huge, "wb") as f:
            while f.tell() < a.huge_mb * 1_000_000:
                f.write(data)
        del data
        hmb = huge.stat().st_size / 1e6
        r = child("summary", str(huge), "1")
        report(f"log_summary of a {hmb:.0f} MB log: peak RSS", f"{r['rss_mb']:.0f} MB", "<= 150 MB")
        report(f"log_summary of a {hmb:.0f} MB log: time", fmt(r["walls"][0]))
        r = child("fields", str(huge), "1", "ESC.RPM,CTUN.Alt")
        report(f"log_fields ESC.RPM + CTUN.Alt of the {hmb:.0f} MB log: peak RSS", f"{r['rss_mb']:.0f} MB", "<= 150 MB")
        report(f"log_fields of the {hmb:.0f} MB log: time", fmt(r["walls"][0]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"(this process: peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)")


if __name__ == "__main__":
    main()
