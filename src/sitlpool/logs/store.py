"""The log store: every flight's DataFlash log (and ``.tlog``) kept under
``<data_dir>/logs/``, each with a small JSON record, within a disk budget.

Layout: ``logs/records/<id>.json`` (one record per log: listing reads only these) and
``logs/<session>/<id>.BIN`` (the logs, one directory per session). A log is moved whole
(``rename`` on the same filesystem; else copied to a temporary name, fsync'd, renamed, and
only then is the source unlinked), and recorded after: never half-moved, and a failure
(a full disk) leaves the source where it was. Logs of unmanaged SITLs are never moved: their
record points at them in place (``record_in_place``), and ``prune`` never deletes them.

Group-shared data dirs (setgid, group-writable: 2775 or 3775): what the store creates is
group-writable too; a user lists and reads the logs they may read and never deletes another
user's (the owner of a kept log is the owner of its file).

A record is data: in a group-shared store any member may rewrite it (members pin each
other's logs), so no path or id in it is trusted. A record is one only under its own id's
name; a kept log is the regular file ``logs/<dir>/<id>.BIN`` (or ``.tlog``) of its id, no
symlink on the way; a log in place is a regular file (never a FIFO or a device). Anything
else is refused in one line, never read, never pruned.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import fcntl
import json
import os
import secrets
import shutil
import stat
import time
from dataclasses import asdict
from pathlib import Path

from ..config import env_paths
from ..errors import ConfigError
from .reader import LogError
from .record import (  # noqa: F401  (re-exported: sitlpool.logs.store's names before the split)
    _FIELDS,
    _SAFE,
    BUSY_S,
    DEFAULT_BUDGET_MB,
    ID_RE,
    MAX_RECORD_BYTES,
    LogMoveError,
    LogRecord,
    UnknownLog,
    _since,
    budget_from_env,
)
from .sitldir import BIN_NAME, open_paths


def _read_record(path: str | os.PathLike) -> bytes:
    """A record's bytes: a regular file (a FIFO planted in ``records/`` would block the open,
    a symlink would name any file), at most ``MAX_RECORD_BYTES`` (a bigger one is cut: damaged)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(MAX_RECORD_BYTES + 1)
    finally:
        os.close(fd)


class LogStore:
    """Kept logs under ``<data_dir>/logs`` within ``budget_mb`` (None: SITLPOOL_LOG_BUDGET_MB,
    default 2000 MB)."""

    def __init__(self, data_dir: str | os.PathLike | None = None, budget_mb: float | None = None):
        self.data_dir = Path(data_dir) if data_dir is not None else env_paths()[0]
        self.root = self.data_dir / "logs"
        self.records = self.root / "records"
        self.budget_mb = budget_from_env() if budget_mb is None else float(budget_mb)
        if not self.budget_mb > 0:
            raise ConfigError(f"log budget {budget_mb!r} MB: give a number above 0")

    # -- places -------------------------------------------------------------------------
    def _shared(self) -> bool:
        try:
            return bool(os.stat(self.data_dir).st_mode & stat.S_IWGRP)
        except OSError:
            return False

    def _mkdir(self, path: Path) -> None:
        shared = self._shared()
        os.makedirs(self.data_dir, exist_ok=True)
        try:  # a sticky data dir (3775): ours are sticky too, so no member unlinks another's files
            sticky = os.stat(self.data_dir).st_mode & stat.S_ISVTX
        except OSError:
            sticky = 0
        for p in [x for x in (self.root, path) if x != self.data_dir]:
            try:
                os.mkdir(p, 0o775 if shared else 0o777)
            except FileExistsError:
                continue
            if shared:
                os.chmod(p, 0o2775 | sticky)  # the umask cut the group's write bit at mkdir

    @contextlib.contextmanager
    def _lock(self):
        """One pin, unpin or prune's deletion at a time, across processes (flock on
        ``logs/.lock``): a log pinned is never deleted by a prune that planned it before."""
        fd = -1
        try:
            fd = os.open(self.root / ".lock", os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            try:
                self._mkdir(self.root)
                mode = 0o664 if self._shared() else 0o644
                fd = os.open(self.root / ".lock", os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
            except FileExistsError:
                fd = os.open(self.root / ".lock", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                fd = -1  # a store this user may not write: nothing of theirs to prune there
        except OSError:
            fd = -1
        try:
            if fd >= 0:
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            if fd >= 0:
                os.close(fd)

    def _record_path(self, log_id: str) -> Path:
        if not isinstance(log_id, str) or not ID_RE.match(log_id):
            raise UnknownLog(f"{log_id!r} is not a log id (ids look like 20261201-124301-a1b2c3: list_logs gives them)")
        return self.records / f"{log_id}.json"

    def _write(self, rec: LogRecord) -> None:
        self._mkdir(self.records)
        data = json.dumps(asdict(rec), sort_keys=True).encode()
        target = self.records / f"{rec.id}.json"
        mode = 0o664 if self._shared() else 0o644
        try:
            owned = target.stat().st_uid == os.geteuid()
        except FileNotFoundError:
            owned = True
        if owned:
            tmp = self.records / f".{rec.id}.{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            try:
                os.write(fd, data)
                os.fsync(fd)
                os.fchmod(fd, mode)
            except BaseException:
                os.close(fd)
                os.unlink(tmp)
                raise
            os.close(fd)
            os.replace(tmp, target)
        else:  # another user's record (group-shared store, sticky dir): rewritten in place
            with open(target, "r+b") as f:
                f.write(data)
                f.truncate()

    # -- keeping ------------------------------------------------------------------------
    def _new_id(self, when: float) -> str:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(when))
        while True:
            log_id = f"{stamp}-{secrets.token_hex(3)}"
            if not (self.records / f"{log_id}.json").exists():
                return log_id

    def _record(self, src: Path, st: os.stat_result, fields: dict, managed: bool) -> LogRecord:
        fields = dict(fields or {})
        known = {k: fields.pop(k) for k in _FIELDS if k in fields}
        known.setdefault("end", st.st_mtime)
        if known.get("instance") is not None:
            known["instance"] = int(known["instance"])
        return LogRecord(
            id=self._new_id(known["end"] or time.time()),
            kind="tlog" if src.suffix.lower() == ".tlog" else "bin",
            path=str(src.resolve()),
            size=st.st_size,
            managed=managed,
            source=str(src.resolve()),
            owner=os.geteuid(),
            extra={k: v for k, v in fields.items() if isinstance(v, (str, int, float, bool, type(None)))},
            **known,
        )

    def keep(self, path: str | os.PathLike, record_fields: dict | None = None) -> LogRecord:
        """Move one closed log (``.BIN`` or ``.tlog``) into the store, whole, then record it.
        Raises ``LogMoveError`` (one line; the log stays where it was) when it cannot."""
        src = Path(path)
        try:
            st = os.lstat(src)
        except OSError as e:
            raise LogMoveError(f"cannot keep log {src}: {e.strerror}") from None
        if not stat.S_ISREG(st.st_mode):
            raise LogMoveError(f"cannot keep log {src}: not a regular file")
        rec = self._record(src, st, record_fields or {}, managed=True)
        place = self.root / (_SAFE.sub("_", str(rec.session or "no-session"))[:64].strip(".") or "no-session")
        dest = place / f"{rec.id}{'.tlog' if rec.kind == 'tlog' else '.BIN'}"
        copied = False
        try:
            place = self._own_place(place)
            dest = place / dest.name
            try:
                os.rename(src, dest)
            except OSError as e:
                if e.errno != errno.EXDEV:
                    raise
                self._copy(src, dest)
                copied = True
            rec.path = os.path.abspath(dest)  # a relative data dir: the path still names it from anywhere
            try:
                self._write(rec)
            except BaseException:
                if copied:
                    os.unlink(dest)
                else:
                    os.rename(dest, src)
                raise
        except OSError as e:
            why = "no space left on device" if e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT) else e.strerror
            raise LogMoveError(f"log {src} not kept ({why} in {self.root}): it stays at {src}") from None
        if copied:
            try:
                os.unlink(src)
            except OSError:
                pass  # kept, and a copy remains in place: nothing lost
        return rec

    def _own_place(self, place: Path) -> Path:
        """``place`` made, if it is a directory of this user; else (another member's, or a
        symlink planted in a shared store to have our logs moved where they read and delete
        them) ``place.<uid>``, which must be ours (``OSError`` otherwise: the log stays)."""
        for p in (place, place.with_name(f"{place.name}.{os.geteuid()}")):
            self._mkdir(p)
            st = os.lstat(p)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
                return p
        raise OSError(errno.EPERM, f"{place} is not a directory of this user (planted?)")

    def _copy(self, src: Path, dest: Path) -> None:
        tmp = dest.with_name(f".{dest.name}.part")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with open(src, "rb") as fin, os.fdopen(fd, "wb", closefd=False) as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
                fout.flush()
                os.fsync(fd)
            os.close(fd)
            fd = -1
            os.rename(tmp, dest)
            dfd = os.open(dest.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise

    def collect(self, src_logs_dir: str | os.PathLike, record_fields: dict | None = None) -> builtins.list[LogRecord]:
        """Keep every closed log of a SITL's log directory (``NNNNNNNN.BIN`` and ``*.tlog``;
        never ``LASTLOG.TXT``; never a log a process still has open), oldest first.
        ``record_fields``: session, label, holder, instance, model, binary, binary_version,
        start, end (others go to ``extra``). Returns the records; raises ``LogMoveError``
        (with ``kept``) if one could not be moved, after trying every one."""
        d = Path(src_logs_dir)
        try:
            names = sorted(e.name for e in os.scandir(d) if e.is_file(follow_symlinks=False))
        except FileNotFoundError:
            return []
        except OSError as e:
            raise LogMoveError(f"cannot read log directory {d}: {e.strerror}") from None
        todo = [d / n for n in names if BIN_NAME.match(n) or n.lower().endswith(".tlog")]
        busy = open_paths(todo)
        kept: builtins.list[LogRecord] = []
        failed: builtins.list[str] = []
        for p in todo:
            if os.path.realpath(p) in busy:
                continue
            try:
                kept.append(self.keep(p, record_fields))
            except LogMoveError as e:
                if not os.path.lexists(p):
                    continue  # gone meanwhile: another collector (a second server) kept it
                failed.append(str(e))
        if failed:
            raise LogMoveError("; ".join(failed), kept)
        return kept

    def record_in_place(self, path: str | os.PathLike, record_fields: dict | None = None) -> LogRecord:
        """Record a log that is not ours to move (an unmanaged SITL's): it stays in place."""
        src = Path(path)
        try:
            st = os.stat(src)
        except OSError as e:
            raise LogError(f"cannot record log {src}: {e.strerror}") from None
        rec = self._record(src, st, record_fields or {}, managed=False)
        try:
            self._write(rec)
        except OSError as e:
            raise LogError(f"cannot record log {src} in {self.records}: {e.strerror}") from None
        return rec

    # -- finding ------------------------------------------------------------------------
    def get(self, log_id: str) -> LogRecord:
        """The record of a kept log; ``UnknownLog`` for an id that is not one, or not kept;
        ``LogError`` for a record the user may not read."""
        p = self._record_path(log_id)
        try:
            rec = LogRecord.from_dict(json.loads(_read_record(p)))
        except FileNotFoundError:
            raise UnknownLog(f"no kept log {log_id} (list_logs gives the kept ones)") from None
        except PermissionError:
            raise LogError(f"log {log_id} belongs to another user and you may not read it") from None
        except (OSError, ValueError, TypeError, RecursionError):  # a symlink, a FIFO, garbage, too big
            raise LogError(f"the record of log {log_id} is damaged ({p})") from None
        if rec.id != log_id:  # a record is one only under its own id's name
            raise LogError(f"the record of log {log_id} is damaged ({p}: it names log {str(rec.id)[:40]!r})")
        return rec

    def _file(self, rec: LogRecord) -> Path:
        """The file a record names, if the store may trust it (module docstring), else
        ``LogError``. A file that is gone is returned as is (its reader says so)."""
        if not isinstance(rec.path, str) or not os.path.isabs(rec.path):
            raise LogError(f"the record of log {rec.id} is damaged (no absolute path to its log)")
        p = Path(rec.path)
        if rec.managed:
            parent = p.parent
            inside = (
                p.name in (f"{rec.id}.BIN", f"{rec.id}.tlog")
                and parent.name not in ("", ".", "..", "records")
                and os.path.realpath(parent) == os.path.join(os.path.realpath(self.root), parent.name)
            )
            if not inside:
                raise LogError(f"the record of log {rec.id} points outside the log store: not read, never pruned")
        try:
            st = os.lstat(p) if rec.managed else os.stat(p)
        except OSError:
            return p
        if not stat.S_ISREG(st.st_mode):
            raise LogError(f"log {rec.id} is not a regular file (a symlink, FIFO or device): not read")
        return p

    def path(self, log_id: str) -> Path:
        """Where a kept log's file is (to open it in MAVExplorer)."""
        return self._file(self.get(log_id))

    def list(self, session: str | None = None, label: str | None = None, since=None) -> builtins.list[LogRecord]:
        """Kept logs the user may read, newest first; filters: session id, label, since
        (a time: datetime, Unix seconds, ISO 8601, or an age like ``2h``)."""
        t = _since(since)
        out: builtins.list[LogRecord] = []
        try:
            entries = list(os.scandir(self.records))
        except FileNotFoundError:
            return []
        for e in entries:
            if not e.name.endswith(".json") or e.name.startswith("."):
                continue
            try:
                r = LogRecord.from_dict(json.loads(_read_record(e.path)))
            except (OSError, ValueError, TypeError, RecursionError):
                continue  # unreadable (another user's, private) or damaged: not listed
            if not isinstance(r.id, str) or not ID_RE.match(r.id) or e.name != f"{r.id}.json":
                continue  # not under its own id's name: not a record (module docstring)
            if session is not None and r.session != session:
                continue
            if label is not None and r.label != label:
                continue
            if t is not None and (r.end or r.start or 0) < t:
                continue
            out.append(r)
        out.sort(key=lambda r: (r.end or r.start or 0, r.id), reverse=True)
        return out

    def resolve(self, id_or_path: str | os.PathLike, allow_paths: bool = False) -> Path:
        """The file a name stands for: a kept log's id, or (``allow_paths``: people and
        scripts) a path to any log file. Agents (``allow_paths=False``) give ids only."""
        s = os.fspath(id_or_path)
        if isinstance(s, str) and ID_RE.match(s):
            return self.path(s)
        if not allow_paths:
            raise UnknownLog(
                f"{s!r} is not a log id (ids look like 20261201-124301-a1b2c3: list_logs gives them); "
                "kept logs are named by id only"
            )
        p = Path(s).expanduser()
        if not p.is_file():
            raise UnknownLog(f"no log {s}: neither a kept log's id nor a file")
        return p

    # -- pinning and pruning -----------------------------------------------------------
    def _set_pin(self, log_id: str, pinned: bool) -> LogRecord:
        with self._lock():  # not while a prune deletes it (a ghost record, or a pinned log gone)
            rec = self.get(log_id)
            if rec.managed and not os.path.lexists(rec.path):
                raise UnknownLog(f"log {log_id} is gone (pruned): list_logs gives the kept ones")
            rec.pinned = pinned
            try:
                self._write(rec)
            except OSError as e:
                raise LogError(f"cannot {'pin' if pinned else 'unpin'} log {log_id}: {e.strerror}") from None
        return rec

    def pin(self, log_id: str) -> LogRecord:
        """Keep this log whatever the budget."""
        return self._set_pin(log_id, True)

    def unpin(self, log_id: str) -> LogRecord:
        return self._set_pin(log_id, False)

    def usage(self) -> int:
        """Bytes of the kept (moved) logs the user can see."""
        total = 0
        for r in self.list():
            if r.managed:
                try:
                    total += os.lstat(self._file(r)).st_size
                except (OSError, LogError):
                    pass
        return total

    def prune_plan(self, budget_mb: float | None = None) -> tuple[builtins.list[LogRecord], int]:
        """``(what prune would delete now, oldest first; the bytes kept now)``, deleting nothing."""
        budget = (self.budget_mb if budget_mb is None else float(budget_mb)) * 1e6
        recs = [r for r in self.list() if r.managed]
        sizes: dict[str, int] = {}
        for r in recs:
            try:
                sizes[r.id] = os.lstat(self._file(r)).st_size
            except (OSError, LogError):
                sizes[r.id] = 0
        total = usage = sum(sizes.values())
        if total <= budget:
            return [], usage
        now = time.time()
        me = os.geteuid()
        cands = []
        for r in sorted(recs, key=lambda r: (r.end or r.start or 0, r.id)):
            if r.pinned:
                continue
            try:
                st = os.lstat(self._file(r))
            except (OSError, LogError):  # gone, or a record the store does not trust: never pruned
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_uid != me or now - st.st_mtime < BUSY_S:
                continue
            cands.append(r)
        busy = open_paths([r.path for r in cands])
        plan: builtins.list[LogRecord] = []
        for r in cands:
            if total <= budget:
                break
            if os.path.realpath(r.path) in busy:
                continue
            plan.append(r)
            total -= sizes[r.id]
        return plan, usage

    def prune(self, budget_mb: float | None = None) -> builtins.list[LogRecord]:
        """Delete the oldest unpinned kept logs until the store fits the budget; never a
        pinned one, one in place (unmanaged), one being written (open by a process or
        modified in the last few seconds), nor another user's. Returns what was deleted."""
        gone: builtins.list[LogRecord] = []
        for r in self.prune_plan(budget_mb)[0]:
            with self._lock():
                try:
                    now = self.get(r.id)  # pinned since the plan was made: kept
                except LogError:
                    continue
                if now.pinned or now.path != r.path:
                    continue
                try:
                    os.unlink(r.path)
                except OSError:
                    continue
                try:
                    os.unlink(self.records / f"{r.id}.json")
                except OSError:
                    pass
            try:
                os.rmdir(Path(r.path).parent)  # the session's directory, once empty
            except OSError:
                pass
            gone.append(r)
        return gone
