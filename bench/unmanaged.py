"""Unmanaged SITL benchmarks: death detection (pid-based and heartbeat-based), attach-to-ready, monitor CPU."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import report, stats  # noqa: E402

from sim import connect, first_heartbeat  # noqa: E402

BASE = 2300


def foreign(n: int, cwd: Path):
    """A vehicle someone else runs, with its owner connected on SERIAL0."""
    p = subprocess.Popen(
        [sys.executable, "-m", "sitlpool.sim", "-I", str(n), "--model", "quad"],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    from sitlpool.instances import ports

    owner = connect(ports(n).serial0, time.monotonic() + 10)
    first_heartbeat(owner)
    time.sleep(0.3)
    return p, owner


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="sitlpool-bench-unmanaged-"))
    os.environ.update(SITLPOOL_DATA_DIR=str(tmp), SITLPOOL_POOL=f"{BASE}-{BASE + 9}")
    import logging

    logging.getLogger("sitlpool").setLevel(logging.ERROR)
    from sitlpool.process import UnmanagedManager

    m = UnmanagedManager()
    local, remote, attach = [], [], []
    for i in range(5):
        p, owner = foreign(BASE, tmp)
        t = time.monotonic()
        h = m.start(f"l{i}", instance=BASE)
        attach.append(time.monotonic() - t)
        t = time.monotonic()
        os.kill(p.pid, signal.SIGKILL)
        h.join()
        local.append(time.monotonic() - t)
        p.wait()
        owner.close()

        p, owner = foreign(BASE + 1, tmp)
        from sitlpool.instances import ports

        h = m.start(f"r{i}", endpoint=f"tcp:127.0.0.1:{ports(BASE + 1).serial1}", host_id="elsewhere")
        t = time.monotonic()
        os.kill(p.pid, signal.SIGSTOP)  # no exit to see: only the missing HEARTBEATs tell
        h.join()
        remote.append(time.monotonic() - t)
        os.killpg(p.pid, signal.SIGKILL)
        os.kill(p.pid, signal.SIGCONT)
        p.wait()
        owner.close()
        m.wait_termination(0)
    report("attach-to-ready on a booted SITL", stats(attach), "≤ 1.5 s")
    report("death detection, local SITL (pidfd)", stats(local), "≤ 100 ms")
    report("death detection, endpoint only (HEARTBEAT, defaults)", stats(remote), "≤ 3 s")

    p, owner = foreign(BASE + 2, tmp)
    owner.setblocking(False)
    h = m.start("cpu", instance=BASE + 2)
    time.sleep(1)
    t0, c0 = time.monotonic(), time.process_time()
    end = t0 + 10
    while time.monotonic() < end:
        try:
            owner.recv(65536)
        except BlockingIOError:
            pass
        time.sleep(0.1)
    cpu = (time.process_time() - c0) / (time.monotonic() - t0) * 100
    report("CPU of one attached handle (monitor + link threads)", f"{cpu:.2f}% of a core", "≤ 0.5%")
    h.kill(wait=True)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()


if __name__ == "__main__":
    main()
