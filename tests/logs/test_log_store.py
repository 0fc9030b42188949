"""The log store: logs moved whole (renamed, or copied + fsync'd + renamed across
filesystems) then recorded; never half-moved (a full disk leaves the source in place and
says so in one line); listed newest first with filters; pinned; pruned by the budget
(never pinned, busy, in-place or another user's logs); ids that are paths refused for
agents; group-shared data dirs."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from logfiles import hop_log  # noqa: F401  (fixtures)

from sitlpool.errors import ConfigError
from sitlpool.logs import LogError, LogMoveError, LogStore, UnknownLog, budget_from_env, summary

FIELDS = {
    "session": "s-1234",
    "label": "my test",
    "holder": "alice pid 42",
    "instance": 41,
    "model": "+",
    "binary": "/x/arducopter",
    "binary_version": "ArduCopter V4.7.0-dev",
    "start": 1000.0,
    "end": 2000.0,
    "note": "kept in extra",
}


def digest(p: Path) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def sitl_dir(tmp_path: Path, hop_log: Path, n: int = 2) -> Path:
    d = tmp_path / "sitl" / "logs"
    d.mkdir(parents=True)
    for i in range(1, n + 1):
        shutil.copyfile(hop_log, d / f"{i:08d}.BIN")
    (d / "LASTLOG.TXT").write_text(f"{n}\n")
    return d


def test_collect_moves_whole_logs_and_records_them(tmp_path, data_dir, hop_log):
    src = sitl_dir(tmp_path, hop_log)
    want = digest(hop_log)
    store = LogStore(data_dir, 100)
    recs = store.collect(src, FIELDS)
    assert len(recs) == 2 and sorted(os.listdir(src)) == ["LASTLOG.TXT"]
    for r in recs:
        assert Path(r.path).parent == data_dir / "logs" / "s-1234"
        assert digest(r.path) == want and r.size == hop_log.stat().st_size
        assert r.kind == "bin" and r.managed and not r.pinned
        assert (r.session, r.label, r.instance, r.binary_version) == ("s-1234", "my test", 41, "ArduCopter V4.7.0-dev")
        assert r.extra == {"note": "kept in extra"} and r.owner == os.geteuid()
        assert r.source.endswith(".BIN") and "/" not in r.id
        on_disk = json.loads((data_dir / "logs" / "records" / f"{r.id}.json").read_text())
        assert on_disk["path"] == r.path
    assert store.get(recs[0].id) == recs[0]
    assert summary(store.path(recs[0].id))["vehicle"] == "ArduCopter"


def test_collect_skips_a_log_still_open(tmp_path, data_dir, hop_log):
    src = sitl_dir(tmp_path, hop_log)
    with open(src / "00000002.BIN", "rb"):  # a SITL still writing it
        recs = LogStore(data_dir, 100).collect(src, FIELDS)
    assert [Path(r.source).name for r in recs] == ["00000001.BIN"]
    assert (src / "00000002.BIN").exists()


def test_collect_records_a_tlog(tmp_path, data_dir, hop_log):
    src = sitl_dir(tmp_path, hop_log, 1)
    (src / "session.tlog").write_bytes(b"\xfd" * 1000)
    recs = LogStore(data_dir, 100).collect(src, FIELDS)
    assert sorted(r.kind for r in recs) == ["bin", "tlog"]
    assert next(r for r in recs if r.kind == "tlog").path.endswith(".tlog")


@pytest.fixture
def shm_dir():
    d = Path(tempfile.mkdtemp(prefix="sitlpool-logs-", dir="/dev/shm"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_across_filesystems_copied_synced_then_source_removed(tmp_path, shm_dir, hop_log):
    src = sitl_dir(tmp_path, hop_log, 1)
    assert os.stat(src).st_dev != os.stat(shm_dir).st_dev
    recs = LogStore(shm_dir / "data", 100).collect(src, FIELDS)
    assert len(recs) == 1 and digest(recs[0].path) == digest(hop_log)
    assert not (src / "00000001.BIN").exists()
    assert not [p for p in (shm_dir / "data").rglob("*") if p.name.endswith(".part")]


@pytest.fixture
def tiny_fs(tmp_path):
    d = tmp_path / "tiny"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(d)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.decode().strip()}")
    yield d
    subprocess.run(["umount", "-l", str(d)], check=False)


def test_full_disk_leaves_the_source_in_place_and_says_so(tmp_path, tiny_fs, hop_log):
    src = sitl_dir(tmp_path, hop_log, 1)  # 2.4 MB log, 1 MB filesystem
    store = LogStore(tiny_fs / "data", 100)
    with pytest.raises(LogMoveError) as e:
        store.collect(src, FIELDS)
    msg = str(e.value)
    assert "no space left on device" in msg and str(src / "00000001.BIN") in msg and "\n" not in msg
    assert e.value.kept == []
    assert digest(src / "00000001.BIN") == digest(hop_log)
    assert store.list() == []
    assert not [p for p in tiny_fs.rglob("*") if p.is_file()]  # no partial copy left


def test_file_size_limit_is_a_full_disk_too(tmp_path, shm_dir, hop_log):
    """RLIMIT_FSIZE makes writes fail with EFBIG: treated as a full disk (in a child)."""
    src = sitl_dir(tmp_path, hop_log, 1)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (500_000, 500_000))
            try:
                LogStore(shm_dir / "data", 100).collect(src, FIELDS)
                out = "kept"
            except LogMoveError as e:
                out = str(e)
            os.write(w, out.encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    os.waitpid(pid, 0)
    assert "no space left on device" in out
    assert digest(src / "00000001.BIN") == digest(hop_log)
    assert not [p for p in shm_dir.rglob("*") if p.is_file()]


def test_record_failure_moves_the_log_back(tmp_path, data_dir, hop_log):
    src = sitl_dir(tmp_path, hop_log, 1)
    (data_dir / "logs").mkdir()
    (data_dir / "logs" / "records").write_text("not a directory")
    with pytest.raises(LogMoveError, match="it stays at"):
        LogStore(data_dir, 100).collect(src, FIELDS)
    assert digest(src / "00000001.BIN") == digest(hop_log)
    assert not list((data_dir / "logs").glob("*/*.BIN"))


def test_list_filters_newest_first_pin_unpin(tmp_path, data_dir, hop_log):
    store = LogStore(data_dir, 100)
    ids = []
    for i, (session, label) in enumerate((("a", "x"), ("b", "y"), ("a", "y"))):
        d = tmp_path / f"s{i}"
        d.mkdir()
        shutil.copyfile(hop_log, d / "00000001.BIN")
        ids.append(store.collect(d, {"session": session, "label": label, "end": 1000.0 + i})[0].id)
    assert [r.id for r in store.list()] == ids[::-1]
    assert [r.id for r in store.list(session="a")] == [ids[2], ids[0]]
    assert [r.id for r in store.list(label="y")] == [ids[2], ids[1]]
    assert [r.id for r in store.list(since=1000.5)] == [ids[2], ids[1]]
    assert store.list(since="1h") == []  # ended in 1970
    with pytest.raises(LogError, match="since="):
        store.list(since="yesterday-ish")
    assert store.pin(ids[0]).pinned and store.get(ids[0]).pinned
    assert not store.unpin(ids[0]).pinned and not store.get(ids[0]).pinned


@pytest.mark.parametrize("bad", ["../../etc/passwd", "/etc/passwd", "20261201-124301-a1b2c3/../x", "", "x" * 500])
def test_ids_that_are_paths_are_refused_for_agents(data_dir, bad):
    store = LogStore(data_dir, 100)
    with pytest.raises(UnknownLog) as e:
        store.resolve(bad, allow_paths=False)
    assert "is not a log id" in str(e.value)
    with pytest.raises(UnknownLog):
        store.get(bad)


def test_people_may_give_paths(data_dir, hop_log):
    store = LogStore(data_dir, 100)
    assert store.resolve(str(hop_log), allow_paths=True) == hop_log
    with pytest.raises(UnknownLog, match="neither a kept log's id nor a file"):
        store.resolve("/no/such.BIN", allow_paths=True)
    with pytest.raises(UnknownLog, match="no kept log 20261201-124301-a1b2c3"):
        store.resolve("20261201-124301-a1b2c3", allow_paths=True)


def test_unmanaged_log_recorded_in_place_never_moved_or_pruned(tmp_path, data_dir, hop_log):
    src = sitl_dir(tmp_path, hop_log, 1) / "00000001.BIN"
    old = time.time() - 3600
    os.utime(src, (old, old))
    store = LogStore(data_dir, 100)
    r = store.record_in_place(src, {"label": "unmanaged"})
    assert not r.managed and r.path == str(src.resolve()) and src.exists()
    assert store.prune(budget_mb=0.001) == [] and src.exists()


def _fill(store: LogStore, tmp_path: Path, n: int, size: int = 1_000_000, age: float = 3600) -> list:
    recs = []
    for i in range(n):
        d = tmp_path / f"fill{i}"
        d.mkdir()
        p = d / "00000001.BIN"
        p.write_bytes(b"\xa3\x95" + b"\0" * (size - 2))
        t = time.time() - age + i
        os.utime(p, (t, t))
        recs.append(store.collect(d, {"session": f"s{i}", "end": t})[0])
    return recs


def test_prune_oldest_unpinned_first_within_budget(tmp_path, data_dir):
    store = LogStore(data_dir, 2.5)  # MB: room for two of the five 1 MB logs
    recs = _fill(store, tmp_path, 5)
    store.pin(recs[0].id)  # the oldest, pinned: never pruned
    gone = store.prune()
    assert [r.id for r in gone] == [recs[1].id, recs[2].id, recs[3].id]
    left = {r.id for r in store.list()}
    assert left == {recs[0].id, recs[4].id}
    assert not Path(recs[1].path).exists() and not Path(recs[1].path).parent.exists()
    assert store.usage() <= 2.5e6


def test_prune_never_a_log_being_written(tmp_path, data_dir):
    store = LogStore(data_dir, 0.5)
    old, fresh = _fill(store, tmp_path, 2)
    now = time.time()
    os.utime(fresh.path, (now, now))  # written a moment ago
    with open(old.path, "rb"):  # and this one is open
        assert store.prune() == []
    assert [r.id for r in store.prune()] == [old.id]


def run_as_nobody(fn):
    """``fn()`` in a forked child that became user nobody (as tests/leases does)."""
    import pickle

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
def shared_data_dir():
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")
    d = Path(tempfile.mkdtemp(prefix="sitlpool-logs-shared-"))
    os.chmod(d, 0o755)
    data = d / "data"
    data.mkdir()
    os.chown(data, 0, pwd.getpwnam("nobody").pw_gid)
    os.chmod(data, 0o3775)  # group-shared, setgid and sticky
    yield data
    shutil.rmtree(d, ignore_errors=True)


def test_group_shared_store_others_read_but_never_delete(tmp_path, shared_data_dir):
    store = LogStore(shared_data_dir, 0.5)
    mine = _fill(store, tmp_path, 2)
    for d in (shared_data_dir / "logs", shared_data_dir / "logs" / "records"):
        assert d.stat().st_mode & 0o3070 == 0o3070  # group-writable, setgid, sticky as the data dir
    private = mine[1]
    os.chmod(shared_data_dir / "logs" / "records" / f"{private.id}.json", 0o600)

    def as_nobody():
        s = LogStore(shared_data_dir, 0.5)
        seen = [r.id for r in s.list()]
        try:
            s.get(private.id)
            got = "read"
        except LogError as e:
            got = str(e)
        pruned = s.prune()
        head = Path(s.path(mine[0].id)).read_bytes()[:2]
        return seen, got, [r.id for r in pruned], head

    def pin_as_nobody():
        s = LogStore(shared_data_dir, 0.5)
        pinned = s.pin(mine[0].id).pinned
        try:
            os.unlink(s.records / f"{mine[0].id}.json")
            unlinked = "unlinked"
        except PermissionError:
            unlinked = "refused"
        return pinned, unlinked

    assert run_as_nobody(pin_as_nobody) == (True, "refused")
    assert store.get(mine[0].id).pinned
    store.unpin(mine[0].id)
    seen, got, pruned, head = run_as_nobody(as_nobody)
    assert seen == [mine[0].id]  # the private record is not listed
    assert "belongs to another user" in got
    assert pruned == [] and head == b"\xa3\x95"
    assert all(Path(r.path).exists() for r in mine)


def test_budget_from_the_environment(monkeypatch):
    monkeypatch.delenv("SITLPOOL_LOG_BUDGET_MB", raising=False)
    assert budget_from_env() == 2000
    monkeypatch.setenv("SITLPOOL_LOG_BUDGET_MB", "150")
    assert LogStore("/nonexistent", None).budget_mb == 150
    for bad in ("0", "-3", "lots", "nan", "inf"):
        monkeypatch.setenv("SITLPOOL_LOG_BUDGET_MB", bad)
        with pytest.raises(ConfigError, match="SITLPOOL_LOG_BUDGET_MB"):
            budget_from_env()


def test_list_with_1000_logs_is_fast(tmp_path, data_dir):
    store = LogStore(data_dir, 10_000)
    recs = _fill(store, tmp_path, 20, size=100)
    proto = json.loads((data_dir / "logs" / "records" / f"{recs[0].id}.json").read_text())
    for i in range(980):
        rid = f"20260101-000000-{i:06x}"
        (data_dir / "logs" / "records" / f"{rid}.json").write_text(json.dumps(dict(proto, id=rid, end=100.0 + i)))
    store.list()
    t = time.process_time()  # CPU time: the machine is shared by parallel test workers
    got = store.list()
    took = time.process_time() - t
    assert len(got) == 1000 and got[0].id == recs[-1].id
    assert took < 0.1


def test_current_log_follows_lastlog(tmp_path, hop_log):
    from sitlpool.logs import current_log, sitl_logs

    d = sitl_dir(tmp_path, hop_log, 2)
    shutil.copyfile(hop_log, d / "00000010.BIN")
    assert [p.name for p in sitl_logs(d)] == ["00000001.BIN", "00000002.BIN", "00000010.BIN"]
    assert current_log(d).name == "00000002.BIN"  # LASTLOG.TXT says 2
    (d / "LASTLOG.TXT").unlink()
    assert current_log(d).name == "00000010.BIN"
    assert current_log(tmp_path / "none") is None


def test_a_log_another_user_owns_is_one_clear_line(shared_data_dir, hop_log):
    private = shared_data_dir / "private.BIN"
    shutil.copyfile(hop_log, private)
    os.chmod(private, 0o600)
    out = run_as_nobody(lambda: summary(private))
    assert out == f"LogError: cannot read log {private}: Permission denied"
