"""``LeasePool``: the instances one user of the lock directory tries, and the leases on them.

Rules: flock, never fcntl/lockf record locks (those drop when *any* fd of the file closes);
lock files are never unlinked or renamed (two processes would lock different inodes);
opened with O_NOFOLLOW|O_CLOEXEC, and only regular files are accepted; reading who holds
a lease never takes the lock (``/proc/locks`` names the holder)."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

from ..config import env_paths, env_pool, format_pool
from ..errors import (
    BadLockFile,
    InstanceBusy,
    InstanceError,
    LockDirError,
    NoFreeInstance,
    PortsBusy,
    SitlpoolError,
    UnusableInstance,
)
from ..instances import out_of_range, ports, unusable
from ._holder import Availability, Holder
from ._lease import Lease
from ._proclocks import dev_key, flock_keepers, read_proc_locks, unlinked_lock_names
from ._record import (
    MAX_RECORD_OWNER,
    file_kind,
    linked_lock_file,
    lock_instance,
    lock_path,
    read_record,
    validate_owner,
    write_record,
)
from ._waiter import Inotify

OPEN_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
#: the longest a waiter sleeps between scans even if no inotify event arrives
WAIT_POLL_S = 0.05
#: the mode a lock directory shared by a group needs: group-writable, setgid (files keep the
#: group), sticky (only a file's owner may unlink it: nobody can break another's lease)
SHARED_DIR_MODE = 0o3775

Check = Callable[[int], "str | None"]


class PortProbe:
    """The default check: would a client on this machine reach a process on any of
    instance n's six ports (TCP listening, UDP bound; wildcard or loopback, IPv4 or
    IPv6)? Exact lookups in the kernel's socket tables, made while n's lock is held:
    it never binds, and its cost does not grow with the machine's socket count."""

    def __call__(self, instance: int) -> str | None:
        from ..ports import probe  # on first use: `leases status` never probes (socket: ~10 ms)

        return probe(ports(instance))


PROBE = PortProbe()


def _resolve_check(check: Check | None | bool, default: Check | None) -> Check | None:
    if check is False:
        return None
    if check is None or check is True:
        return default
    return check


class _Unusable(str):
    """Why a pool scan skipped an instance that cannot be used (its lock file, its session dir...)."""

    lock_file: bool

    def __new__(cls, error: Exception) -> _Unusable:
        self = super().__new__(cls, str(error))
        self.lock_file = isinstance(error, BadLockFile)
        return self


def dir_warning(lock_dir: Path) -> str | None:
    """One line if others may unlink a held lock file: the directory is group- or
    other-writable without the sticky bit (a doubled lease is then one ``rm`` away)."""
    try:
        mode = os.stat(lock_dir).st_mode
    except OSError:
        return None
    if mode & (stat.S_IWGRP | stat.S_IWOTH) and not mode & stat.S_ISVTX:
        return (
            f"lock directory {lock_dir} is writable by others without the sticky bit: anyone who can write it "
            f"can remove a held lock file and so take a leased instance a second time; run chmod {SHARED_DIR_MODE:o} {lock_dir}"
        )
    return None


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
    def from_settings(cls, settings: Any, check: Check | None | bool = None) -> LeasePool:
        return cls(settings.lock_dir, settings.pool, check)

    @classmethod
    def from_env(cls, check: Check | None | bool = None) -> LeasePool:
        """Lock dir and pool from the ``SITLPOOL_`` environment."""
        return cls(env_paths()[1], env_pool(), check)

    # ---- taking leases -------------------------------------------------------------

    def _ensure_dir(self) -> None:
        try:
            if not self.lock_dir.is_dir():
                os.makedirs(self.lock_dir, exist_ok=True)
                try:  # made inside a group-shared dir (the default <data_dir>/leases): shared the same way
                    if os.stat(self.lock_dir.parent).st_mode & stat.S_IWGRP:
                        os.chmod(self.lock_dir, SHARED_DIR_MODE)  # the umask cut the group's write bit
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
        created = False
        writable = True
        try:
            fd = os.open(path, os.O_RDWR | OPEN_FLAGS)
        except FileNotFoundError:
            self._ensure_dir()
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | OPEN_FLAGS, 0o666)
                created = True
            except PermissionError as e:
                raise LockDirError(
                    f"cannot create lock file {path}: {e.strerror}; make {self.lock_dir} writable for you "
                    f"(for a shared lock directory: group-owned, mode {SHARED_DIR_MODE:o}) "
                    "or set SITLPOOL_LOCK_DIR to a directory you can write"
                ) from None
            except OSError as e:
                self._open_error(path, e)
        except PermissionError:
            # a lock file someone else created without group write: flock still works read-only
            # (checked as any other: a FIFO or a directory opened read-only is no lock file either)
            try:
                fd, writable = os.open(path, os.O_RDONLY | OPEN_FLAGS), False
            except OSError as e:
                self._open_error(path, e)
        except OSError as e:
            self._open_error(path, e)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise BadLockFile(f"lock file {path} is not a regular file; remove it after checking who made it")
        if st.st_nlink > 1:
            os.close(fd)
            raise BadLockFile(linked_lock_file(path, st.st_nlink))
        if created:
            try:
                dmode = os.stat(self.lock_dir).st_mode
                if dmode & stat.S_IWGRP:  # a shared lock directory: let the group lock and write it
                    os.fchmod(fd, 0o664)
            except OSError:
                pass
        return fd, writable

    def _open_error(self, path: str, e: OSError) -> NoReturn:
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
        try:  # a socket (ENXIO) or another file that is no lock file: this instance only
            mode = os.lstat(path).st_mode
        except OSError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):
            raise BadLockFile(
                f"lock file {path} is {file_kind(mode)}, which sitlpool refuses; remove it after checking who made it"
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
        written = write_record(fd, owner) if writable else False
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
                raise InstanceError(f"{why}; pick an instance from the pool {format_pool(self.pool)}")
        chk = _resolve_check(check, self.default_check)
        deadline = time.monotonic() + max(0.0, wait)
        watcher: Inotify | None = None
        try:
            while True:
                reasons: dict[int, str | None]
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
                    watcher = Inotify(self.lock_dir)
                watcher.wait(min(remaining, WAIT_POLL_S))
        finally:
            if watcher:
                watcher.close()

    def _failure(self, instance: int | None, reasons: dict[int, str | None], wait: float) -> SitlpoolError:
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
            more = ", ..." if len(ports_busy) > 1 else ""
            detail += f", {len(ports_busy)} with ports taken ({ports_busy[0]}{more})"
        if bad:
            what = "with an unusable lock file" if all(w.lock_file for w in bad) else "unusable"
            detail += f", {len(bad)} {what} ({bad[0]}" + (", ..." if len(bad) > 1 else "") + ")"
        return NoFreeInstance(
            f"no free instance in pool {format_pool(self.pool)}{waited}: {detail}; "
            "wait for one (wait=SECONDS), widen SITLPOOL_POOL, or see who holds them with 'sitlpool status'"
        )

    # ---- reading who holds what (never takes a lock) ---------------------------------

    def _read_holder(self, instance: int, path: Path | str, pid: int) -> Holder:
        owner = rpid = since = None
        try:
            # a removed lock file is read through its holder's fd (/proc/<pid>/fd/N: a link to follow)
            flags = OPEN_FLAGS & ~os.O_NOFOLLOW if str(path).startswith("/proc/") else OPEN_FLAGS
            fd = os.open(path, os.O_RDONLY | flags)
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
        return Holder(instance, pid, owner, rpid, since, Path(path), instance in self.pool, kept)

    def _entries(self) -> tuple[int, list[os.DirEntry[str]]]:
        """The lock directory's device and entries (none if it does not exist yet)."""
        try:
            dev = os.stat(self.lock_dir).st_dev
            return dev, list(os.scandir(self.lock_dir))
        except FileNotFoundError:
            return 0, []
        except OSError as e:
            raise LockDirError(f"cannot read lock directory {self.lock_dir}: {e.strerror}") from None

    def _held(self, key: str, entries: list[os.DirEntry[str]], locks: dict[tuple[str, int], int]) -> list[Holder]:
        out = []
        for entry in entries:
            try:
                pid = locks.get((key, entry.inode()))
            except OSError:
                continue
            # canonical names only: ``instance-0150.lock`` is another tool's file, no instance of ours
            n = None if pid is None else lock_instance(entry.name)
            if n is not None and pid is not None:
                out.append(self._read_holder(n, entry.path, pid))
        out.sort(key=lambda h: h.instance)
        return out

    def status(self) -> list[Holder]:
        """Every held lease in the lock directory, in the pool or not, sorted by instance."""
        dev, entries = self._entries()
        if not entries:
            return []
        locks = read_proc_locks()
        return self._held(dev_key(dev), entries, locks) if locks else []

    def read(self) -> tuple[list[Holder], list[Holder]]:
        """``(status(), broken())`` from one look at the directory and at /proc/locks."""
        dev, entries = self._entries()
        if not dev:
            return [], []
        locks = read_proc_locks()
        key = dev_key(dev)
        return self._held(key, entries, locks), self._broken(dev, key, entries, locks)

    def broken(self) -> list[Holder]:
        """Leases whose lock file was removed or replaced while held: their holders still
        think they hold the instance, which anyone may now lease a second time."""
        return self.read()[1]

    def _broken(
        self, dev: int, key: str, entries: list[os.DirEntry[str]], locks: dict[tuple[str, int], int]
    ) -> list[Holder]:
        present = set()
        for entry in entries:
            try:
                present.add(entry.inode())
            except OSError:
                continue
        out = []
        for (d, ino), pid in locks.items():
            if d != key or ino in present:
                continue
            for name, fd_path in unlinked_lock_names(pid, dev, ino, self._dir):
                n = lock_instance(name)
                if n is not None:
                    h = self._read_holder(n, fd_path, pid)
                    h.path = lock_path(self.lock_dir, n)
                    out.append(h)
                    break
        out.sort(key=lambda h: h.instance)
        return out

    def dir_warning(self) -> str | None:
        """One line if the lock directory lets others break a lease (no sticky bit)."""
        return dir_warning(self.lock_dir)

    def holder(self, instance: int) -> Holder | None:
        """Who holds ``instance``, or None if nobody does (a record without a lock is free)."""
        path = lock_path(self.lock_dir, instance)
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return None
        pid = read_proc_locks().get((dev_key(st.st_dev), st.st_ino))
        return None if pid is None else self._read_holder(instance, path, pid)

    def free(self) -> list[int]:
        """Pool instances nobody holds (ports not probed)."""
        held = {h.instance for h in self.status()}
        return [n for n in self.pool if n not in held]

    def bad_lock_files(self) -> dict[int, str]:
        """Pool instances whose lock file a pool scan refuses (a symlink, a directory, a FIFO,
        a socket where a regular file belongs), each with why: never free, whatever their ports."""
        out = {}
        for n in self.pool:
            path = self._path_str(n)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                out[n] = (
                    f"lock file {path} is {file_kind(st.st_mode)}, which sitlpool refuses; "
                    "remove it after checking who made it"
                )
            elif st.st_nlink > 1:
                out[n] = linked_lock_file(path, st.st_nlink)
            elif not os.access(path, os.R_OK, follow_symlinks=False):
                out[n] = (
                    f"cannot open lock file {path}: permission denied; its owner must make it readable "
                    "(mode 0664) or remove it after checking who made it"
                )
        return out

    def availability(self, held: Iterable[int] | None = None) -> Availability:
        """The pool instances nobody holds (``held``: those known held, else read from the
        lock directory), split into free, ports taken (one probe of all their ports, the
        holders named) and unusable (a lock file a scan refuses). What ``status`` and
        ``list_instances`` show."""
        from ..ports import name_holders, taken  # `leases status` never probes (socket: ~10 ms)

        heldset = {h.instance for h in self.status()} if held is None else set(held)
        bad = self.bad_lock_files()
        unheld = [n for n in self.pool if n not in heldset and n not in bad]
        busy = taken([ports(n) for n in unheld])
        name_holders([b for bs in busy.values() for b in bs])  # one /proc scan for all of them
        return Availability(
            [n for n in unheld if n not in busy],
            {n: busy[n] for n in unheld if n in busy},
            {n: why for n, why in bad.items() if n not in heldset},
        )
