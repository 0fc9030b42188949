"""The lock and session directories attacked a second time (issue 20, follow-up): files
planted where lock files belong, and a group member unlinking another's records in a
group-shared data directory."""

import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path

import pytest

from sitlpool import pidfiles
from sitlpool.config import load_settings
from sitlpool.errors import BadLockFile
from sitlpool.leases import LeasePool, lock_path
from sitlpool.status import instances_document, pool_status

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")


def plant_socket(path):
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()  # the socket file stays


def test_a_socket_for_a_lock_file_blocks_only_its_instance(lock_dir, instances):
    """A socket named instance-<n>.lock (anyone who may write the lock directory can bind
    one): opening it fails with ENXIO, which was a lock directory error, so every pool scan
    failed, free instances or not."""
    lock_dir.mkdir()
    plant_socket(lock_path(lock_dir, instances[0]))
    with LeasePool(lock_dir, instances[:2], check=False).acquire("me") as lease:
        assert lease.instance == instances[1]


def test_status_never_counts_an_unusable_lock_file_free(env, lock_dir, instances):
    """A symlink, a directory, a FIFO or a socket where a pool instance's lock file belongs:
    acquire skips the instance, and status counted it free (without saying why)."""
    lock_dir.mkdir()
    a, b, c, d, e = instances[:5]
    os.symlink("/etc/passwd", lock_path(lock_dir, a))
    lock_path(lock_dir, b).mkdir()
    os.mkfifo(lock_path(lock_dir, c))
    plant_socket(lock_path(lock_dir, d))
    settings = load_settings(pool=f"{a}-{e}")
    doc = pool_status(settings, all_=True)
    assert doc["free"] == [e] and doc["free_count"] == 1, doc["free"]
    for n, kind in ((a, "a symbolic link"), (b, "a directory"), (c, "a FIFO"), (d, "a socket")):
        assert any(f"instance-{n}.lock is {kind}" in u for u in doc["unreadable"]), (n, doc["unreadable"])
    listed = instances_document(settings, LeasePool.from_settings(settings, check=False), all_=True)
    assert listed["free"] == [e] and len(listed["unusable"]) == 4
    with LeasePool.from_settings(settings, check=False).acquire("me") as lease:
        assert lease.instance == e  # what status called free is what acquire takes


@pytest.fixture
def shared_data_dir():
    """A data dir shared with group nobody (2775: group-writable, setgid), reachable by it."""
    import pwd

    nobody = pwd.getpwnam("nobody")
    top = Path(tempfile.mkdtemp(prefix="sitlpool-h1-"))
    os.chmod(top, 0o755)
    d = top / "data"
    d.mkdir()
    os.chown(d, 0, nobody.pw_gid)
    os.chmod(d, 0o2775)
    yield d
    shutil.rmtree(top, ignore_errors=True)


def as_nobody(fn):
    """``fn()`` in a forked child that became user nobody; what it returned, or what it raised as text."""
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


@needs_root
def test_a_member_cannot_unlink_another_users_session_records(shared_data_dir, instances):
    """sessions/ and sessions/<n>/ were made 2775: no sticky bit, so any member of the group
    could unlink (or replace) another user's sitl.pid and run.json, and with them what
    proves that user's SITL and leftovers to `reap`."""
    n = instances[0]
    pidfiles.write(shared_data_dir, pidfiles.PidRecord(n, 999999, 999999, 1, "arducopter", owner="root's"))
    pidfiles.write_run(shared_data_dir, pidfiles.RunRecord(n, "c" * 32, 999999, 1, 999999, 1, ["sh"], "root's"))
    d = pidfiles.session_dir(shared_data_dir, n)
    for path in (d.parent, d):
        mode = os.stat(path).st_mode
        assert stat.S_IMODE(mode) == 0o3775, (path, oct(mode))

    def unlink_both():
        out = []
        for name in (pidfiles.PID_FILE, pidfiles.RUN_FILE):
            try:
                os.unlink(d / name)
                out.append(f"unlinked {name}")
            except PermissionError:
                out.append("refused")
        return out

    assert as_nobody(unlink_both) == ["refused", "refused"]
    assert pidfiles.load(shared_data_dir, n) is not None and pidfiles.load_run(shared_data_dir, n) is not None
    # the other side of the sticky bit: a member cannot replace root's stale record either,
    # and a launcher can say so before it launches (pool scans move on)
    why = as_nobody(lambda: pidfiles.foreign_record(shared_data_dir, n))
    assert why and "belongs to uid 0" in why and str(d / pidfiles.PID_FILE) in why, why
    assert pidfiles.foreign_record(shared_data_dir, n) is None  # root's own (and root may)


def test_a_hard_link_between_lock_files_is_refused(env, lock_dir, instances):
    """`ln instance-A.lock instance-B.lock` (any member who may write a lock file may link it):
    one flock stood for two instances, so leasing A showed B leased to A's holder, and B was
    refused as "leased to" someone who never asked for it."""
    a, b, c = instances[:3]
    pool = LeasePool(lock_dir, [a, b, c], check=False)
    pool.acquire("first", instance=a).release()
    os.link(lock_path(lock_dir, a), lock_path(lock_dir, b))
    with pytest.raises(BadLockFile, match="hard link"):
        pool.acquire("second", instance=b)
    with pool.acquire("third") as lease:
        assert lease.instance == c  # the scan skips both names
    doc = pool_status(load_settings(pool=f"{a}-{c}"), all_=True)
    assert doc["free"] == [c], doc["free"]
    assert sum("hard link" in u for u in doc["unreadable"]) == 2, doc["unreadable"]


@needs_root
def test_another_users_fifo_or_unreadable_lock_file_is_never_leased_or_free(shared_data_dir, instances):
    """For a user who may not write a lock file, the read-only fallback returned the fd
    unchecked: another user's FIFO (or directory) became a "lease"; and a lock file this
    user cannot read at all was counted free by status, though acquire skips it."""
    a, b, c = instances[:3]
    lock_dir = shared_data_dir / "leases"
    lock_dir.mkdir()
    os.chown(lock_dir, 0, shared_data_dir.stat().st_gid)
    os.chmod(lock_dir, 0o3775)
    os.mkfifo(lock_path(lock_dir, a))  # root's, mode 0644 after the umask: nobody may only read it
    lock_path(lock_dir, b).write_text("")
    os.chmod(lock_path(lock_dir, b), 0)
    settings = load_settings(data_dir=str(shared_data_dir), pool=f"{a}-{c}")

    def as_other_user():
        with LeasePool(lock_dir, [a, b, c], check=False).acquire("nobody's run") as lease:
            got = lease.instance
        return got, pool_status(settings, all_=True)["free"]

    out = as_nobody(as_other_user)
    assert out == (c, [c]), out
