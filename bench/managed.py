"""Managed SITL benchmarks: launch-to-ready, death detection, reap_orphans over 20 pid files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import fmt, report, stats  # noqa: E402

from sim import connect, first_heartbeat  # noqa: E402

BASE = 2200


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="sitlpool-bench-managed-"))
    os.environ.update(SITLPOOL_DATA_DIR=str(tmp), SITLPOOL_POOL=f"{BASE}-{BASE + 29}")
    import logging

    from sitlpool import pidfiles, procinfo
    from sitlpool.config import load_settings
    from sitlpool.instances import ports
    from sitlpool.process import ManagedManager, reap_orphans

    logging.getLogger("sitlpool").setLevel(logging.ERROR)  # the SIGKILLs below are on purpose

    s = load_settings()
    m = ManagedManager(s)
    bare, managed, death = [], [], []
    for i in range(10):
        t = time.monotonic()
        p = subprocess.Popen(
            [sys.executable, "-m", "sitlpool.sim", "-I", str(BASE + 29), "--model", "quad", "-w"],
            cwd=tmp,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        c = connect(ports(BASE + 29).serial0, t + 10)
        first_heartbeat(c)
        bare.append(time.monotonic() - t)
        c.close()
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()

        t = time.monotonic()
        h = m.start(f"b{i}")
        managed.append(time.monotonic() - t)
        t = time.monotonic()
        os.kill(h.pid, signal.SIGKILL)
        h.join()
        death.append(time.monotonic() - t)
        m.wait_termination(0)
    report("bare Popen + connect + first HEARTBEAT", stats(bare))
    report("ManagedManager.start to ready (built-in vehicle)", stats(managed), "≤ 400 ms (peer 615–820 ms)")
    import statistics

    over = (statistics.median(managed) / statistics.median(bare) - 1) * 100
    report("  overhead over bare", f"{over:.1f}%", "≤ 10%")
    report("death detection after an external SIGKILL", stats(death), "≤ 50 ms (peer 313–411 ms)")

    # the launch itself: fork/exec of /bin/true from a ~bench-sized process, bare Popen against
    # popen_tied (forked by the launcher thread, parent-death signal set before exec)
    plain, tied = [], []
    for i in range(40):
        for fn, out in ((subprocess.Popen, plain), (procinfo.popen_tied, tied)):
            t = time.monotonic()
            p = fn(["/bin/true"], start_new_session=True, close_fds=True)
            out.append(time.monotonic() - t)
            p.wait()
    report("Popen of /bin/true (vfork/posix_spawn path)", stats(plain))
    report("popen_tied of /bin/true (launcher thread, PDEATHSIG before exec)", stats(tied), "≤ 20 ms (fork, not vfork)")

    # 20 orphans: SITLs waiting for a client, their launcher gone (pid files, no leases)
    sleepers = []
    for i in range(20):
        n = BASE + i
        p = subprocess.Popen(
            [sys.executable, "-m", "sitlpool.sim", "-I", str(n), "--model", "quad"],
            cwd=tmp,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        sleepers.append(p)
    for i, p in enumerate(sleepers):
        connect_deadline = time.monotonic() + 10
        while procinfo.start_ticks(p.pid) is None and time.monotonic() < connect_deadline:
            time.sleep(0.01)
        pidfiles.write(
            s.data_dir,
            pidfiles.PidRecord(
                instance=BASE + i,
                pid=p.pid,
                pgid=p.pid,
                start_ticks=procinfo.start_ticks(p.pid),
                binary=sys.executable,
                exe=procinfo.exe(p.pid) or "",
            ),
        )
    time.sleep(1)
    t = time.monotonic()
    reps = reap_orphans(s)
    total = time.monotonic() - t
    for p in sleepers:
        p.wait()
    killed = sum(r.action in ("terminated", "killed") for r in reps)
    # the same scan when nothing is left to kill: the bookkeeping cost alone
    for i, p in enumerate(sleepers):
        pidfiles.write(
            s.data_dir, pidfiles.PidRecord(instance=BASE + i, pid=p.pid, pgid=p.pid, start_ticks=1, binary="x")
        )
    t = time.monotonic()
    reap_orphans(s)
    scan = time.monotonic() - t
    report("reap_orphans over 20 pid files: scan (no live orphan)", fmt(scan), "≤ 50 ms plus the kills")
    report(f"reap_orphans over 20 pid files: {killed} live orphans killed", fmt(total))
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
