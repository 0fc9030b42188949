import gc
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import hold_lease
from sitlpool.errors import InstanceBusy, InstanceError, LeaseReleased, LockDirError, NoFreeInstance, PortsBusy
from sitlpool.instances import ports
from sitlpool.leases import LeasePool, lock_path, parse_record, read_proc_locks


@pytest.fixture
def pool(lock_dir, instances):
    return LeasePool(lock_dir, instances[:3], check=False)


def flock_holders(path) -> int | None:
    st = os.stat(path)
    return read_proc_locks().get((f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", st.st_ino))


def test_acquire_writes_record_and_release_frees(pool, instances):
    lease = pool.acquire("sitlpool session f391b1 (tools-hop-test)")
    assert lease.instance == instances[0]
    assert lease.ports == ports(instances[0])
    owner, pid, since = parse_record(lease.path.read_bytes())
    assert (owner, pid) == ("sitlpool session f391b1 (tools-hop-test)", os.getpid())
    assert abs(since - time.time()) < 60
    assert lease.path.read_text().count("\t") == 2
    assert flock_holders(lease.path) == os.getpid()
    lease.release()
    lease.release()  # idempotent
    assert flock_holders(lease.path) is None
    assert lease.path.exists(), "a lock file is never unlinked"
    with pytest.raises(LeaseReleased):
        lease.set_owner("x")


def test_first_free_in_pool_order_and_requested(pool, instances, procs, lock_dir):
    hold_lease(procs, lock_dir, instances[0], "other process")
    with pool.acquire("me") as a:
        assert a.instance == instances[1]
        with pool.acquire("me too", instance=instances[2]) as b:
            assert b.instance == instances[2]
            with pytest.raises(NoFreeInstance, match="no free instance in pool .*3 leased"):
                pool.acquire("third")
    assert pool.holder(instances[1]) is None


def test_requested_busy_names_holder(pool, instances, procs, lock_dir):
    p = hold_lease(procs, lock_dir, instances[1], "sitlpool session abc123 (hop)")
    with pytest.raises(InstanceBusy) as e:
        pool.acquire("me", instance=instances[1])
    msg = str(e.value)
    assert f"instance {instances[1]} is leased to sitlpool session abc123 (hop) pid {p.pid}" in msg
    assert "pick another instance" in msg
    assert e.value.holder.pid == p.pid


def test_two_leases_in_one_process_exclude_each_other(lock_dir, instances):
    a = LeasePool(lock_dir, instances[:1], check=False)
    b = LeasePool(lock_dir, instances[:1], check=False)
    la = a.acquire("first")
    with pytest.raises(NoFreeInstance):
        b.acquire("second")
    with pytest.raises(InstanceBusy, match="leased to first pid"):
        a.acquire("again", instance=instances[0])
    la.release()
    b.acquire("second").release()


def test_lease_survives_garbage_collection(pool, instances):
    pool.acquire("dropped reference")
    gc.collect()
    h = pool.holder(instances[0])
    assert h is not None and h.pid == os.getpid() and h.owner == "dropped reference"
    from sitlpool.leases import _LIVE

    for lease in list(_LIVE.values()):
        if lease.instance == instances[0]:
            lease.release()


def test_sigkill_of_holder_frees_at_once(pool, instances, procs, lock_dir):
    p = hold_lease(procs, lock_dir, instances[0], "doomed")
    assert pool.holder(instances[0]).pid == p.pid
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert pool.holder(instances[0]) is None
    # the record still names the dead pid, but nobody locks it: free
    assert parse_record(lock_path(lock_dir, instances[0]).read_bytes())[1] == p.pid
    with pool.acquire("next", instance=instances[0]) as lease:
        assert lease.instance == instances[0]


def test_record_without_lock_is_free(pool, instances, lock_dir):
    lock_dir.mkdir(parents=True, exist_ok=True)
    lock_path(lock_dir, instances[0]).write_text(f"ghost\t{os.getpid()}\t{time.time()}\n")
    assert pool.status() == []
    with pool.acquire("me") as lease:
        assert lease.instance == instances[0]


def test_check_runs_under_the_lock_and_skips(pool, instances):
    seen = []

    def check(n):
        seen.append((n, flock_holders(lock_path(pool.lock_dir, n))))
        return "not this one" if n == instances[0] else None

    with pool.acquire("me", check=check) as lease:
        assert lease.instance == instances[1]
    assert seen == [(instances[0], os.getpid()), (instances[1], os.getpid())]
    with pytest.raises(PortsBusy, match="not this one"):
        pool.acquire("me", instance=instances[0], check=check)
    assert pool.status() == []  # the refused instance was not kept


def test_foreign_port_holder_is_skipped_and_named(lock_dir, instances):
    pool = LeasePool(lock_dir, instances[:2])  # default check: the port probe
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", ports(instances[0]).serial1))
    s.listen()
    u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    u.bind(("::", ports(instances[0]).rc_in))
    try:
        with pool.acquire("me") as lease:
            assert lease.instance == instances[1]
        with pytest.raises(PortsBusy) as e:
            pool.acquire("me", instance=instances[0])
        msg = str(e.value)
        me = f"pid {os.getpid()}"
        assert f"instance {instances[0]} is not leased but its ports are taken:" in msg
        assert f"tcp:{ports(instances[0]).serial1} (" in msg and me in msg
        assert f"udp:{ports(instances[0]).rc_in} (" in msg
    finally:
        s.close()
        u.close()
    with pool.acquire("me", instance=instances[0]):
        pass


def test_status_reads_every_lock_file_without_locking(pool, instances, procs, lock_dir):
    out_of_pool = instances[5]
    p1 = hold_lease(procs, lock_dir, instances[0], "mcardupilot session aaaaaa (x)")
    p2 = hold_lease(procs, lock_dir, out_of_pool, "someone else")
    (lock_dir / "instance-77.lock").write_bytes(b"\x00\xff garbage\tnot-a-pid\tNaN\n")
    (lock_dir / "README").write_text("not a lock file")
    st = pool.status()
    assert [(h.instance, h.pid, h.in_pool) for h in st] == [(instances[0], p1.pid, True), (out_of_pool, p2.pid, False)]
    assert st[0].owner == "mcardupilot session aaaaaa (x)" and st[0].age < 60
    assert "mcardupilot session aaaaaa (x) pid" in st[0].describe()
    # status never locked anything: both holders still alone on their files
    assert flock_holders(lock_path(lock_dir, instances[0])) == p1.pid


def test_status_cli_json_and_text(env, instances, procs, lock_dir):
    p = hold_lease(procs, lock_dir, instances[4], "cli test holder")
    r = subprocess.run(
        [sys.executable, "-m", "sitlpool.leases", "status", "--json"], env=env, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["lock_dir"] == str(lock_dir)
    [h] = doc["held"]
    assert (h["instance"], h["pid"], h["owner"], h["in_pool"]) == (instances[4], p.pid, "cli test holder", True)
    r = subprocess.run([sys.executable, "-m", "sitlpool.leases", "status"], env=env, capture_output=True, text=True)
    assert f"instance {instances[4]:>4}  pid {p.pid:>7}" in r.stdout and "cli test holder" in r.stdout


def test_garbage_lock_file_never_crashes(pool, instances, lock_dir):
    lock_dir.mkdir(parents=True)
    for junk in (b"", b"\t\t\t", b"\xff\xfe\x00" * 300, b"x" * 100000, b"owner\t-5\t-1e999\n"):
        lock_path(lock_dir, instances[0]).write_bytes(junk)
        assert pool.status() == []
        with pool.acquire("me", instance=instances[0]) as lease:
            assert pool.status()[0].owner == "me"
            assert parse_record(lease.path.read_bytes())[0] == "me"


def test_symlink_and_non_regular_refused(pool, instances, lock_dir, tmp_path):
    lock_dir.mkdir(parents=True)
    target = tmp_path / "elsewhere"
    target.write_text("")
    os.symlink(target, lock_path(lock_dir, instances[0]))
    with pytest.raises(LockDirError, match="symbolic link"):
        pool.acquire("me", instance=instances[0])
    os.mkfifo(lock_path(lock_dir, instances[1]))
    with pytest.raises(LockDirError, match="not a regular file"):
        pool.acquire("me", instance=instances[1])
    lock_path(lock_dir, instances[2]).mkdir()
    with pytest.raises(LockDirError, match="directory"):
        pool.acquire("me", instance=instances[2])
    assert target.read_text() == ""


def run_as_nobody(fn):
    """Run ``fn()`` in a forked child that became user nobody; return what it returned
    (or the text of what it raised). Forked, not exec'd: nobody may not be able to
    reach this venv's interpreter."""
    import pickle
    import pwd

    nobody = pwd.getpwnam("nobody")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            try:
                out = fn()
            except Exception as e:
                out = f"{type(e).__name__}: {e}"
            os.write(w, pickle.dumps(out))
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return pickle.loads(data)


@pytest.fixture
def public_tmp():
    """A directory other users can reach (pytest's tmp_path sits below a 0700 dir)."""
    import shutil
    import tempfile
    from pathlib import Path

    d = Path(tempfile.mkdtemp(prefix="sitlpool-test-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a child as another user")


@needs_root
def test_unwritable_lock_dir_is_a_clear_error(public_tmp, instances):
    d = public_tmp / "ro"
    d.mkdir()
    out = run_as_nobody(lambda: LeasePool(d, [instances[0]], check=False).acquire("nobody's test"))
    assert out.startswith("LockDirError: cannot create lock file") and "SITLPOOL_LOCK_DIR" in out, out
    assert list(d.iterdir()) == []


@needs_root
def test_shared_lock_dir_across_users(public_tmp, instances):
    import pwd

    nobody = pwd.getpwnam("nobody")
    d = public_tmp / "shared"
    d.mkdir()
    os.chown(d, 0, nobody.pw_gid)
    os.chmod(d, 0o2775)  # group-writable, setgid: new files belong to the group
    pool = LeasePool(d, [instances[0]], check=False)
    pool.acquire("root's run").release()
    f = lock_path(d, instances[0])
    assert f.stat().st_uid == 0
    assert f.stat().st_gid == nobody.pw_gid and f.stat().st_mode & 0o060 == 0o060

    def lease_as_nobody():
        lease = LeasePool(d, [instances[0]], check=False).acquire("nobody's run")
        return lease.instance, lease.record_written, os.getuid(), f.read_text()

    out = run_as_nobody(lease_as_nobody)
    assert isinstance(out, tuple), out
    inst, written, uid, text = out
    assert (inst, written, uid) == (instances[0], True, nobody.pw_uid)
    assert text.startswith("nobody's run\t")
    # and a file nobody cannot write is still leasable (read-only flock), the holder seen via /proc/locks
    os.chmod(f, 0o644)
    assert run_as_nobody(lambda: LeasePool(d, [instances[0]], check=False).acquire("ro").record_written) is False


def test_wait_is_served_after_release(pool, instances, procs, lock_dir):
    p = hold_lease(procs, lock_dir, instances[0], "holder", until_stdin_closes=True)
    one = LeasePool(lock_dir, [instances[0]], check=False)
    with pytest.raises(NoFreeInstance, match="after waiting 0.2s"):
        one.acquire("waiter", wait=0.2)
    threading.Timer(0.3, p.stdin.close).start()
    with one.acquire("waiter", wait=30) as lease:
        assert lease.instance == instances[0]
        assert p.wait(10) == 0


def test_status_concurrent_with_acquirers_never_false_busy(lock_dir, instances):
    """Acquirers on free instances must always succeed at once while status readers hammer them."""
    pool = LeasePool(lock_dir, instances[:2], check=False)
    stop = threading.Event()
    reader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"""
import time
from sitlpool.leases import LeasePool
p = LeasePool({str(lock_dir)!r}, [], check=False)
end = time.time() + 30
while time.time() < end:
    p.status(); p.holder({instances[0]})
""",
        ],
        start_new_session=True,
    )
    try:
        failures = 0
        for i in range(2000):
            try:
                pool.acquire("acq", instance=instances[i % 2]).release()
            except InstanceBusy:
                failures += 1
        assert failures == 0
    finally:
        stop.set()
        reader.kill()
        reader.wait()


CONTENDER = """
import os, random, sys, time
from sitlpool.leases import LeasePool, lock_path, read_proc_locks
from sitlpool.errors import NoFreeInstance
lock_dir, pool_s, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
pool = LeasePool(lock_dir, [int(x) for x in pool_s.split(",")], check=False)
rnd = random.Random(seed)
end = time.time() + 3
while time.time() < end:
    try:
        lease = pool.acquire(f"contender {os.getpid()}", wait=1)
    except NoFreeInstance:
        continue
    st = os.stat(lease.path)
    key = (f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", st.st_ino)
    h = pool.holder(lease.instance)
    if read_proc_locks().get(key) != os.getpid() or h.pid != os.getpid() or h.owner != f"contender {os.getpid()}":
        print("COLLISION", lease.instance, h, flush=True)
        sys.exit(3)
    time.sleep(rnd.random() * 0.005)
    lease.release()
"""


def test_contention_never_two_holders(lock_dir, instances, procs):
    pool_s = ",".join(map(str, instances[:3]))
    rnd = random.Random(1)
    done: list[int] = []
    live = [procs.python(CONTENDER, lock_dir, pool_s, i) for i in range(8)]
    deadline = time.monotonic() + 6
    seen_dups = []
    while time.monotonic() < deadline and any(p.poll() is None for p in live):
        # /proc/locks must never show two holders of one lock file
        fd = os.open("/proc/locks", os.O_RDONLY)
        data = os.read(fd, 1 << 20).decode()
        os.close(fd)
        keys = [ln.split()[5] for ln in data.splitlines() if " FLOCK " in ln and "->" not in ln]
        dups = {k for k in keys if keys.count(k) > 1}
        seen_dups += list(dups)
        if rnd.random() < 0.02:  # SIGKILL a random contender now and then, and replace it
            victim = rnd.choice(live)
            if victim.poll() is None:
                victim.kill()
                victim.wait()
                done.append(victim.returncode)
                live.remove(victim)
                live.append(procs.python(CONTENDER, lock_dir, pool_s, len(done) + 100))
        time.sleep(0.002)
    for p in live:
        p.wait(15)
    assert not seen_dups
    assert all(p.returncode == 0 for p in live), [p.returncode for p in live]
    assert LeasePool(lock_dir, [], check=False).status() == []


def test_wiped_lock_file_is_not_double_booked(lock_dir, instances, procs):
    """A scan keeps held files open; if the file is replaced meanwhile the new one is what counts."""
    pool = LeasePool(lock_dir, instances[:1], check=False)
    p = hold_lease(procs, lock_dir, instances[0], "first")
    with pytest.raises(NoFreeInstance):
        pool.acquire("me")  # caches the open file
    p.kill()
    p.wait()
    lock_path(lock_dir, instances[0]).unlink()  # a person wiped it (sitlpool never does)
    q = hold_lease(procs, lock_dir, instances[0], "second")
    with pytest.raises(InstanceBusy, match=f"second pid {q.pid}"):
        pool.acquire("me", instance=instances[0])


@needs_root
def test_port_holder_this_user_cannot_see(instances):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", ports(instances[0]).serial0))
    s.listen()
    try:
        from sitlpool.ports import probe

        def look():
            s.close()  # the forked child's copy: else it would find the socket in its own fds
            return probe(ports(instances[0]))

        out = run_as_nobody(look)
    finally:
        s.close()
    assert f"tcp:{ports(instances[0]).serial0} (a process this user cannot see (uid 0))" in out, out


def test_forked_child_does_not_keep_the_lease(pool, instances):
    lease = pool.acquire("parent")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: outlives the parent's release
        os.write(w, b"up")  # (the fork hook has run by now; before it, the copy exists)
        time.sleep(5)
        os._exit(0)
    os.read(r, 2)
    os.close(r)
    os.close(w)
    try:
        assert lease.released is False
        lease.release()
        other = LeasePool(pool.lock_dir, instances[:1], check=False)
        with other.acquire("next", instance=instances[0]) as again:
            assert again.instance == instances[0]
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_reserved_instances_cannot_be_requested(pool):
    for n in (0, 14, 15):
        with pytest.raises(InstanceError, match=f"instance {n}"):
            pool.acquire("me", instance=n)
    with pytest.raises(InstanceError, match="past 65535"):
        pool.acquire("me", instance=99999)


def test_random_garbage_never_crashes_parsing(pool, lock_dir, instances):
    from sitlpool.config import parse_pool
    from sitlpool.errors import ConfigError

    rnd = random.Random(7)
    for _ in range(3000):
        data = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 80)))
        owner, pid, since = parse_record(data)
        assert owner is None or (isinstance(owner, str) and owner.isprintable())
        assert pid is None or pid > 0
        text = "".join(rnd.choice("0123456789,- x") for _ in range(rnd.randint(0, 12)))
        try:
            parse_pool(text)
        except ConfigError as e:
            assert "pool" in str(e)
    lock_dir.mkdir(parents=True, exist_ok=True)
    with pool.acquire("holder", instance=instances[1]) as lease:
        for _ in range(50):
            lease.path.write_bytes(bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 200))))
            [h] = pool.status()
            assert h.pid == os.getpid() and isinstance(h.describe(), str)
