"""Processes as the OS sees them: start ticks, process groups, launching a child that dies
with this process, and killing a process (or the group it leads) safely."""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Set
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess  # imported where used: ~10 ms of every process that imports procinfo

CLK_TCK = os.sysconf("SC_CLK_TCK")
PR_SET_PDEATHSIG = 1


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    # comm may contain spaces and parentheses: split after the last ')'
    return data[data.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22)."""
    f = _stat_fields(pid)
    return int(f[19]) if f else None


def state(pid: int) -> str | None:
    """The one-letter state (R, S, Z, ...) or None if there is no such process."""
    f = _stat_fields(pid)
    return f[0] if f else None


def ppid(pid: int) -> int | None:
    f = _stat_fields(pid)
    return int(f[1]) if f else None


def pgid(pid: int) -> int | None:
    f = _stat_fields(pid)
    return int(f[2]) if f else None


def is_alive(pid: int, ticks: int | None = None) -> bool:
    """True if ``pid`` runs (not a zombie) and, when given, started at ``ticks``."""
    f = _stat_fields(pid)
    if not f or f[0] in ("Z", "X"):
        return False
    return ticks is None or int(f[19]) == ticks


def uid(pid: int) -> int | None:
    """The process's effective user (the owner of ``/proc/<pid>``)."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def may_signal(pid: int) -> bool:
    """False if ``pid`` is another user's process that we may not signal (EPERM)."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        return False
    except ProcessLookupError:
        pass
    return True


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def exe(pid: int) -> str | None:
    """The process's executable (its real path; `` (deleted)`` dropped if it was replaced since)."""
    try:
        path = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None
    return path.removesuffix(" (deleted)")


def _table() -> dict[int, tuple[int, int]]:
    """Every live process: pid -> (ppid, pgid)."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            f = _stat_fields(int(d))
            if f and f[0] not in ("Z", "X"):
                out[int(d)] = (int(f[1]), int(f[2]))
    return out


def children(pid: int) -> list[int]:
    """The live (not zombie) children of ``pid``."""
    return sorted(p for p, (pp, _) in _table().items() if pp == pid)


def descendants(pid: int) -> list[int]:
    """The live descendants of ``pid`` (children, their children...), parents first."""
    table = _table()
    kids: dict[int, list[int]] = {}
    for p, (pp, _) in table.items():
        kids.setdefault(pp, []).append(p)
    out: list[int] = []
    todo = sorted(kids.get(pid, []))
    while todo:
        p = todo.pop(0)
        if p not in out:
            out.append(p)
            todo += sorted(kids.get(p, []))
    return out


def environ_holds(pid: int, item: bytes, limit: int = 1 << 20) -> bool:
    """True if ``pid``'s environment (readable for our own processes only) holds ``item``
    (``NAME=value``) as one whole entry."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read(limit)
    except OSError:
        return False
    return item in data.split(b"\0")


def group_members(pg: int) -> list[int]:
    return sorted(p for p, (_, g) in _table().items() if g == pg)


def leads_own_group(pid: int) -> bool:
    """True if ``pid`` leads its process group and every other member descends from it:
    then signalling the group reaches that process and its own children, nobody else's."""
    table = _table()
    if pid not in table or table[pid][1] != pid:
        return False
    for member, (_, g) in table.items():
        if g != pid or member == pid:
            continue
        p, seen = member, set()
        while p != pid:
            if p in seen or p not in table or p <= 1:
                return False
            seen.add(p)
            p = table[p][0]
    return True


def signal_group(pg: int, sig: int) -> bool:
    try:
        os.killpg(pg, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _send(pidfd: int, pid: int, sig: int, group: bool) -> list[int]:
    """Signal ``pid`` through its pidfd (the group it leads if ``group``); the pids reached."""
    try:
        if group:
            reached = group_members(pid)
            os.killpg(pid, sig)  # the leader is alive (its pidfd says so): the group id is still its own
            return reached
        signal.pidfd_send_signal(pidfd, sig)
        return [pid]
    except (ProcessLookupError, PermissionError):
        return []


def terminate(
    pid: int, ticks: int | None, grace: float = 3.0, group: bool = False, poll: float = 0.01
) -> tuple[str, list[int]]:
    """SIGTERM ``pid`` (the group it leads, if ``group``), SIGKILL if it outlives ``grace``;
    wait until it (and the group) is gone. For a process that is not our child (an orphan).
    The pid is pinned by a pidfd and checked against ``ticks`` (its start time) first, so a
    pid recycled meanwhile is never signalled. Returns what was done ("terminated",
    "killed", "gone" if it was no longer that process, "refused" if it is another user's)
    and every pid signalled."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return "gone", []
    try:
        if ticks is None or not is_alive(pid, ticks):
            return "gone", []
        if not may_signal(pid):  # another user's: a refused SIGTERM is not a reason to wait and say "killed"
            return "refused", []

        def gone(timeout: float) -> bool:
            deadline = time.monotonic() + timeout
            while True:
                exited = select.select([pidfd], [], [], 0)[0]  # readable once it exited
                if exited and (not group or not group_members(pid)):
                    return True
                if time.monotonic() >= deadline:
                    return False
                time.sleep(poll)

        signalled = _send(pidfd, pid, signal.SIGTERM, group)
        if gone(grace):
            return "terminated", signalled
        signalled += [p for p in _send(pidfd, pid, signal.SIGKILL, group) if p not in signalled]
        gone(5)
        return "killed", signalled
    finally:
        os.close(pidfd)


# ---- descendants left behind by a command we ran -----------------------------------------

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Orphans among this process's descendants become its children (not init's), so
    ``stop_leftovers`` can find what a command left running in the background."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def set_parent_death_signal(sig: int) -> bool:
    """This process gets ``sig`` when its parent (the thread that forked it) dies."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _reap(pids) -> None:
    for p in pids:  # only the pids we signalled: another part of this process may wait for its own children
        try:
            os.waitpid(p, os.WNOHANG)
        except ChildProcessError:
            pass


def stop_leftovers(grace: float = 3.0, poll: float = 0.02, spare: Set[int] = frozenset()) -> list[int]:
    """SIGTERM every remaining child of this (subreaper) process, SIGKILL those alive after
    ``grace``, until none is left (their own children come to us as they die); the pids
    signalled, except the children in ``spare`` (those this process had before). Our
    children are reaped only here, so a pid signalled is never a recycled one."""
    termed: dict[int, float] = {}
    killed: set[int] = set()
    while True:
        _reap(termed)
        kids = [k for k in children(os.getpid()) if k not in spare]
        if not kids:
            return sorted(termed)
        now = time.monotonic()
        for k in kids:
            try:
                if k not in termed:
                    os.kill(k, signal.SIGTERM)
                    termed[k] = now
                elif now - termed[k] >= grace and k not in killed:
                    os.kill(k, signal.SIGKILL)
                    killed.add(k)
            except ProcessLookupError:
                pass
        time.sleep(poll)


# ---- children that die with this process -------------------------------------------------
# PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the process:
# a child forked from a short-lived worker thread (anyio's pool, a request thread) would be
# killed when that thread ends. So every launch is forked by one launcher thread that lives
# as long as the process, and the child dies with the process whatever kills it (SIGKILL
# included), from before exec on: there is no window in which it outlives its launcher.

_prctl = None  # libc's prctl, bound before the first fork (ctypes costs ms to import: only launchers need it)


def die_with_parent(parent: int, cwd_fd: int | None = None, sig: int = signal.SIGKILL):
    """A ``preexec_fn``: the child gets ``sig`` when ``parent`` dies (and never starts if it
    already has). prctl is looked up here, in the parent: nothing is imported in the child."""
    global _prctl
    if _prctl is None:
        import ctypes

        _prctl = ctypes.CDLL(None, use_errno=True).prctl

    def preexec() -> None:  # runs in the child between fork and exec: no locks, no allocation-heavy work
        _prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:  # the launcher died before the prctl took effect
            os._exit(127)
        if cwd_fd is not None:  # the directory itself, whatever its path now leads to
            os.fchdir(cwd_fd)

    return preexec


class _Launcher:
    def __init__(self):
        import queue

        self.requests: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._main, name="sitlpool launcher", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        while True:
            fn, box, done = self.requests.get()
            try:
                box.append((True, fn()))
            except BaseException as e:  # handed to the caller
                box.append((False, e))
            done.set()

    def run(self, fn):
        if threading.current_thread() is self.thread:
            return fn()
        box: list = []
        done = threading.Event()
        self.requests.put((fn, box, done))
        done.wait()
        ok, value = box[0]
        if not ok:
            raise value
        return value


_launcher: _Launcher | None = None
_launcher_lock = threading.Lock()


def _reset_after_fork() -> None:
    global _launcher, _launcher_lock
    _launcher, _launcher_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


def popen_tied(args: list[str], cwd_fd: int | None = None, **kw) -> subprocess.Popen:
    """``subprocess.Popen(args, **kw)``, forked by this process's launcher thread with a
    parent-death signal (SIGKILL) set before exec: the child never outlives this process.
    ``cwd_fd``: the child's working directory, entered by that fd (not by a path)."""
    import subprocess

    global _launcher
    with _launcher_lock:
        if _launcher is None:
            _launcher = _Launcher()
        launcher = _launcher
    parent = os.getpid()
    return launcher.run(lambda: subprocess.Popen(args, preexec_fn=die_with_parent(parent, cwd_fd), **kw))
