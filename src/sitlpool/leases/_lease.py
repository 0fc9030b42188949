"""A held lease: an open lock file with an exclusive flock on it."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import Any

from ..errors import LeaseReleased
from ..instances import Ports, ports
from ._record import MAX_RECORD_OWNER, lock_path, validate_owner, write_record

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

    def __init__(self, pool: Any, instance: int, fd: int, owner: str, record_written: bool):
        self.pool = pool
        self.instance = instance
        self.owner = owner
        self.pid = os.getpid()
        self.acquired_at = time.time()
        self.ports: Ports = ports(instance)
        self.record_written = record_written
        self._fd: int | None = fd
        st = os.fstat(fd)
        self._inode = (st.st_dev, st.st_ino)
        self._broken: str | None = None
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

    def broken(self) -> str | None:
        """Why this lease no longer excludes others, or None while it does: its lock file was
        unlinked or replaced (a group member's ``rm`` in a lock directory without the sticky
        bit), so the next acquirer locks a new file and gets the same instance. Logged once."""
        if self._broken is None and not self.released:
            try:
                st = os.stat(self.path, follow_symlinks=False)
                now: tuple[int, int] | None = (st.st_dev, st.st_ino)
            except OSError:
                now = None
            if now != self._inode:
                what = "was removed" if now is None else "was removed or replaced: another file is there now"
                self._broken = (
                    f"the lease on instance {self.instance} is broken: its lock file {self.path} {what}, so "
                    "another process may hold the same instance now; release it and acquire again "
                    "(and give the lock directory the sticky bit: chmod 3775)"
                )
                import logging  # only a broken lease logs: `leases status` skips its ~3 ms

                logging.getLogger("sitlpool.leases").warning("%s", self._broken)
        return self._broken

    def shared_fd(self) -> int:
        """A duplicate of the lease's fd (same open file description, so the same flock) for
        a child that holds the lease with this process: pass it to the child, close it here
        after the launch. ``release()`` still ends the lease for both (it unlocks)."""
        return os.dup(self.fd)  # not in _LIVE: survives the fork hook that drops leases in children

    def set_owner(self, owner: str) -> None:
        """Rewrite the holder's name in the lock file (the lock is kept throughout)."""
        owner = validate_owner(owner, limit=MAX_RECORD_OWNER)
        self.record_written = write_record(self.fd, owner)
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

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self.released else "broken" if self._broken else "held"
        return f"<Lease instance={self.instance} owner={self.owner!r} {state}>"
