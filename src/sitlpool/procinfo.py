"""Processes as the OS sees them: start ticks, process groups, killing a group safely."""

from __future__ import annotations

import os
import signal
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


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


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def group_members(pg: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            f = _stat_fields(int(d))
            if f and int(f[2]) == pg and f[0] not in ("Z", "X"):
                out.append(int(d))
    return out


def signal_group(pg: int, sig: int) -> bool:
    try:
        os.killpg(pg, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def terminate_group(pg: int, leader: int, grace: float = 3.0, poll: float = 0.01) -> str:
    """SIGTERM the group, SIGKILL it if the leader outlives ``grace``; wait for the leader.

    For a process that is not our child (an orphan): its death is seen in /proc.
    Returns what was done: "terminated" or "killed".
    """
    signal_group(pg, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not is_alive(leader) and not group_members(pg):
            return "terminated"
        time.sleep(poll)
    signal_group(pg, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while is_alive(leader) and time.monotonic() < deadline:
        time.sleep(poll)
    return "killed"
