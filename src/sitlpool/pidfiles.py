"""``<data_dir>/sessions/<n>/sitl.pid``: who launched the SITL on instance n, and how to
recognise it (pid, process group and the leader's start ticks, so a recycled pid is
never mistaken for it). One place for pid files, whoever launches."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

PID_FILE = "sitl.pid"


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

    def describe(self) -> str:
        return f"pid {self.pid} (group {self.pgid}, {Path(self.binary).name}, launched by {self.owner or '?'} pid {self.holder_pid})"


def write(data_dir: Path, rec: PidRecord) -> Path:
    """Write the record atomically (temp file + rename)."""
    d = session_dir(data_dir, rec.instance)
    d.mkdir(parents=True, exist_ok=True)
    path = d / PID_FILE
    tmp = d / f".{PID_FILE}.{os.getpid()}.tmp"
    if not rec.time:
        rec.time = time.time()
    tmp.write_text(json.dumps(asdict(rec)) + "\n")
    os.replace(tmp, path)
    return path


def read(data_dir: Path, instance: int) -> PidRecord | None:
    """The record of ``instance``, or None if there is none or it is unreadable garbage."""
    path = session_dir(data_dir, instance) / PID_FILE
    try:
        d = json.loads(path.read_text())
        return PidRecord(
            instance=int(d["instance"]), pid=int(d["pid"]), pgid=int(d["pgid"]), start_ticks=int(d["start_ticks"]),
            binary=str(d.get("binary", "")), argv=list(d.get("argv", [])), owner=str(d.get("owner", "")),
            holder_pid=int(d.get("holder_pid", 0)), time=float(d.get("time", 0)),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove(data_dir: Path, instance: int, pid: int | None = None) -> None:
    """Remove the record (only if it still names ``pid``, when given)."""
    path = session_dir(data_dir, instance) / PID_FILE
    if pid is not None:
        rec = read(data_dir, instance)
        if rec is not None and rec.pid != pid:
            return
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def instances_with_records(data_dir: Path) -> list[int]:
    """Instances that have a ``sitl.pid`` file, sorted."""
    root = Path(data_dir) / "sessions"
    try:
        names = os.listdir(root)
    except OSError:
        return []
    return sorted(int(n) for n in names if n.isdigit() and (root / n / PID_FILE).exists())
