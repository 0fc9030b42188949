"""A SITL's log directory: its DataFlash logs, the one being written, and which files a
process still has open (a log being written is never moved nor pruned)."""

from __future__ import annotations

import os
import re
from pathlib import Path

BIN_NAME = re.compile(r"^[0-9]{1,8}\.BIN$", re.IGNORECASE)


def sitl_logs(logs_dir: str | os.PathLike) -> list[Path]:
    """The DataFlash logs (``NNNNNNNN.BIN``) of a SITL's log directory, oldest first."""
    try:
        names = [e.name for e in os.scandir(os.fspath(logs_dir)) if e.is_file() and BIN_NAME.match(str(e.name))]
    except OSError:
        return []
    return [Path(logs_dir) / n for n in sorted(names, key=lambda n: int(str(n).split(".")[0]))]


def current_log(logs_dir: str | os.PathLike) -> Path | None:
    """The log a running SITL is writing (a session's live log, readable while it flies):
    the one ``LASTLOG.TXT`` names, else the highest-numbered ``.BIN``."""
    d = Path(logs_dir)
    try:
        n = int((d / "LASTLOG.TXT").read_text().split()[0])
        p = d / f"{n:08d}.BIN"
        if p.is_file():
            return p
    except (OSError, ValueError, IndexError):
        pass
    logs = sitl_logs(d)
    return logs[-1] if logs else None


def open_paths(paths) -> set[str]:
    """Which of ``paths`` some process has open (``/proc/*/fd``; only the processes we may
    look at: our own, or all for root)."""
    want = {os.path.realpath(p) for p in paths}
    found: set[str] = set()
    if not want:
        return found
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return found
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target in want:
                found.add(target)
    return found
