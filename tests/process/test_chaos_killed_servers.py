"""Chaos: MCP servers killed (SIGKILL, SIGTERM, stdin closed) at random moments while their
open_sitl calls are in flight. Nothing may be left running, every instance must be leasable
afterwards, and no two live vehicles may ever share an instance."""

import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest
from test_no_orphan_no_wrongful_kill import send_mcp

from conftest import wait_for
from sitlpool import procinfo
from sitlpool.config import load_settings
from sitlpool.leases import LeasePool
from sitlpool.process import reap_orphans

SERVERS = 9  # in all
AT_ONCE = 3  # each with 2 open_sitl in flight, on a pool of 6 instances


def _dying(pid: int) -> bool:
    """The process is exiting or has a SIGKILL pending (its parent died): no longer a vehicle."""
    try:
        flags = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[6])
        status = open(f"/proc/{pid}/status").read()
    except (OSError, IndexError, ValueError):
        return True
    if flags & 0x4:  # PF_EXITING
        return True
    pending = 0
    for line in status.splitlines():
        if line.startswith(("SigPnd:", "ShdPnd:")):
            pending |= int(line.split()[1], 16)
    return bool(pending & (1 << (signal.SIGKILL - 1)))


def parents() -> set[int]:
    """The pids that have at least one child (one /proc scan)."""
    return {procinfo.ppid(int(d)) for d in os.listdir("/proc") if d.isdigit()}


def outliving(sessions_dir: str, servers: set[int]) -> list[str]:
    """Processes running in a session dir (SITLs, before or after exec) whose launcher is gone
    and that are neither dead nor dying: they outlived their server."""

    def candidates():
        out = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                cwd = os.readlink(f"/proc/{d}/cwd")
            except OSError:
                continue
            pid = int(d)
            if cwd.startswith(sessions_dir + "/") and procinfo.is_alive(pid) and procinfo.ppid(pid) not in servers:
                out.append(pid)
        return out

    found = [p for p in candidates() if not _dying(p)]
    if found:
        time.sleep(0.05)  # a server exiting right now reparents its children just before it signals them
    return [f"pid {p} ({' '.join(procinfo.cmdline(p))})" for p in found if procinfo.is_alive(p) and not _dying(p)]


def vehicles_by_instance(sessions_dir: str) -> dict[str, list[int]]:
    """Live SITL processes (exec'd, not dying) by the session dir they run in."""
    out: dict[str, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        pid = int(d)
        try:
            cwd = os.readlink(f"/proc/{d}/cwd")
        except OSError:
            continue
        if os.path.dirname(cwd) != sessions_dir or not procinfo.is_alive(pid):
            continue
        if "sitlpool.sim" not in procinfo.cmdline(pid) or _dying(pid):
            continue
        out.setdefault(os.path.basename(cwd), []).append(pid)
    return out


# A SITL slow to reach accept() (a loaded machine): it widens the launch window in which a
# launcher's death used to leave a SITL waiting forever for its first client.
SLOW_SITL = """#!{python}
import os, random, sys, time
time.sleep(random.uniform(0, 0.8))
os.execv(sys.executable, [sys.executable, "-m", "sitlpool.sim", *sys.argv[1:]])
"""


@pytest.mark.below_256  # a configured binary, even a fake one, runs only below 256
def test_servers_killed_mid_open_sitl_leave_nothing(procs, env, data_dir, instances, tmp_path):
    slow = tmp_path / "slow-sitl"
    slow.write_text(SLOW_SITL.format(python=sys.executable))
    slow.chmod(0o755)
    env = dict(env, SITLPOOL_SITL_BINARY=str(slow), SITLPOOL_SPEEDUP="5")
    seed = int(os.environ.get("SITLPOOL_CHAOS_SEED", time.time_ns() % 10**6))
    rnd = random.Random(seed)
    sessions_dir = str(data_dir / "sessions")
    shared: list[str] = []
    stop = threading.Event()
    launched: set[int] = set()

    def watch():
        while not stop.is_set():
            for n, pids in vehicles_by_instance(sessions_dir).items():
                launched.update(pids)
                if len(pids) > 1:
                    shared.append(f"instance {n}: {pids}")
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    running: list[list] = []  # [server, kill at (None: at its first launch), how]
    started = ended = 0
    how_ended: list[str] = []
    outlived: set[str] = set()
    try:
        total = SERVERS
        while ended < total:
            if ended == total - 1 and not launched and total < 3 * SERVERS:
                total += SERVERS  # a loaded machine killed every server before its SITL ran: more rounds
            while started < total and len(running) < AT_ONCE:
                p = procs.popen(
                    [sys.executable, "-m", "sitlpool", "serve"],
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
                send_mcp(p, ("open_sitl", {"speedup": 5}), ("open_sitl", {"speedup": 5, "wait_s": 1}))
                how = rnd.choice(["SIGKILL", "SIGKILL", "SIGTERM", "SIGINT", "stdin closed"])
                # most die right after they fork a SITL (mid-launch), the others at any moment
                when = None if rnd.random() < 0.7 else time.monotonic() + rnd.uniform(0.8, 3.5)
                running.append([p, when, how])
                started += 1
            time.sleep(0.01)
            forked = parents() if any(when is None for _, when, _ in running) else set()
            for item in list(running):
                p, when, how = item
                if when is None:
                    if p.pid in forked:
                        item[1] = time.monotonic() + rnd.uniform(0, 0.3)
                    continue
                if time.monotonic() < when:
                    continue
                if how == "stdin closed":
                    p.stdin.close()
                else:
                    p.send_signal(getattr(signal, how))
                p.wait(30)
                running.remove(item)
                outlived.update(outliving(sessions_dir, {q.pid for q, _, _ in running}))
                ended += 1
                how_ended.append(how)
    finally:
        stop.set()
        watcher.join()
    where = f"(seed {seed}; servers ended by {how_ended})"
    assert not outlived, f"SITLs outlived their server: {outlived} {where}"
    assert not shared, f"two live vehicles on one instance {shared} {where}"
    assert launched, f"no SITL was ever launched {where}"
    # nothing left running, before any reaping: every SITL died with its server
    wait_for(lambda: not vehicles_by_instance(sessions_dir), timeout=15, what=f"every SITL gone {where}")
    settings = load_settings()
    reports = reap_orphans(settings)
    assert all(r.action == "gone" for r in reports), f"{[r.as_dict() for r in reports]} {where}"
    pool = LeasePool.from_settings(settings)  # ports probed: a stray SITL would make an instance unusable
    for n in instances:
        pool.acquire("after the chaos", instance=n).release()
    assert not any(procinfo.is_alive(p) for p in launched)
