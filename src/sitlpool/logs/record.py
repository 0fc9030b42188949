"""What the log store records of a kept log (``LogRecord``), its ids, its errors, its budget
and the ``since`` filter. ``sitlpool.logs.store`` uses them (and re-exports them)."""

from __future__ import annotations

import os
import re
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime

from ..config import ENV_PREFIX
from ..errors import ConfigError
from .reader import LogError

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
        """A record from its JSON; ``ValueError`` when a field is not what the store writes
        there (a record is data anyone of a shared store's group may write: module
        ``sitlpool.logs.store``), so a damaged one is skipped, never a crash of a listing."""
        if not isinstance(d, dict):
            raise ValueError("a record is a JSON object")
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        for k, v in known.items():
            if not _valid(k, v):
                raise ValueError(f"record field {k} = {str(v)[:40]!r} is not what the store writes")
        return cls(**known)


MAX_RECORD_BYTES = 64 << 10  # a record the store writes is well under 1 kB: a bigger one is not read
MAX_TIME = 1e11  # Unix seconds (year 5138): a time beyond is no log's
_TEXT = ("id", "kind", "path", "session", "label", "holder", "model", "binary", "binary_version", "source")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _valid(k: str, v) -> bool:
    if k in ("id", "path", "kind"):
        return isinstance(v, str) and (k != "kind" or v in ("bin", "tlog"))
    if k in _TEXT:
        return v is None or isinstance(v, str)
    if k == "size":
        return _number(v) and isinstance(v, int) and v >= 0
    if k in ("managed", "pinned"):
        return isinstance(v, bool)
    if k in ("instance", "owner"):
        return v is None or (isinstance(v, int) and not isinstance(v, bool))
    if k in ("start", "end"):
        return v is None or (_number(v) and 0 <= v <= MAX_TIME)
    if k == "extra":
        return isinstance(v, dict)
    return True


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
