"""The log store against a hostile co-user of a group-shared data dir and planted files:
a record's JSON is data anyone in the group may write (records are group-writable so that
members pin each other's logs), so the store trusts no path or id in it. Pruning deletes
only a store file named by its record's id, never a file a record points at elsewhere;
a record whose id is not its file's name is not a record; a kept log that is a FIFO, a
device or a symlink is refused in one line instead of read."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

from sitlpool.logs import LogError, LogStore, summary

ID = "20200101-000000-abcdef"
OLD = 1_000_000_000.0  # 2001: older than any real log, pruned first


def plant(records: Path, name_id: str, **fields) -> Path:
    records.mkdir(parents=True, exist_ok=True)
    doc = {"id": name_id, "kind": "bin", "size": 10, "managed": True, "end": OLD, **fields}
    p = records / f"{name_id}.json"
    p.write_text(json.dumps(doc))
    return p


def store_with_one_log(data_dir: Path, tmp_path: Path) -> LogStore:
    store = LogStore(data_dir, 0.001)
    src = tmp_path / "sitl"
    src.mkdir()
    (src / "00000001.BIN").write_bytes(b"\xa3\x95" + b"\0" * 2000)
    t = time.time() - 3600
    os.utime(src / "00000001.BIN", (t, t))
    store.collect(src, {"session": "s1", "end": t})
    return store


def test_prune_never_deletes_a_file_a_planted_record_points_at(tmp_path, data_dir):
    victim = tmp_path / "home" / "thesis.tex"
    victim.parent.mkdir()
    victim.write_bytes(b"years of work" * 1000)
    old = time.time() - 86400
    os.utime(victim, (old, old))
    store = store_with_one_log(data_dir, tmp_path)
    plant(store.records, ID, path=str(victim), size=victim.stat().st_size)
    store.prune()
    assert victim.exists(), "prune deleted a file outside the log store that a planted record named"


def test_prune_never_follows_a_dotdot_path_out_of_the_store(tmp_path, data_dir):
    victim = data_dir / "leases" / "secret.BIN"
    victim.parent.mkdir()
    victim.write_bytes(b"\xa3\x95" * 1000)
    old = time.time() - 86400
    os.utime(victim, (old, old))
    store = store_with_one_log(data_dir, tmp_path)
    plant(store.records, ID, path=str(store.root / "s1" / ".." / ".." / "leases" / f"{ID}.BIN"))
    os.rename(victim, victim.with_name(f"{ID}.BIN"))
    store.prune()
    assert victim.with_name(f"{ID}.BIN").exists(), "prune followed '..' out of the store"


def test_a_record_whose_id_is_a_path_is_not_listed_nor_unlinked(tmp_path, data_dir):
    outside = data_dir / "config.json"
    outside.write_text("{}")
    store = store_with_one_log(data_dir, tmp_path)
    # a store log, the planted record's id walking out of records/
    bad_id = "../config"
    log = store.root / "s1" / "x.BIN"
    log.write_bytes(b"\xa3\x95" * 1000)
    old = time.time() - 86400
    os.utime(log, (old, old))
    (store.records / "20200101-000000-000000.json").write_text(
        json.dumps({"id": bad_id, "kind": "bin", "path": str(log), "size": 2000, "managed": True, "end": OLD})
    )
    assert all(r.id != bad_id for r in store.list()), "a record whose id is not its file name was listed"
    store.prune()
    assert outside.exists(), "prune unlinked records/<id>.json with the id taken from a planted record"


def test_a_kept_log_that_is_a_fifo_is_refused_not_read_forever(tmp_path, data_dir):
    store = LogStore(data_dir, 100)
    fifo = tmp_path / "00000001.BIN"
    os.mkfifo(fifo)
    plant(store.records, ID, path=str(fifo), managed=False)
    out: list = []

    def read():
        try:
            out.append(summary(store.resolve(ID)))
        except LogError as e:
            out.append(e)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(5)
    if t.is_alive():  # unblock the reader: open the FIFO for writing and close it
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(5)
        pytest.fail("a record pointing at a FIFO blocked the reader")
    assert isinstance(out[0], LogError) and "regular file" in str(out[0])


def test_a_symlinked_log_in_the_store_is_refused(tmp_path, data_dir):
    target = tmp_path / "elsewhere.BIN"
    target.write_bytes(b"\xa3\x95" * 100)
    store = store_with_one_log(data_dir, tmp_path)
    link = store.root / "s1" / f"{ID}.BIN"
    link.symlink_to(target)
    plant(store.records, ID, path=str(link))
    with pytest.raises(LogError, match="regular file|outside"):
        store.resolve(ID)
    store.prune(budget_mb=0.000001)
    assert target.exists()


@pytest.fixture
def shared_data_dir():
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")
    d = Path(tempfile.mkdtemp(prefix="sitlpool-logs-hostile-"))
    os.chmod(d, 0o755)
    data = d / "data"
    data.mkdir()
    os.chown(data, 0, pwd.getpwnam("nobody").pw_gid)
    os.chmod(data, 0o3775)
    yield data
    shutil.rmtree(d, ignore_errors=True)


def test_a_co_user_rewriting_my_record_cannot_make_my_prune_delete_my_file(tmp_path, shared_data_dir):
    """Records are group-writable in a shared store (members pin each other's logs): a
    member rewrites my record to point at a file of mine; my prune must not delete it."""
    from test_log_store import run_as_nobody

    store = LogStore(shared_data_dir, 0.001)
    src = tmp_path / "sitl"
    src.mkdir()
    (src / "00000001.BIN").write_bytes(b"\xa3\x95" + b"\0" * 2000)
    t = time.time() - 3600
    os.utime(src / "00000001.BIN", (t, t))
    mine = store.collect(src, {"session": "s1", "end": t})[0]
    victim = tmp_path / "mine.db"
    victim.write_bytes(b"precious" * 1000)
    os.utime(victim, (t, t))
    rec = store.records / f"{mine.id}.json"
    os.chmod(rec, 0o664)
    os.chown(victim.parent, 0, 0)

    def rewrite():
        doc = json.loads(rec.read_text())
        doc["path"] = str(victim)
        with open(rec, "r+") as f:
            f.write(json.dumps(doc))
            f.truncate()
        return "rewritten"

    assert run_as_nobody(rewrite) == "rewritten"
    store.prune()
    assert victim.exists(), "my prune deleted my own file that a co-user's rewritten record named"


# ---- hostile DataFlash files: one line (LogError) or a result, never another exception ----------

HEAD = b"\xa3\x95"


def fmt(ty: int, length: int, name: bytes, form: bytes, cols: bytes) -> bytes:
    import struct

    return HEAD + b"\x80" + struct.pack("<BB4s16s64s", ty, length, name, form, cols)


def read_all(p: Path) -> None:
    from sitlpool.logs import compare, fields, messages

    for fn in (
        lambda: summary(p),
        lambda: fields(p, ["CTUN.Alt"], None, None, 50),
        lambda: messages(p, "CTUN", None, None, 0, 10),
        lambda: compare(p, p),
    ):
        try:
            fn()
        except LogError:
            pass


def test_a_fmt_that_redefines_fmt_with_another_length_is_ignored(tmp_path):
    p = tmp_path / "x.BIN"
    ctun = fmt(1, 11, b"CTUN", b"Q", b"TimeUS") + HEAD + b"\x01" + bytes(8)
    p.write_bytes(fmt(128, 3, b"FMT", b"", b"") + ctun + fmt(2, 11, b"ATT", b"Q", b"TimeUS"))
    read_all(p)


def test_a_timed_type_whose_format_disagrees_with_its_length(tmp_path):
    import struct

    p = tmp_path / "x.BIN"
    body = fmt(128, 89, b"FMT", b"BBnNZ", b"Type,Length,Name,Format,Columns")
    body += fmt(5, 7, b"CTUN", b"Qf", b"TimeUS,Alt")  # Qf is 12 bytes, the length says 4
    body += HEAD + b"\x05" + struct.pack("<f", 1.0)
    p.write_bytes(body)
    read_all(p)


def test_an_unknown_format_character_prints_nothing_on_stdout(tmp_path, capfd):
    """``sitlpool logs ... --json`` writes JSON on stdout: pymavlink's DFFormat would print there."""
    p = tmp_path / "x.BIN"
    p.write_bytes(
        fmt(128, 89, b"FMT", b"BBnNZ", b"Type,Length,Name,Format,Columns") + fmt(5, 11, b"CTUN", b"Q!", b"TimeUS,Alt")
    )
    capfd.readouterr()
    read_all(p)
    assert capfd.readouterr().out == ""


def test_a_type_with_columns_but_an_empty_format(tmp_path):
    p = tmp_path / "x.BIN"
    body = fmt(128, 89, b"FMT", b"BBnNZ", b"Type,Length,Name,Format,Columns")
    body += fmt(24, 3, b"MSG", b"", b"TimeUS,Message") + HEAD + b"\x18"
    p.write_bytes(body)
    read_all(p)


def test_prune_dry_run_says_what_prune_does_with_a_planted_record(tmp_path, data_dir):
    import subprocess
    import sys

    victim = tmp_path / "notes.txt"
    victim.write_bytes(b"x" * 5000)
    old = time.time() - 86400
    os.utime(victim, (old, old))
    store = store_with_one_log(data_dir, tmp_path)
    kept = store.list()[0]
    plant(store.records, ID, path=str(victim), size=5000)
    env = dict(os.environ, SITLPOOL_DATA_DIR=str(data_dir))
    out = subprocess.run(
        [sys.executable, "-m", "sitlpool", "logs", "prune", "--dry-run", "--budget-mb", "0.000001", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    doc = json.loads(out.stdout)
    assert [r["id"] for r in doc["deleted"]] == [kept.id], doc["deleted"]
    assert victim.exists()


def test_two_collectors_of_the_same_sitl_dir_keep_each_log_once_without_error(tmp_path, data_dir):
    """Two servers closing sessions on the same instance collect the same log directory: a log
    the other one kept meanwhile is no failure ("not kept, it stays at ..." would be false)."""
    from sitlpool.logs import LogMoveError

    src = tmp_path / "sitl"
    src.mkdir()
    old = time.time() - 3600
    for i in range(1, 301):
        p = src / f"{i:08d}.BIN"
        p.write_bytes(b"\xa3\x95" + bytes(100))
        os.utime(p, (old, old))
    errors: list = []
    barrier = threading.Barrier(2)

    def run():
        s = LogStore(data_dir, 100)
        barrier.wait()
        try:
            s.collect(src, {"session": "s1"})
        except LogMoveError as e:
            errors.append(str(e)[:200])

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert len(LogStore(data_dir, 100).list()) == 300 and not list(src.iterdir())


def test_pin_while_pruning_never_loses_a_pinned_log_nor_leaves_a_ghost_record(tmp_path, data_dir):
    """pin_log answers "pinned": the log is kept. A prune running at the same time either
    deleted it first (pin then says it is gone) or leaves it; never a record without its log."""
    lost, ghosts = [], []
    for rnd in range(8):
        d = data_dir / f"r{rnd}"
        store = LogStore(d, 100)
        src = tmp_path / f"sitl{rnd}"
        src.mkdir()
        old = time.time() - 3600
        for i in range(1, 41):
            p = src / f"{i:08d}.BIN"
            p.write_bytes(b"\xa3\x95" + bytes(100))
            os.utime(p, (old, old))
        recs = store.collect(src, {"session": "s1"})
        pinned: list[str] = []
        barrier = threading.Barrier(2)

        def pin_all(recs=recs, store=store, pinned=pinned, barrier=barrier):
            barrier.wait()
            for r in reversed(recs):
                try:
                    if store.pin(r.id).pinned:
                        pinned.append(r.id)
                except LogError:
                    pass

        def prune(store=store, barrier=barrier):
            barrier.wait()
            store.prune(budget_mb=0.000001)

        threads = [threading.Thread(target=pin_all), threading.Thread(target=prune)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for log_id in pinned:
            if not Path(recs[0].path).parent.joinpath(f"{log_id}.BIN").exists():
                lost.append(log_id)
        for r in store.list():
            if not Path(r.path).exists():
                ghosts.append(r.id)
    assert lost == [] and ghosts == []


# ---- records with garbage fields: each one is a damaged record (skipped), never a crash of list ----


GARBAGE = [
    {"end": "yesterday"},
    {"start": [1, 2]},
    {"end": float("inf")},
    {"end": -1e300},
    {"size": "huge"},
    {"size": -5},
    {"pinned": "yes"},
    {"managed": "no"},
    {"instance": "3"},
    {"extra": [1, 2, 3]},
    {"label": {"a": 1}},
    {"session": 42},
    {"kind": ["bin"]},
    {"owner": "root"},
]


@pytest.mark.parametrize("bad", GARBAGE, ids=[next(iter(g)) + "=" + repr(next(iter(g.values()))) for g in GARBAGE])
def test_a_record_with_a_garbage_field_is_skipped_not_a_crash(tmp_path, data_dir, bad):
    store = store_with_one_log(data_dir, tmp_path)
    good = store.list()[0]
    doc = {"id": ID, "kind": "bin", "path": good.path, "size": 10, "managed": True, "end": OLD, **bad}
    (store.records / f"{ID}.json").write_text(json.dumps(doc))
    listed = store.list()
    assert [r.id for r in listed] == [good.id]
    for r in listed:
        json.dumps(r.as_dict(), allow_nan=False)
    with pytest.raises(LogError, match="damaged"):
        store.get(ID)
    store.usage()
    store.prune()


def test_a_huge_record_file_is_not_read_whole(tmp_path, data_dir):
    import resource

    store = store_with_one_log(data_dir, tmp_path)
    big = store.records / f"{ID}.json"
    with open(big, "wb") as f:  # 2 GB of one JSON string: sparse on disk, 2 GB in memory if read whole
        f.write(b'{"id": "' + ID.encode() + b'", "label": "')
        f.truncate(2 << 30)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: 1 GB of address space at most
        try:
            resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
            ok = len(LogStore(data_dir, 100).list()) == 1
            try:
                LogStore(data_dir, 100).get(ID)
            except LogError:
                pass
            os._exit(0 if ok else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, "listing read a 2 GB record whole (MemoryError)"


def test_a_fifo_planted_as_a_record_does_not_hang_the_listing(tmp_path, data_dir):
    store = store_with_one_log(data_dir, tmp_path)
    os.mkfifo(store.records / f"{ID}.json")
    out: list = []

    def run():
        out.append([r.id for r in store.list()])
        try:
            store.get(ID)
        except LogError as e:
            out.append(str(e))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(5)
    if t.is_alive():
        fd = os.open(store.records / f"{ID}.json", os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(5)
        pytest.fail("a FIFO in records/ blocked the listing")
    assert len(out[0]) == 1 and "damaged" in out[1]


def test_a_symlink_planted_as_a_record_is_damaged_not_followed(tmp_path, data_dir):
    store = store_with_one_log(data_dir, tmp_path)
    good = store.list()[0]
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({**good.as_dict(), "id": ID, "start": None, "end": OLD}))
    (store.records / f"{ID}.json").symlink_to(elsewhere)
    assert [r.id for r in store.list()] == [good.id]
    with pytest.raises(LogError, match="damaged"):
        store.get(ID)


def test_a_session_directory_planted_as_a_symlink_is_not_where_a_log_goes(tmp_path, data_dir):
    """A member of a shared store plants ``logs/<session>`` as a symlink to a directory of
    theirs before the session's logs are kept: the logs must not be moved there (they could
    read and delete them)."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    store = LogStore(data_dir, 100)
    store.records.mkdir(parents=True)
    (store.root / "s1").symlink_to(theirs)
    src = tmp_path / "sitl"
    src.mkdir()
    (src / "00000001.BIN").write_bytes(b"\xa3\x95" + bytes(100))
    try:
        store.collect(src, {"session": "s1"})
    except LogError:
        pass
    assert list(theirs.iterdir()) == [], "a log was moved through a planted symlink"
    kept = LogStore(data_dir, 100).list()
    assert len(kept) == 1 and Path(kept[0].path).parent.name == f"s1.{os.geteuid()}"
    assert LogStore(data_dir, 100).path(kept[0].id).read_bytes()[:2] == b"\xa3\x95"


def test_a_log_pruned_between_two_passes_is_one_line(tmp_path):
    """A reader opens the file at each pass (summary, then fields...): a prune in between."""
    from sitlpool.logs import LogReader

    p = tmp_path / "x.BIN"
    p.write_bytes(fmt(128, 89, b"FMT", b"BBnNZ", b"Type,Length,Name,Format,Columns"))
    r = LogReader(p)
    p.unlink()
    with pytest.raises(LogError, match="removed while being read"):
        r.read_formats()
