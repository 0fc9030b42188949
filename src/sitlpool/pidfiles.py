"""``<data_dir>/sessions/<n>/sitl.pid``: who launched the SITL on instance n, and how to
recognise it (pid, process group, the leader's start ticks and executable, so a recycled
pid is never mistaken for it). One place for pid files, whoever launches.

The sessions directory may be shared by a group and may hold garbage (directories, FIFOs,
symlinks, junk): nothing here follows a symlink, blocks on a FIFO or raises for one bad
entry; ``scan`` names what it cannot use instead."""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import ConfigError
from .instances import out_of_range

PID_FILE = "sitl.pid"
MAX_SIZE = 64 * 1024  # a record is ~1 KB; anything larger is not one


class BadEntry(Exception):
    """An entry of ``sessions/`` that is not a usable record (the message says why).
    ``junk``: a regular file with unreadable content, which the instance's lease holder may remove."""

    def __init__(self, message: str, junk: bool = False):
        super().__init__(message)
        self.junk = junk


def _int(v) -> int:
    # only JSON integers, in a pid's range: int() would take 1e400 (OverflowError), 2.5, true, "12"
    if type(v) is not int or not -(2**31) <= v < 2**63:
        raise ValueError("not an integer")
    return v


def _str(v) -> str:
    if type(v) is not str:
        raise ValueError("not a string")
    return v


def _list(v) -> list:
    if type(v) is not list:
        raise ValueError("not a list")
    return v


def session_dir(data_dir: Path, instance: int) -> Path:
    return Path(data_dir) / "sessions" / str(instance)


@dataclass
class PidRecord:
    instance: int
    pid: int
    pgid: int
    start_ticks: int
    binary: str
    argv: list[str] = field(default_factory=list)
    owner: str = ""
    holder_pid: int = 0
    time: float = 0.0
    exe: str = ""  # /proc/<pid>/exe right after exec (the binary's real path)
    file_uid: int | None = None  # who owns the file (set by ``load``, never written): the SITL's user

    def as_json(self) -> dict:
        d = asdict(self)
        d.pop("file_uid")
        return d

    def describe(self) -> str:
        return f"pid {self.pid} (group {self.pgid}, {Path(self.binary).name}, launched by {self.owner or '?'} pid {self.holder_pid})"


#: what ``ensure_dir`` gives what it creates in a group-shared data dir: group-writable,
#: setgid (files keep the group) and sticky (only a file's owner may unlink or replace it: a
#: member cannot remove another's ``sitl.pid`` or ``run.json``, and so what proves that
#: user's leftovers, nor swap a directory of theirs)
SHARED_DIR_MODE = 0o3775


def ensure_dir(data_dir: Path, instance: int) -> Path:
    """Create ``sessions/<instance>`` if needed. In a group-shared data dir (group-writable)
    what is created is group-writable too (setgid, sticky): otherwise, with the usual umask 022,
    the first user to launch on an instance would own its directory, and every other
    member's launch there (or anywhere, for ``sessions/`` itself) would fail."""
    d = session_dir(data_dir, instance)
    os.makedirs(data_dir, exist_ok=True)
    try:
        shared = bool(os.stat(data_dir).st_mode & stat.S_IWGRP)
    except OSError:
        shared = False
    for path in (d.parent, d):
        try:
            os.mkdir(path, 0o775 if shared else 0o777)
        except FileExistsError:
            continue
        if shared:
            os.chmod(path, SHARED_DIR_MODE)  # the umask cut the group's write bit at mkdir
    return d


def open_new(path: Path | str, dir_fd: int | None = None) -> int:
    """A write fd on ``path`` made afresh: whatever was there is removed first, and the
    file is never opened through a symlink (in a group-shared data dir anyone may plant one
    where a launch writes, aiming it at a file of the launcher's user)."""
    try:
        os.unlink(path, dir_fd=dir_fd)  # a symlink itself, never its target; a directory raises
    except FileNotFoundError:
        pass
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)


def run_dir(data_dir: Path, instance: int) -> tuple[Path, int]:
    """Where this user's SITL on ``instance`` runs (its cwd: eeprom.bin, logs/, stdout,
    stderr), and an fd on it. ``sessions/<n>`` itself, unless others may write there (a
    group-shared data dir): then ``sessions/<n>/uid-<euid>``, ours alone. The SITL enters
    it by that fd, so nothing a member planted (an ``eeprom.bin`` symlink that SITL would
    write through) or swapped in meanwhile is ever used. ``BadEntry`` if it is not ours."""
    d = ensure_dir(data_dir, instance)
    if os.lstat(d).st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        d = d / f"uid-{os.geteuid()}"
        try:
            os.mkdir(d, 0o755)
        except FileExistsError:
            pass
    try:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise BadEntry(f"{d}: {e.strerror}; not a directory sitlpool may use (remove it)") from None
    st = os.fstat(fd)
    if d.name.startswith("uid-") and (st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
        os.close(fd)
        raise BadEntry(f"{d} belongs to uid {st.st_uid} or others may write it; remove it after checking who made it")
    return d, fd


def write(data_dir: Path, rec: PidRecord) -> Path:
    """Write the record atomically (temp file + rename); no temp file is left on failure."""
    d = ensure_dir(data_dir, rec.instance)
    if not rec.time:
        rec.time = time.time()
    return _replace(d, PID_FILE, rec.as_json())


def foreign_record(data_dir: Path, instance: int) -> str | None:
    """Why this user cannot write ``instance``'s ``sitl.pid`` now, or None: another user's
    record there, in a sticky directory (``SHARED_DIR_MODE``) that keeps it from everyone but
    its owner and the directory's. A launcher checks this under the lease, after reaping,
    so a pool scan moves on to the next instance instead of failing the launch."""
    d = session_dir(data_dir, instance)
    me = os.geteuid()
    try:
        dst = os.lstat(d)
        st = os.lstat(d / PID_FILE)
    except OSError:
        return None
    if me == 0 or st.st_uid == me or dst.st_uid == me or not dst.st_mode & stat.S_ISVTX:
        return None
    return (
        f"{d / PID_FILE} belongs to uid {st.st_uid}, and the sticky directory lets only its owner "
        "remove it; that user (or the directory's owner) must remove it"
    )


def check_dir(data_dir: Path, instance: int) -> Path:
    """The session dir of ``instance`` (it may not exist yet); ``BadEntry`` if it is a symlink or not a directory."""
    d = session_dir(data_dir, instance)
    try:
        st = os.lstat(d)
    except (FileNotFoundError, NotADirectoryError):  # not made yet (or cannot be: creating it says why)
        return d
    except OSError as e:
        raise BadEntry(f"{d}: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise BadEntry(f"{d} is a symlink; session dirs are never followed through links (remove it)")
    if not stat.S_ISDIR(st.st_mode):
        raise BadEntry(f"{d} is not a directory (remove it)")
    return d


def read_regular(path: Path, limit: int = MAX_SIZE) -> tuple[bytes, os.stat_result] | None:
    """The first ``limit`` + 1 bytes of a regular file in ``sessions/`` and its stat; None if
    it does not exist. ``BadEntry`` for a symlink, a FIFO (never opened blocking: reading one
    would hang the reader), a directory or a device. For every file others may put there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        kind = "a symlink" if os.path.islink(path) else e.strerror
        raise BadEntry(f"{path}: {kind}; not a file sitlpool reads (remove it)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise BadEntry(f"{path} is {kind}; not a file sitlpool reads (remove it)")
        return os.read(fd, limit + 1), st
    except OSError as e:
        raise BadEntry(f"{path}: {e.strerror}") from None
    finally:
        os.close(fd)


def read_user_file(path: Path, limit: int, what: str) -> tuple[bytes, os.stat_result]:
    """A file a user names (a parameter file, the presets file): its bytes, at most ``limit``,
    and its stat. Symlinks are followed (the user's own setup); a FIFO, a device or a directory is
    refused in one line and never opened blocking (reading it would hang or never end).
    ``ConfigError`` names ``what`` and the path."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise ConfigError(f"cannot read {what} {path}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{what} {path} is not a regular file; give a file")
        chunks, size = [], 0
        while chunk := os.read(fd, limit + 1 - size):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise ConfigError(f"{what} {path} is larger than {limit:,} bytes; is it one?")
        return b"".join(chunks), st
    except OSError as e:
        raise ConfigError(f"cannot read {what} {path}: {e.strerror or e}") from None
    finally:
        os.close(fd)


def load(data_dir: Path, instance: int) -> PidRecord | None:
    """The record of ``instance``; None if there is none; ``BadEntry`` for anything that is
    not a regular, readable record (never follows a symlink, never blocks on a FIFO)."""
    path = check_dir(data_dir, instance) / PID_FILE
    got = read_regular(path)
    if got is None:
        return None
    data, st = got
    try:
        if len(data) > MAX_SIZE:
            raise ValueError("too large")
        d = json.loads(data)
        rec = PidRecord(
            instance=_int(d["instance"]),
            pid=_int(d["pid"]),
            pgid=_int(d["pgid"]),
            start_ticks=_int(d["start_ticks"]),
            binary=_str(d.get("binary", "")),
            argv=[_str(a) for a in _list(d.get("argv", []))],
            owner=_str(d.get("owner", "")),
            holder_pid=_int(d.get("holder_pid", 0)),
            time=float(d.get("time", 0)),
            exe=_str(d.get("exe", "")),
            file_uid=st.st_uid,
        )
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, OverflowError):
        raise BadEntry(f"{path} is not a pid record (unreadable content)", junk=True) from None
    if rec.instance != instance:
        raise BadEntry(f"{path} names instance {rec.instance}, not {instance}")
    return rec


def read(data_dir: Path, instance: int) -> PidRecord | None:
    """The record of ``instance``, or None if there is none or it is unusable."""
    try:
        return load(data_dir, instance)
    except BadEntry:
        return None


def remove(data_dir: Path, instance: int, pid: int | None = None) -> None:
    """Remove the record file (only if it still names ``pid``, when given). Never removes a
    directory, a FIFO or a symlink's target, and never raises."""
    try:
        d = check_dir(data_dir, instance)
        path = d / PID_FILE
        if pid is not None:
            rec = load(data_dir, instance)
            if rec is None or rec.pid != pid:
                return
        if stat.S_ISREG(os.lstat(path).st_mode):
            path.unlink()
    except (BadEntry, OSError):
        pass


def scan(data_dir: Path) -> tuple[list[int], list[str]]:
    """Instances whose session dir has a ``sitl.pid`` entry (sorted), and why each other
    entry of ``sessions/`` that looks like one cannot be used."""
    root = Path(data_dir) / "sessions"
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return [], []
    except OSError as e:
        return [], [f"{root}: {e.strerror}"]
    found, bad = [], []
    for name in sorted(names):
        if name.startswith("."):
            continue
        if not (name.isascii() and name.isdigit()):
            bad.append(f"{root / name}: not an instance number; skipped")
            continue
        n = int(name)
        why = out_of_range(n)
        if why:
            bad.append(f"{root / name}: {why}; skipped")
            continue
        try:
            d = check_dir(data_dir, n)
        except BadEntry as e:
            bad.append(f"{e}; skipped")
            continue
        if os.path.lexists(d / PID_FILE):
            found.append(n)
    return sorted(found), bad


def instances_with_records(data_dir: Path) -> list[int]:
    """Instances that have a ``sitl.pid`` entry, sorted."""
    return scan(data_dir)[0]


# ---- ``sessions/<n>/run.json``: a ``sitlpool run`` command's guardian ------------------------

RUN_FILE = "run.json"


@dataclass
class RunRecord:
    """What ``sitlpool run`` started on an instance: its guardian (the subreaper every process
    of the command descends from) and the token in every such process's environment, so that
    what is left when both ``run`` and its guardian died can be proven and killed."""

    instance: int
    token: str
    guardian_pid: int
    guardian_start_ticks: int
    run_pid: int
    run_start_ticks: int
    argv: list[str] = field(default_factory=list)
    owner: str = ""
    time: float = 0.0
    file_uid: int | None = None  # who owns the file (set by ``load_run``): the command's user

    def as_json(self) -> dict:
        d = asdict(self)
        d.pop("file_uid")
        return d


def write_run(data_dir: Path, rec: RunRecord) -> Path:
    """Write the run record atomically (temp file + rename)."""
    d = ensure_dir(data_dir, rec.instance)
    rec.time = rec.time or time.time()
    return _replace(d, RUN_FILE, rec.as_json())


def load_run(data_dir: Path, instance: int) -> RunRecord | None:
    """The run record of ``instance``; None if there is none; ``BadEntry`` if it is not one."""
    path = check_dir(data_dir, instance) / RUN_FILE
    got = read_regular(path)
    if got is None:
        return None
    data, st = got
    try:
        if len(data) > MAX_SIZE:
            raise ValueError("too large")
        d = json.loads(data)
        rec = RunRecord(
            instance=_int(d["instance"]),
            token=_str(d["token"]),
            guardian_pid=_int(d["guardian_pid"]),
            guardian_start_ticks=_int(d["guardian_start_ticks"]),
            run_pid=_int(d["run_pid"]),
            run_start_ticks=_int(d["run_start_ticks"]),
            argv=[_str(a) for a in _list(d.get("argv", []))],
            owner=_str(d.get("owner", "")),
            time=float(d.get("time", 0)),
            file_uid=st.st_uid,
        )
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, OverflowError):
        raise BadEntry(f"{path} is not a run record (unreadable content)", junk=True) from None
    if rec.instance != instance or len(rec.token) < 32 or not rec.token.isalnum():
        raise BadEntry(f"{path} is not a run record of instance {instance}", junk=True)
    return rec


def remove_run(data_dir: Path, instance: int, token: str | None = None) -> None:
    """Remove the run record and its process list (only if they still hold ``token``, when
    given); never raises."""
    try:
        d = check_dir(data_dir, instance)
        if token is None or _run_pids_token(d / RUN_PIDS_FILE) == token:
            _unlink_regular(d / RUN_PIDS_FILE)
        if token is not None:
            rec = load_run(data_dir, instance)
            if rec is None or rec.token != token:
                return
        _unlink_regular(d / RUN_FILE)
    except (BadEntry, OSError):
        pass


def _unlink_regular(path: Path) -> None:
    try:
        if stat.S_ISREG(os.lstat(path).st_mode):
            path.unlink()
    except OSError:
        pass


#: ``sessions/<n>/run.pids``: the guardian's list of what its command runs, rewritten as it
#: changes: ``<token>`` on the first line, then ``<pid> <start ticks>`` a line. It proves a
#: leftover that dropped the token from its environment (``env -i``) once run and guardian died.
RUN_PIDS_FILE = "run.pids"


def write_run_pids(data_dir: Path, instance: int, token: str, pids: list[tuple[int, int]]) -> None:
    """Write the guardian's process list atomically (temp file + rename)."""
    d = check_dir(data_dir, instance)
    tmp = d / f".{RUN_PIDS_FILE}.{os.getpid()}.tmp"
    try:
        with open(open_new(tmp), "w") as f:
            f.write(token + "\n" + "".join(f"{p} {t}\n" for p, t in pids))
        os.replace(tmp, d / RUN_PIDS_FILE)
    except BaseException:
        _unlink_regular(tmp)
        raise


def _run_pids_token(path: Path) -> str | None:
    try:
        got = read_regular(path)
    except BadEntry:
        return None
    return None if got is None else got[0].split(b"\n", 1)[0].decode(errors="replace")


def load_run_pids(data_dir: Path, instance: int, token: str, uid: int | None) -> set[tuple[int, int]]:
    """The ``(pid, start ticks)`` the guardian of the run with ``token`` last listed, if its
    file is ``uid``'s and names that token; else none (junk never raises)."""
    try:
        got = read_regular(check_dir(data_dir, instance) / RUN_PIDS_FILE)
    except BadEntry:
        return set()
    if got is None or got[1].st_uid != uid or len(got[0]) > MAX_SIZE:
        return set()
    lines = got[0].decode("ascii", errors="replace").split("\n")
    if lines[0] != token:
        return set()
    out = set()
    for line in lines[1:]:
        pid, _, ticks = line.partition(" ")
        if pid.isascii() and pid.isdigit() and ticks.isascii() and ticks.isdigit() and len(pid + ticks) < 40:
            out.add((int(pid), int(ticks)))
    return out


def instances_with_runs(data_dir: Path) -> list[int]:
    """Instances whose session dir holds a run record, sorted."""
    root = Path(data_dir) / "sessions"
    try:
        names = os.listdir(root)
    except OSError:
        return []
    out = []
    for name in names:
        if name.isascii() and name.isdigit() and str(int(name)) == name and not out_of_range(int(name)):
            if os.path.lexists(root / name / RUN_FILE):
                out.append(int(name))
    return sorted(out)


def _replace(d: Path, name: str, doc: dict) -> Path:
    """``d/name`` replaced whole by ``doc`` (a fresh temp file, never through a symlink, then
    renamed over it); the temp file removed if anything fails."""
    path, tmp = d / name, d / f".{name}.{os.getpid()}.tmp"
    try:
        with open(open_new(tmp), "w") as f:
            f.write(json.dumps(doc) + "\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            if not stat.S_ISDIR(os.lstat(tmp).st_mode):
                tmp.unlink()
        except OSError:
            pass
        raise
    return path
