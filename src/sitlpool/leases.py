"""Instance leases: an exclusive flock on ``<lock_dir>/instance-<n>.lock``.

The kernel drops a flock when its holder exits, SIGKILL included, so a dead holder
can never strand an instance. Rules (see DESIGN.md):

- flock, never fcntl/lockf record locks (those drop when *any* fd of the file closes);
- lock files are never unlinked or renamed (two processes would lock different inodes);
- opened with O_NOFOLLOW|O_CLOEXEC, and only regular files are accepted;
- reading who holds a lease never takes the lock: ``/proc/locks`` names the pid that
  holds a flock on an inode, so a status reader can never make an acquirer see "busy".

``python -m sitlpool.leases status [--json]`` prints who holds what.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import select
import stat
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .errors import (
    BadLockFile,
    InstanceBusy,
    InstanceError,
    LeaseReleased,
    LockDirError,
    NoFreeInstance,
    OwnerError,
    PortsBusy,
    UnusableInstance,
)
from .instances import Ports, out_of_range, ports, unusable

LOCK_NAME = re.compile(r"^instance-(\d+)\.lock$")
OPEN_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
#: the longest a waiter sleeps between scans even if no inotify event arrives
WAIT_POLL_S = 0.05
#: the longest owner or label a person or an agent may give
MAX_OWNER = 200
#: the longest owner a lock file records: room for what sitlpool wraps around a label
#: (``sitlpool session f391b1 (<label>) (via sitlpool server ...)``)
MAX_RECORD_OWNER = 2 * MAX_OWNER
#: a record is one short line; more than this is read only as far as needed
READ_LIMIT = 4096

Check = Callable[[int], "str | None"]


def lock_path(lock_dir: Path, instance: int) -> Path:
    return Path(lock_dir) / f"instance-{instance}.lock"


def format_age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(max(0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def validate_owner(owner, what: str = "owner", limit: int = MAX_OWNER) -> str:
    """The owner (or label) as a lock file records it: whitespace runs made one space.
    Blank, longer than ``limit`` characters, or holding control characters: ``OwnerError``.
    Layers that wrap a user's text in their own (the MCP server) check the user's part
    with this first, so a blank or oversized label is refused, not hidden inside the wrap."""
    text = owner if isinstance(owner, str) else ""
    clean = " ".join(text.split())
    if not clean:
        article = "an" if what[:1] in "aeiou" else "a"
        raise OwnerError(f"a lease needs {article} {what}: a name a person can read, e.g. 'my-test (alice)'")
    if len(clean) > limit:
        raise OwnerError(f"{what} is {len(clean)} characters long; give at most {limit}, a name a person can read")
    if not clean.isprintable():
        bad = next(c for c in clean if not c.isprintable())
        raise OwnerError(f"{what} holds the control character {bad!r}; use printable characters only")
    return clean


def _shorten(text: str, limit: int = MAX_RECORD_OWNER) -> str:
    text = "".join(c if c.isprintable() else "?" for c in text[: limit + 1])
    return text if len(text) <= limit else text[:limit] + "…"


def parse_record(data: bytes) -> tuple[str | None, int | None, float | None]:
    """``owner<TAB>pid<TAB>unix_time[<TAB>extra...]``; garbage gives Nones, never an exception.
    The owner is cut to ``MAX_RECORD_OWNER`` characters and made printable."""
    try:
        line = data.decode("utf-8", "replace").split("\n", 1)[0]
    except Exception:  # pragma: no cover - decode with "replace" cannot fail
        return None, None, None
    fields = line.split("\t")
    owner = fields[0].strip() or None if fields else None
    pid = since = None
    if len(fields) > 1:
        try:
            pid = int(fields[1])
            if pid <= 0:
                pid = None
        except ValueError:
            pid = None
    if len(fields) > 2:
        try:
            since = float(fields[2])
            if since != since or since <= 0:  # NaN or nonsense
                since = None
        except ValueError:
            since = None
    if owner is not None and (len(owner) > MAX_RECORD_OWNER or not owner.isprintable()):
        owner = _shorten(owner)
    return owner, pid, since


def read_record(fd: int) -> tuple[str | None, int | None, float | None]:
    """The record of an open lock file. A record too long to read at once (another tool
    wrote megabytes of owner) gives the start of its owner, and its pid and time from the
    line's end, where they are: reading it never costs more than two small reads."""
    head = os.pread(fd, READ_LIMIT, 0)
    if len(head) < READ_LIMIT or b"\n" in head:
        return parse_record(head)
    owner = _shorten(parse_record(head)[0] or "", MAX_RECORD_OWNER) or None
    size = os.fstat(fd).st_size
    tail = os.pread(fd, 256, max(0, size - 256)).rstrip(b"\n").rsplit(b"\n", 1)[-1]
    fields = tail.split(b"\t")
    _, pid, since = parse_record(b"x\t" + b"\t".join(fields[-2:])) if len(fields) >= 3 else (None, None, None)
    if owner and not owner.endswith("…"):
        owner += "…"
    return owner, pid, since


def format_record(owner: str, pid: int, since: float) -> bytes:
    return _record(validate_owner(owner, limit=MAX_RECORD_OWNER), pid, since)


def _record(clean_owner: str, pid: int, since: float) -> bytes:
    return f"{clean_owner}\t{pid}\t{since:.3f}\n".encode()


@dataclass
class Holder:
    """Who holds one lease: the lock file's record, checked against ``/proc/locks``."""

    instance: int
    pid: int | None  # the pid /proc/locks names (the truth)
    owner: str | None  # from the lock file's record
    record_pid: int | None
    since: float | None
    path: Path
    in_pool: bool
    kept_by: tuple[int, ...] = ()  # live processes keeping the lease after ``pid`` exited (an inherited fd)

    @property
    def age(self) -> float | None:
        # a record left by an earlier holder says nothing about when this one took it
        return None if self.since is None or not self.record_matches else max(0.0, time.time() - self.since)

    @property
    def record_matches(self) -> bool:
        return self.pid is None or self.record_pid == self.pid

    def describe(self) -> str:
        """``sitlpool session f391b1 (hop-test) pid 728436, for 3m12s``"""
        if self.record_matches:
            out = f"{self.owner or 'an unnamed holder'} pid {self.pid or self.record_pid}, for {format_age(self.age)}"
        else:
            out = f"pid {self.pid} (its lock file still names {self.owner or 'nobody'} pid {self.record_pid})"
        if self.kept_by:

            def named(pid: int) -> str:  # the kernel's short name (comm): bounded, no arguments
                try:
                    with open(f"/proc/{pid}/comm", "rb") as f:
                        comm = f.read().decode(errors="replace").strip()
                except OSError:
                    return str(pid)
                return f"{pid} ({''.join(c if c.isprintable() else '?' for c in comm)})"

            pids = " ".join(map(str, self.kept_by))
            out += (
                f"; pid {self.pid} exited and passed the lease on: pid {', '.join(map(named, self.kept_by))} "
                f"still holds it; the instance frees when that exits (kill {pids} to free it now)"
            )
        return out

    def as_dict(self) -> dict:
        return {
            "instance": self.instance,
            "owner": self.owner if self.record_matches else None,
            "pid": self.pid,
            "record_owner": self.owner,
            "record_pid": self.record_pid,
            "since": self.since,
            "age_s": None if self.age is None else round(self.age, 3),
            "in_pool": self.in_pool,
            "path": str(self.path),
            "kept_by": list(self.kept_by),
        }


def flock_keepers(dev: int, ino: int) -> list[int]:
    """The processes (those this user may inspect) holding the flock on the file ``(dev, ino)``
    through an fd: who keeps a lease whose taker exited after passing its fd on (/proc/locks
    still names the taker)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{d}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{d}/fd/{fd}")
            except OSError:
                continue
            if st.st_ino == ino and st.st_dev == dev and _holds_flock(d, fd):
                out.append(int(d))
                break
    return sorted(out)


def _holds_flock(pid: str, fd: str) -> bool:
    """True if this fd's open file holds a flock (fdinfo lists the locks owned through that
    open file only): a process that merely has the file open (a waiter) does not."""
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}", "rb") as f:
            return any(x.startswith(b"lock:") and b" FLOCK " in x for x in f)
    except OSError:
        return False


def read_proc_locks() -> dict[tuple[str, int], int]:
    """``{(device, inode): pid}`` of every flock on the machine, from one read of /proc/locks."""
    fd = os.open("/proc/locks", os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, 1 << 24)
    finally:
        os.close(fd)
    out: dict[tuple[str, int], int] = {}
    for line in data.split(b"\n"):
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; waiters have "->" in 2nd place
        if len(parts) < 6 or parts[1] != b"FLOCK":
            continue
        maj, mnr, ino = parts[5].split(b":")
        out[(f"{int(maj, 16)}:{int(mnr, 16)}", int(ino))] = int(parts[4])
    return out


def _dev_key(st_dev: int) -> str:
    return f"{os.major(st_dev)}:{os.minor(st_dev)}"


class _Inotify:
    """Wakes a waiter when any lock file is closed after writing (a release or a death)."""

    IN_CLOSE_WRITE = 0x00000008
    _libc = None

    def __init__(self, directory: Path):
        self.fd = -1
        try:
            if _Inotify._libc is None:
                # imported here: ctypes.util (shutil, subprocess) is ~30 ms of every `leases status`
                import ctypes
                import ctypes.util

                _Inotify._libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            libc = _Inotify._libc
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                return
            if libc.inotify_add_watch(fd, os.fsencode(directory), self.IN_CLOSE_WRITE) < 0:
                os.close(fd)
                return
            self.fd = fd
        except (OSError, AttributeError):
            self.fd = -1

    def wait(self, timeout: float) -> None:
        if self.fd < 0:
            time.sleep(timeout)
            return
        r, _, _ = select.select([self.fd], [], [], timeout)
        if r:
            try:
                os.read(self.fd, 65536)
            except BlockingIOError:
                pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# Leases are kept alive here, not by their users' references: a Lease dropped by
# the garbage collector must not close its fd and so silently release the instance.
_LIVE: dict[int, Lease] = {}


def _forget_leases_in_child() -> None:
    # A forked child shares each lease's open file description: if it kept the fd, the
    # lock would outlive the parent's release. Leases belong to the process that took them.
    for fd, lease in list(_LIVE.items()):
        try:
            os.close(fd)
        except OSError:
            pass
        lease._fd = None
    _LIVE.clear()


os.register_at_fork(after_in_child=_forget_leases_in_child)


class Lease:
    """An instance held through an exclusive flock. Held until ``release()`` or process exit."""

    def __init__(self, pool: LeasePool, instance: int, fd: int, owner: str, record_written: bool):
        self.pool = pool
        self.instance = instance
        self.owner = owner
        self.pid = os.getpid()
        self.acquired_at = time.time()
        self.ports: Ports = ports(instance)
        self.record_written = record_written
        self._fd: int | None = fd
        _LIVE[fd] = self

    @property
    def path(self) -> Path:
        return lock_path(self.pool.lock_dir, self.instance)

    @property
    def released(self) -> bool:
        return self._fd is None or self.pid != os.getpid()

    @property
    def fd(self) -> int:
        if self._fd is None:
            raise LeaseReleased(f"the lease on instance {self.instance} was already released; acquire a new one")
        return self._fd

    def shared_fd(self) -> int:
        """A duplicate of the lease's fd (same open file description, so the same flock) for
        a child that holds the lease with this process: pass it to the child, close it here
        after the launch. ``release()`` still ends the lease for both (it unlocks)."""
        return os.dup(self.fd)  # not in _LIVE: survives the fork hook that drops leases in children

    def set_owner(self, owner: str) -> None:
        """Rewrite the holder's name in the lock file (the lock is kept throughout)."""
        owner = validate_owner(owner, limit=MAX_RECORD_OWNER)
        self.record_written = _write_record(self.fd, owner)
        self.owner = owner

    def release(self) -> None:
        """Drop the lease. Idempotent. The lock file stays (it is never unlinked)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        _LIVE.pop(fd, None)
        if self.pid == os.getpid():
            # unlock first: a copy of the fd passed to a child (``sitlpool run``'s command, a
            # forked worker) would otherwise keep the flock after this close
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"<Lease instance={self.instance} owner={self.owner!r} {state}>"


def _write_record(fd: int, owner: str) -> bool:
    """Write a record for ``owner``, already checked by ``validate_owner``."""
    data = _record(owner, os.getpid(), time.time())
    try:
        # write over the old record, then cut what is left of it: never an empty window
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
        return True
    except OSError:
        return False  # opened read-only (a lock file we may lock but not write)


_DEFAULT = object()


class LeasePool:
    """The instances one user of the lock directory tries, and the leases on them.

    ``check(n)`` runs while n's lock is held and returns why n cannot be used, or
    None; by default it probes n's ports (``ports.probe``). ``check=False`` turns it off.
    """

    def __init__(self, lock_dir: Path | str, pool: Iterable[int], check: Check | None | bool = None):
        self.lock_dir = Path(lock_dir)
        self._dir = os.fspath(self.lock_dir)
        self.pool = tuple(pool)
        for n in self.pool:
            why = unusable(n)
            if why:
                raise InstanceError(f"{why}; leave instance {n} out of the pool")
        self.default_check: Check | None = _resolve_check(check, PROBE)
        self._idle: dict[int, tuple[int, bool]] = {}

    @classmethod
    def from_settings(cls, settings, check: Check | None | bool = None) -> LeasePool:
        return cls(settings.lock_dir, settings.pool, check)

    @classmethod
    def from_env(cls, check: Check | None | bool = None) -> LeasePool:
        """Lock dir and pool from the ``SITLPOOL_`` environment, without loading pydantic."""
        from .config import env_paths, env_pool

        return cls(env_paths()[1], env_pool(), check)

    # ---- taking leases -------------------------------------------------------------

    def _ensure_dir(self) -> None:
        try:
            if not self.lock_dir.is_dir():
                os.makedirs(self.lock_dir, exist_ok=True)
                try:  # made inside a group-shared dir (the default <data_dir>/leases): shared the same way
                    if os.stat(self.lock_dir.parent).st_mode & stat.S_IWGRP:
                        os.chmod(self.lock_dir, 0o2775)  # the umask cut the group's write bit
                except OSError:
                    pass
        except OSError as e:
            raise LockDirError(
                f"cannot create lock directory {self.lock_dir}: {e.strerror}; "
                "create it by hand or set SITLPOOL_LOCK_DIR to a directory you can write"
            ) from None
        if not self.lock_dir.is_dir():
            raise LockDirError(
                f"lock directory {self.lock_dir} is not a directory; set SITLPOOL_LOCK_DIR to a directory"
            )

    def _path_str(self, instance: int) -> str:
        return f"{self._dir}/instance-{instance}.lock"  # a str: a Path per acquire costs as much as the flock

    def _open(self, instance: int) -> tuple[int, bool]:
        """Open (creating if needed) the lock file of ``instance``: ``(fd, writable)``."""
        path = self._path_str(instance)
        try:
            fd = os.open(path, os.O_RDWR | OPEN_FLAGS)
            created = False
        except FileNotFoundError:
            self._ensure_dir()
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | OPEN_FLAGS, 0o666)
                created = True
            except PermissionError as e:
                raise LockDirError(
                    f"cannot create lock file {path}: {e.strerror}; make {self.lock_dir} writable for you "
                    "(for a shared lock directory: group-owned, mode 2775) or set SITLPOOL_LOCK_DIR to a directory you can write"
                ) from None
            except OSError as e:
                return self._open_error(path, e)
        except PermissionError:
            # a lock file someone else created without group write: flock still works read-only
            try:
                return os.open(path, os.O_RDONLY | OPEN_FLAGS), False
            except OSError as e:
                return self._open_error(path, e)
        except OSError as e:
            return self._open_error(path, e)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise BadLockFile(f"lock file {path} is not a regular file; remove it after checking who made it")
        if created:
            try:
                dmode = os.stat(self.lock_dir).st_mode
                if dmode & stat.S_IWGRP:  # a shared lock directory: let the group lock and write it
                    os.fchmod(fd, 0o664)
            except OSError:
                pass
        return fd, True

    def _open_error(self, path: Path, e: OSError):
        # each of these concerns this one file: a pool scan skips its instance (BadLockFile)
        if e.errno == errno.ELOOP:
            raise BadLockFile(
                f"lock file {path} is a symbolic link, which sitlpool refuses; remove it after checking who made it"
            ) from None
        if e.errno == errno.EISDIR:
            raise BadLockFile(f"lock file {path} is a directory; remove it after checking who made it") from None
        if e.errno in (errno.EACCES, errno.EPERM):
            raise BadLockFile(
                f"cannot open lock file {path}: {e.strerror}; its owner must make it readable (mode 0664) "
                "or remove it after checking who made it"
            ) from None
        raise LockDirError(
            f"cannot open lock file {path}: {e.strerror}; check the permissions of {self.lock_dir}"
        ) from None

    def try_lock(self, instance: int) -> tuple[int, bool] | None:
        """Take ``instance``'s flock without blocking: ``(fd, writable)`` or None if held.

        Files found held are kept open (unlocked) for the next scan, so a scan past
        held instances costs one flock call each instead of open+flock+close.
        """
        cached = self._idle.pop(instance, None)
        fd, writable = cached if cached else self._open(instance)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if self._idle.setdefault(instance, (fd, writable))[0] != fd:
                os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        if cached:
            # a cached fd must still be the file at the path (lock files are never
            # replaced, but a person may have wiped the directory): else lock the new one
            try:
                same = os.stat(self._path_str(instance), follow_symlinks=False).st_ino == os.fstat(fd).st_ino
            except OSError:
                same = False
            if not same:
                os.close(fd)
                return self.try_lock(instance)
        return fd, writable

    def _take(self, instance: int, owner: str, check: Check | None) -> tuple[Lease | None, str | None]:
        """Lease ``instance`` or say why not: ``(lease, None)`` / ``(None, "held")`` / ``(None, reason)``."""
        got = self.try_lock(instance)
        if got is None:
            return None, "held"
        fd, writable = got
        try:
            why = check(instance) if check else None
        except BaseException:
            os.close(fd)
            raise
        if why:
            os.close(fd)
            return None, why
        written = _write_record(fd, owner) if writable else False
        return Lease(self, instance, fd, owner, written), None

    def acquire(
        self,
        owner: str,
        instance: int | None = None,
        check: Check | None | bool = None,
        wait: float = 0,
        allow_reserved: bool = False,
    ) -> Lease:
        """Lease ``instance``, or the first free instance of the pool in pool order.

        ``wait`` > 0 blocks up to that many seconds for an instance to free up. A
        requested instance may lie outside the pool, but not be reserved (0, 14, 15)
        unless ``allow_reserved``. Raises ``InstanceBusy`` (a requested instance someone
        holds), ``PortsBusy`` (a requested instance whose ports are taken), ``NoFreeInstance``.
        """
        owner = validate_owner(owner, limit=MAX_RECORD_OWNER)
        if instance is not None:
            why = out_of_range(instance) or (None if allow_reserved else unusable(instance))
            if why:
                raise InstanceError(f"{why}; pick an instance from the pool {self._pool_text()}")
        chk = _resolve_check(check, self.default_check)
        deadline = time.monotonic() + max(0.0, wait)
        watcher: _Inotify | None = None
        try:
            while True:
                if instance is not None:
                    lease, why = self._take(instance, owner, chk)
                    reasons = {instance: why}
                else:
                    lease, reasons = None, {}
                    for n in self.pool:
                        try:
                            lease, why = self._take(n, owner, chk)
                        except UnusableInstance as e:  # one bad file must not block the rest of the pool
                            lease, why = None, _Unusable(e)
                        if lease:
                            break
                        reasons[n] = why
                if lease:
                    return lease
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise self._failure(instance, reasons, wait)
                if watcher is None:
                    self._ensure_dir()
                    watcher = _Inotify(self.lock_dir)
                watcher.wait(min(remaining, WAIT_POLL_S))
        finally:
            if watcher:
                watcher.close()

    def _pool_text(self) -> str:
        from .config import format_pool

        return format_pool(self.pool)

    def _failure(self, instance: int | None, reasons: dict[int, str | None], wait: float):
        waited = f" after waiting {wait:g}s" if wait > 0 else ""
        if instance is not None:
            why = reasons[instance]
            if why == "held":
                h = self.holder(instance)
                who = h.describe() if h else "another process (it released it while we looked)"
                return InstanceBusy(
                    f"instance {instance} is leased to {who}{waited}; pick another instance, "
                    "leave the instance unset to take the first free one, or wait for it (wait=SECONDS)",
                    holder=h,
                )
            return PortsBusy(f"{why}{waited}; stop that process or pick another instance")
        held = [n for n, w in reasons.items() if w == "held"]
        bad = [w for w in reasons.values() if isinstance(w, _Unusable)]
        ports_busy = [w for w in reasons.values() if w and w != "held" and not isinstance(w, _Unusable)]
        detail = f"{len(held)} leased"
        if ports_busy:
            detail += (
                f", {len(ports_busy)} with ports taken ({ports_busy[0]}"
                + (", ..." if len(ports_busy) > 1 else "")
                + ")"
            )
        if bad:
            what = "with an unusable lock file" if all(w.lock_file for w in bad) else "unusable"
            detail += f", {len(bad)} {what} ({bad[0]}" + (", ..." if len(bad) > 1 else "") + ")"
        return NoFreeInstance(
            f"no free instance in pool {self._pool_text()}{waited}: {detail}; "
            "wait for one (wait=SECONDS), widen SITLPOOL_POOL, or see who holds them with 'sitlpool status'"
        )

    # ---- reading who holds what (never takes a lock) ---------------------------------

    def _read_holder(self, instance: int, path: Path, pid: int) -> Holder:
        owner = rpid = since = None
        try:
            fd = os.open(path, os.O_RDONLY | OPEN_FLAGS)
            try:
                owner, rpid, since = read_record(fd)
            finally:
                os.close(fd)
        except OSError:
            pass
        kept: tuple[int, ...] = ()
        if not os.path.exists(f"/proc/{pid}"):  # the taker passed its fd on (``sitlpool run``'s command) and exited
            try:
                st = os.stat(path, follow_symlinks=False)
                kept = tuple(flock_keepers(st.st_dev, st.st_ino))
            except OSError:
                pass
        return Holder(instance, pid, owner, rpid, since, path, instance in self.pool, kept)

    def status(self) -> list[Holder]:
        """Every held lease in the lock directory, in the pool or not, sorted by instance."""
        try:
            dev = _dev_key(os.stat(self.lock_dir).st_dev)
            entries = list(os.scandir(self.lock_dir))
        except FileNotFoundError:
            return []
        except OSError as e:
            raise LockDirError(f"cannot read lock directory {self.lock_dir}: {e.strerror}") from None
        locks = read_proc_locks()
        if not locks:
            return []
        out: list[Holder] = []
        for e in entries:
            m = LOCK_NAME.match(e.name)
            if not m:
                continue
            pid = locks.get((dev, e.inode()))
            if pid is None:
                continue
            out.append(self._read_holder(int(m.group(1)), Path(e.path), pid))
        out.sort(key=lambda h: h.instance)
        return out

    def holder(self, instance: int) -> Holder | None:
        """Who holds ``instance``, or None if nobody does (a record without a lock is free)."""
        path = lock_path(self.lock_dir, instance)
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return None
        pid = read_proc_locks().get((_dev_key(st.st_dev), st.st_ino))
        return None if pid is None else self._read_holder(instance, path, pid)

    def free(self) -> list[int]:
        """Pool instances nobody holds (ports not probed)."""
        held = {h.instance for h in self.status()}
        return [n for n in self.pool if n not in held]

    def availability(self, held: Iterable[int] | None = None) -> Availability:
        """The pool instances nobody holds (``held``: those known held, else read from the
        lock directory), split into free and ports taken (one probe of all their ports,
        the holders named). What ``status`` and ``list_instances`` show."""
        from .ports import name_holders, taken

        heldset = {h.instance for h in self.status()} if held is None else set(held)
        unheld = [n for n in self.pool if n not in heldset]
        busy = taken([ports(n) for n in unheld])
        name_holders([b for bs in busy.values() for b in bs])  # one /proc scan for all of them
        return Availability([n for n in unheld if n not in busy], {n: busy[n] for n in unheld if n in busy})


class _Unusable(str):
    """Why a pool scan skipped an instance that cannot be used (its lock file, its session dir...)."""

    def __new__(cls, error: Exception):
        self = super().__new__(cls, str(error))
        self.lock_file = isinstance(error, BadLockFile)
        return self


def _resolve_check(check, default):
    if check is False:
        return None
    if check is None or check is True:
        return default
    return check


class PortProbe:
    """The default check: would a client on this machine reach a process on any of
    instance n's six ports (TCP listening, UDP bound; wildcard or loopback, IPv4 or
    IPv6)? Exact lookups in the kernel's socket tables, made while n's lock is held:
    it never binds, and its cost does not grow with the machine's socket count."""

    _probe = None

    def __call__(self, instance: int) -> str | None:
        probe = self._probe
        if probe is None:  # imported on first use: `leases status` never probes
            from .ports import probe

            PortProbe._probe = staticmethod(probe)
        return probe(ports(instance))


PROBE = PortProbe()


@dataclass
class Availability:
    """The pool instances nobody holds: free, or with ports taken by a process that holds
    no lease (a SITL started by hand or by autotest: never "free")."""

    free: list[int]
    ports_taken: dict[int, list]  # instance -> [ports.BusyPort], holders named

    def as_dict(self) -> dict:
        return {
            "free": self.free,
            "ports_taken": [
                {"instance": n, "ports": [b.describe() for b in busy]} for n, busy in self.ports_taken.items()
            ],
        }


# ---- python -m sitlpool.leases status ---------------------------------------------------


def status_document(pool: LeasePool) -> dict:
    from .config import format_pool

    return {
        "lock_dir": str(pool.lock_dir),
        "pool": format_pool(pool.pool),
        "held": [h.as_dict() for h in pool.status()],
    }


def _status_text(doc: dict) -> str:
    lines = [f"lock dir {doc['lock_dir']}, pool {doc['pool']}"]
    if not doc["held"]:
        lines.append("no instance is leased")
    for h in doc["held"]:
        where = "" if h["in_pool"] else "  (outside the pool)"
        owner = h["owner"] or (
            f"(lock file names {h['record_owner']} pid {h['record_pid']})" if h["record_owner"] else "?"
        )
        if h.get("kept_by"):
            where += f"  (pid {h['pid']} exited; kept by pid {', '.join(map(str, h['kept_by']))})"
        lines.append(f"instance {h['instance']:>4}  pid {h['pid']:>7}  {format_age(h['age_s']):>7}  {owner}{where}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import json

    from .errors import SitlpoolError

    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "status" or any(a not in ("--json",) for a in args[1:]):
        print("usage: python -m sitlpool.leases status [--json]", file=sys.stderr)
        return 2
    try:
        doc = status_document(LeasePool.from_env(check=False))
    except SitlpoolError as e:
        print(f"sitlpool: {e}", file=sys.stderr)
        return 1
    print(json.dumps(doc, indent=2) if "--json" in args else _status_text(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
