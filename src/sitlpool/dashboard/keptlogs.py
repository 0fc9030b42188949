"""The kept logs on the dashboard: a one-line summary of each of the newest (made in a thread
of its own: a long log's summary takes a second) and each log's picture (``sitlpool.logs``)."""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from pathlib import Path

from .. import logs

BRIEFS = 50  # the newest kept logs that get a one-line summary
PICTURE_FIELDS = ("CTUN.Alt", "GPS.Spd", "BAT.Volt", "BAT.Curr", "ATT.Roll", "ATT.Pitch")
PICTURES_KEPT = 20  # drawn pictures kept in memory


def brief(s: dict) -> str:
    """``summary``'s main figures in one line: duration, modes, highest altitude, distance, battery used."""
    parts = []
    if isinstance(s.get("duration"), (int, float)):
        parts.append(f"{s['duration']:.0f} s")
    modes: list[str] = []
    for m in s.get("modes") or []:
        if m.get("mode") and (not modes or modes[-1] != m["mode"]):
            modes.append(str(m["mode"]))
    if modes:
        parts.append("→".join(modes[:6]) + ("…" if len(modes) > 6 else ""))
    alt = (s.get("altitude") or {}).get("max")
    if isinstance(alt, (int, float)) and alt == alt:
        parts.append(f"max {alt:.1f} m")
    if isinstance(s.get("distance_m"), (int, float)):
        parts.append(f"{s['distance_m']:.0f} m flown")
    used = (s.get("battery") or {}).get("used_mah")
    if isinstance(used, (int, float)) and used == used:
        parts.append(f"{used:.0f} mAh")
    n = len(s.get("errors") or []) + len(s.get("failsafes") or [])
    if n:
        parts.append(f"{n} error{'s' if n > 1 else ''}/failsafe{'s' if n > 1 else ''}")
    end = (s.get("end") or {}).get("status")
    if end and end != "complete":
        parts.append(str(end))
    return ", ".join(parts) or "no flight in it"


class Briefs:
    """One-line summaries of kept logs by id, made one at a time in a daemon thread; ``fresh()``
    says new ones arrived since the last ``merge``."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir)
        self.done: dict[str, str] = {}  # id -> its line (or why there is none)
        self._todo: deque = deque()
        self._lock = threading.Lock()
        self._busy = False
        self._new = False

    def want(self, records: list[dict]) -> None:
        """Summarise the newest ``BRIEFS`` of ``records`` (newest first) not summarised yet."""
        with self._lock:
            queued = set(self._todo)
            for r in records[:BRIEFS]:
                if r.get("kind") == "bin" and r["id"] not in self.done and r["id"] not in queued:
                    self._todo.append(r["id"])
            if self._todo and not self._busy:
                self._busy = True
                threading.Thread(target=self._work, daemon=True, name="dashboard: log summaries").start()

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._todo:
                    self._busy = False
                    return
                log_id = self._todo.popleft()
            try:
                line = brief(logs.summary(logs.LogStore(self.data_dir).path(log_id)))
            except Exception as e:  # a log removed, unreadable or another user's: said on its row
                line = f"no summary: {e}"[:200]
            with self._lock:
                self.done[log_id] = line
                if len(self.done) > 4 * BRIEFS:
                    for k in list(self.done)[: len(self.done) - 2 * BRIEFS]:
                        del self.done[k]
                self._new = True

    def fresh(self) -> bool:
        with self._lock:
            return self._new

    def merge(self, records: list[dict]) -> list[dict]:
        """``records`` with each one's ``brief`` (a new list)."""
        with self._lock:
            self._new = False
            return [dict(r, brief=self.done.get(r["id"])) for r in records]


class Pictures:
    """Each kept log's picture (PNG), drawn once: the plotted fields the log has over its time."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir)
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, log_id: str) -> bytes:
        """The PNG; ``logs.LogError`` (one line) for an unknown, unreadable or foreign log."""
        with self._lock:
            if log_id in self._cache:
                self._cache.move_to_end(log_id)
                return self._cache[log_id]
        path = logs.LogStore(self.data_dir).path(log_id)
        types = logs.LogReader(path).read_formats()
        names = [n for n in PICTURE_FIELDS if n.split(".")[1] in getattr(types.get(n.split(".")[0]), "columns", ())]
        if not names:
            raise logs.LogError(f"log {log_id} has none of {', '.join(PICTURE_FIELDS)} to draw")
        png = logs.picture(path, names, title=f"kept log {log_id}")
        with self._lock:
            self._cache[log_id] = png
            while len(self._cache) > PICTURES_KEPT:
                self._cache.popitem(last=False)
        return png
