"""Who holds a flock, read from the kernel (``/proc/locks``, ``/proc/<pid>/fd``) without
ever taking a lock: a reader can never make an acquirer see "busy"."""

from __future__ import annotations

import os


def dev_key(st_dev: int) -> str:
    """A device number as ``/proc/locks`` writes it (``major:minor``)."""
    return f"{os.major(st_dev)}:{os.minor(st_dev)}"


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
        try:
            maj, mnr, ino = parts[5].split(b":")
            out[(f"{int(maj, 16)}:{int(mnr, 16)}", int(ino))] = int(parts[4])
        except ValueError:
            continue
    return out


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


def unlinked_lock_names(pid: int, dev: int, ino: int, directory: str) -> list[tuple[str, str]]:
    """The names in ``directory`` through which ``pid`` holds the file ``(dev, ino)`` that is no
    longer there (``/proc/<pid>/fd/N -> <directory>/<name> (deleted)`` or replaced by another
    file): a lease whose lock file someone unlinked or replaced. ``[(name, /proc/<pid>/fd/N)]``."""
    out = []
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    prefix = directory.rstrip("/") + "/"
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if not target.startswith(prefix):
            continue
        try:
            st = os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if st.st_dev != dev or st.st_ino != ino:
            continue
        name = target[len(prefix) :].removesuffix(" (deleted)")
        if "/" not in name:
            out.append((name, f"/proc/{pid}/fd/{fd}"))
    return out
