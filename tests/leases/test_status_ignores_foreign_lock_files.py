"""`status` lists leases on sitlpool's own lock files only: `instance-0150.lock`,
`instance-١٥٠.lock` or `instance-99999.lock`, held by another tool, are no instance."""

import json
import subprocess
import sys

from conftest import wait_for

FLOCKER = """
import fcntl, os, sys, time
fds = [os.open(p, os.O_RDWR | os.O_CREAT) for p in sys.argv[1:]]
for fd in fds:
    fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(3600)
"""


def test_non_canonical_lock_names_are_not_instances(env, procs, lock_dir, instances):
    lock_dir.mkdir(parents=True, exist_ok=True)
    n = instances[0]
    names = [f"instance-0{n}.lock", "instance-١٥٠.lock", "instance-99999.lock", f"instance-{n}.lock.bak"]
    p = procs.python(FLOCKER, *(lock_dir / x for x in names), stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("held")
    for cmd in (["-m", "sitlpool.leases", "status", "--json"], ["-m", "sitlpool", "status", "--json"]):
        r = subprocess.run([sys.executable, *cmd], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["held"] == [], r.stdout
    from sitlpool.leases import LeasePool

    pool = LeasePool(lock_dir, [n], check=False)
    assert pool.status() == [] and pool.free() == [n]
    wait_for(lambda: pool.acquire("mine", instance=n).release() is None, what="the canonical file stays free")
