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
"""

from __future__ import annotations

import builtins
import errno
import json
import os
import re
import secrets
import shutil
import stat
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from ..config import ENV_PREFIX, env_paths
from ..errors import ConfigError
from .reader import LogError
from .sitldir import BIN_NAME, open_paths

DEFAULT_BUDGET_MB = 2000
BUSY_S = 5.0  # a log modified this recently may still be being written: never pruned
ID_RE = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_FIELDS = ("session", "label", "holder", "instance", "model", "binary", "binary_version", "start", "end")


class UnknownLog(LogError, KeyError):
    """No kept log with that id (or an id that is not an id: a path, for an agent)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class LogMoveError(LogError):
    """A log could not be moved into the store (a full disk...): it stays where it was.
    ``kept`` holds the records of the logs of the same call that were kept."""

    def __init__(self, message: str, kept: list | None = None):
        super().__init__(message)
        self.kept = kept or []


@dataclass
class LogRecord:
    """What the store knows of one kept log. Times are Unix seconds."""

    id: str
    kind: str  # "bin" (DataFlash) or "tlog" (MAVLink telemetry)
    path: str  # where the log is now
    size: int
    managed: bool = True  # moved into the store (False: an unmanaged SITL's log, in place)
    pinned: bool = False
    session: str | None = None
    label: str | None = None
    holder: str | None = None
    instance: int | None = None
    model: str | None = None
    binary: str | None = None
    binary_version: str | None = None
    start: float | None = None
    end: float | None = None
    source: str | None = None  # where it was found
    owner: int | None = None  # uid of the user who kept it
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = asdict(self)
        for k in ("start", "end"):
            if d[k] is not None:
                d[k + "_iso"] = datetime.fromtimestamp(d[k]).astimezone().isoformat(timespec="seconds")
        return d

    @classmethod
    def from_dict(cls, d: dict) -> LogRecord:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)


def budget_from_env(environ=os.environ) -> float:
    raw = environ.get(ENV_PREFIX + "LOG_BUDGET_MB")
    if raw in (None, ""):
        return float(DEFAULT_BUDGET_MB)
    try:
        v = float(raw)
    except ValueError:
        v = -1.0
    if not v > 0 or v != v or v == float("inf"):
        raise ConfigError(f"SITLPOOL_LOG_BUDGET_MB={raw!r}: give the log store's budget in MB, a number above 0")
    return v


def _since(since) -> float | None:
    if since is None or since == "":
        return None
    if isinstance(since, datetime):
        return since.timestamp()
    if isinstance(since, (int, float)) and not isinstance(since, bool):
        return float(since)
    if isinstance(since, str):
        try:
            return datetime.fromisoformat(since).timestamp()
        except ValueError:
            pass
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", since)
        if m:
            return time.time() - float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    raise LogError(f"since={since!r}: give a time (ISO 8601, Unix seconds) or an age like 30m, 2h, 7d")


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
            self._mkdir(place)
            try:
                os.rename(src, dest)
            except OSError as e:
                if e.errno != errno.EXDEV:
                    raise
                self._copy(src, dest)
                copied = True
            rec.path = str(dest)
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
            return LogRecord.from_dict(json.loads(p.read_bytes()))
        except FileNotFoundError:
            raise UnknownLog(f"no kept log {log_id} (list_logs gives the kept ones)") from None
        except PermissionError:
            raise LogError(f"log {log_id} belongs to another user and you may not read it") from None
        except (ValueError, TypeError):
            raise LogError(f"the record of log {log_id} is damaged ({p})") from None

    def path(self, log_id: str) -> Path:
        """Where a kept log's file is (to open it in MAVExplorer)."""
        return Path(self.get(log_id).path)

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
                with open(e.path, "rb") as f:
                    d = json.loads(f.read())
                r = LogRecord.from_dict(d)
            except (OSError, ValueError, TypeError):
                continue  # unreadable (another user's, private) or damaged: not listed
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
        rec = self.get(log_id)
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
                    total += os.stat(r.path).st_size
                except OSError:
                    pass
        return total

    def prune(self, budget_mb: float | None = None) -> builtins.list[LogRecord]:
        """Delete the oldest unpinned kept logs until the store fits the budget; never a
        pinned one, one in place (unmanaged), one being written (open by a process or
        modified in the last few seconds), nor another user's. Returns what was deleted."""
        budget = (self.budget_mb if budget_mb is None else float(budget_mb)) * 1e6
        recs = [r for r in self.list() if r.managed]
        sizes: dict[str, int] = {}
        for r in recs:
            try:
                sizes[r.id] = os.stat(r.path).st_size
            except OSError:
                sizes[r.id] = 0
        total = sum(sizes.values())
        if total <= budget:
            return []
        now = time.time()
        me = os.geteuid()
        cands = []
        for r in sorted(recs, key=lambda r: (r.end or r.start or 0, r.id)):
            if r.pinned:
                continue
            try:
                st = os.stat(r.path)
            except FileNotFoundError:
                continue
            if st.st_uid != me or now - st.st_mtime < BUSY_S:
                continue
            cands.append(r)
        busy = open_paths([r.path for r in cands])
        gone: builtins.list[LogRecord] = []
        for r in cands:
            if total <= budget:
                break
            if os.path.realpath(r.path) in busy:
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
            total -= sizes[r.id]
            gone.append(r)
        return gone
