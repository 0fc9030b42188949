"""Lease benchmarks (issue: leases, ports and the pool). Prints median and p99 of each figure."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import report, stats, timeit  # noqa: E402

from sitlpool.instances import ports  # noqa: E402
from sitlpool.leases import LeasePool  # noqa: E402
from sitlpool.ports import busy_ports, name_holders, probe  # noqa: E402

BASE = 2000  # instances 2000-2019: ports far from anything real


def child(code: str, *args) -> subprocess.Popen:
    p = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
    )
    assert p.stdout.readline().strip() == "ready"
    return p


TEN_K_SOCKETS = """
    import resource, socket, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (12000, 12000))
    keep = []
    for i in range(5000):   # ports the kernel picks (32768 and up): none is an instance's
        t = socket.socket(); t.bind(("127.0.0.1", 0)); t.listen(); keep.append(t)
        u = socket.socket(socket.AF_INET6 if i % 2 else socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("::1" if i % 2 else "127.0.0.1", 0)); keep.append(u)
    print("ready", flush=True); sys.stdin.read()
    """


def interleaved(fns: dict, n: int) -> dict:
    """Each function timed ``n`` times, taking turns, so a load change on the machine
    moves every figure alike."""
    out = {k: [] for k in fns}
    for _ in range(n):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            out[k].append(time.perf_counter() - t)
    return out


def probe_figures(lock_dir, pool20, case: str) -> None:
    import socket

    from sitlpool.ports import bound, read_sockets

    plain = LeasePool(lock_dir, pool20, check=False)
    probed = LeasePool(lock_dir, pool20)
    p = ports(BASE)

    def bind_test():  # what the peer (mcardupilot) does: bind two of the ports, then let go
        for kind, port in ((socket.SOCK_STREAM, p.serial0), (socket.SOCK_DGRAM, p.rc_in)):
            s = socket.socket(socket.AF_INET, kind)
            s.bind(("0.0.0.0", port))
            s.close()

    def peer_style():
        lease = plain.acquire("b", instance=BASE)
        bind_test()
        lease.release()

    want = {("tcp", x) for x in p.tcp} | {("udp", x) for x in p.udp}
    r = interleaved(
        {
            "plain": lambda: plain.acquire("b", instance=BASE).release(),
            "probed": lambda: probed.acquire("b", instance=BASE).release(),
            "peer": peer_style,
            "probe": lambda: probe(p),
        },
        3000,
    )
    old = timeit(lambda: bound(want, read_sockets()), 100)
    report(f"acquire+release, no probe{case}", stats(r["plain"]))
    report(f"acquire+release, probe of all 6 ports{case}", stats(r["probed"]), "≤ the peer-style figure")
    report(f"  peer-style: acquire + bind test of 2 ports{case}", stats(r["peer"]))
    report(f"  the probe alone (12 kernel lookups, no bind){case}", stats(r["probe"]))
    report(f"  before: 4 full socket-table dumps{case}", stats(old))


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="sitlpool-bench-"))
    lock_dir = tmp / "leases"
    pool20 = list(range(BASE, BASE + 20))
    pool = LeasePool(lock_dir, pool20, check=False)

    def acq_rel():
        pool.acquire("bench", instance=BASE).release()

    acq_rel()
    report("acquire+release (no port probe)", stats(timeit(acq_rel, 20000)), "≤ 25 µs")
    probe_figures(lock_dir, pool20, "")
    many = child(TEN_K_SOCKETS)
    probe_figures(lock_dir, pool20, " (10k unrelated sockets open)")
    many.kill()
    many.wait()

    holder = child(
        """
        import sys, time
        from sitlpool.leases import LeasePool
        p = LeasePool(sys.argv[1], range(int(sys.argv[2]), int(sys.argv[2]) + 19), check=False)
        ls = [p.acquire("other process") for _ in range(19)]
        print("ready", flush=True); sys.stdin.read()
        """,
        lock_dir,
        BASE,
    )
    report(
        "first free with 19 of 20 held by another process",
        stats(timeit(lambda: pool.acquire("b").release(), 5000)),
        "≤ 100 µs",
    )
    holder.kill()
    holder.wait()

    # contention: 8 processes, each acquiring the first free of 20 and holding it briefly
    code = """
        import os, random, sys, time, json
        from sitlpool.leases import LeasePool
        p = LeasePool(sys.argv[1], range(int(sys.argv[2]), int(sys.argv[2]) + 20), check=False)
        rnd = random.Random(os.getpid()); lat = []
        print("ready", flush=True)
        end = time.time() + 3
        while time.time() < end:
            t = time.perf_counter(); l = p.acquire("contender", wait=5); lat.append(time.perf_counter() - t)
            time.sleep(rnd.random() * 0.002); l.release()
        print(json.dumps(lat), flush=True)
        """
    import json

    ps = [child(code, lock_dir, BASE) for _ in range(8)]
    lat = []
    for p in ps:
        lat += json.loads(p.stdout.readline())
        p.wait()
    report("acquire under 8-process contention (pool of 20)", stats(lat), "p99 ≤ 1 ms")

    # a waiter must be served within 100 ms of a release
    code = """
        import sys, time
        from sitlpool.leases import LeasePool
        p = LeasePool(sys.argv[1], [int(sys.argv[2])], check=False)
        print("ready", flush=True)
        for line in sys.stdin:
            l = p.acquire("holder"); print("held", flush=True); time.sleep(0.05)
            t = time.time(); l.release(); print(t, flush=True)
        """
    h = child(code, lock_dir, BASE)
    one = LeasePool(lock_dir, [BASE], check=False)
    lat = []
    for _ in range(50):
        h.stdin.write("go\n")
        h.stdin.flush()
        assert h.stdout.readline().strip() == "held"
        lease = one.acquire("waiter", wait=10)
        got = time.time()
        released = float(h.stdout.readline())
        lat.append(got - released)
        lease.release()
    h.kill()
    h.wait()
    report("waiter served after a release (wait > 0)", stats(lat), "≤ 100 ms")

    big = tmp / "big"
    big.mkdir()
    for n in range(1, 2001):
        (big / f"instance-{n}.lock").write_text(f"someone\t1\t{time.time()}\n")
    bigpool = LeasePool(big, range(40, 60), check=False)
    held = [bigpool.acquire("held", instance=n) for n in range(40, 60)]
    st = timeit(bigpool.status, 200)
    assert len(bigpool.status()) == 20
    report("status of 2000 lock files (20 held)", stats(st), "≤ 8 ms")
    for h in held:
        h.release()

    env = dict(os.environ, SITLPOOL_LOCK_DIR=str(big))
    cli = timeit(
        lambda: subprocess.run(
            [sys.executable, "-m", "sitlpool.leases", "status"], env=env, stdout=subprocess.DEVNULL, check=True
        ),
        20,
    )
    report("`python -m sitlpool.leases status` wall (2000 files)", stats(cli), "≤ 100 ms")

    # naming the SITL that holds a port, with 11k open fds on the machine
    fds = child(
        """
        import os, resource, sys
        resource.setrlimit(resource.RLIMIT_NOFILE, (12000, 12000))
        keep = [os.open("/dev/null", os.O_RDONLY) for _ in range(11000)]
        print("ready", flush=True); sys.stdin.read()
        """
    )
    sitl = child(
        """
        import ctypes, socket, sys
        ctypes.CDLL(None).prctl(15, b"sitlpool-sim", 0, 0, 0)   # PR_SET_NAME, as the simulator does
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen()
        print("ready", flush=True); sys.stdin.read()
        """,
        ports(BASE + 5).serial0,
    )
    p5 = ports(BASE + 5)
    assert probe(p5) and f"sitlpool-sim pid {sitl.pid}" in probe(p5)
    report("naming a SITL that holds a port (11k fds open)", stats(timeit(lambda: probe(p5), 200)), "≤ 20 ms")
    report(
        "  the same with a full /proc scan (no likely-SITL shortcut)",
        stats(timeit(lambda: name_holders(busy_ports(p5), first=[]), 20)),
    )
    for p in (fds, sitl):
        p.kill()
        p.wait()
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
