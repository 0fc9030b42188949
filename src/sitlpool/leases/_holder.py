"""What a reader learns about the leases: who holds one (``Holder``), what is free (``Availability``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ._record import format_age


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
            pids = " ".join(map(str, self.kept_by))
            out += (
                f"; pid {self.pid} exited and passed the lease on: pid {', '.join(map(_named, self.kept_by))} "
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


def _named(pid: int) -> str:
    """``pid (comm)``: the kernel's short name, bounded, no arguments."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            comm = f.read().decode(errors="replace").strip()
    except OSError:
        return str(pid)
    return f"{pid} ({''.join(c if c.isprintable() else '?' for c in comm)})"


@dataclass
class Availability:
    """The pool instances nobody holds: free, or with ports taken by a process that holds
    no lease (a SITL started by hand or by autotest: never "free")."""

    free: list[int]
    ports_taken: dict[int, list]  # instance -> [ports.BusyPort], holders named
    unusable: dict[int, str] = field(default_factory=dict)  # instance -> why its lock file is refused

    def as_dict(self) -> dict:
        return {
            "free": self.free,
            "ports_taken": [
                {"instance": n, "ports": [b.describe() for b in busy]} for n, busy in self.ports_taken.items()
            ],
        }
