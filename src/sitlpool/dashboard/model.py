"""What the dashboard shows, read from files only: the pool's leases (lock files, via
``sitlpool.status``), each managed SITL's ``state.json`` (``sitlpool.statefile``) and the log
it is writing (``livelog``: its key fields for the small plots), the kept logs
(``sitlpool.logs.LogStore``, with a one-line summary each: ``keptlogs``) and, with ``--ray``,
the cluster's nodes. No serial port is taken and no MAVLink is sent: the dashboard is a reader.

``Model.poll()`` is called a few times a second. It is cheap when nothing changed: a state
file is read again only when its inode, size or mtime changed (and once a second for its
age); the live logs once a second (their last few KB); the pool's leases once a second; what
costs a /proc scan (SITLs running without a lease) every ``full_period`` s. Fields the
dashboard takes from a state file beyond what ``statefile`` checks (position, speeds, GPS,
texts, ready to arm...) are checked here: a value of the wrong type is dropped, never shown as
something else.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import pidfiles, procinfo, statefile
from ..config import load_settings
from ..instances import out_of_range
from ..leases import LeasePool, status_document
from ..logs import LogStore
from ..process.keeplogs import run_dir_of
from ..status import pool_status
from .keptlogs import Briefs
from .livelog import PLOTS, LiveLog

TRACK_POINTS = 900  # positions kept per vehicle (15 min at 1 Hz)
ALT_POINTS = 300  # altitudes kept per vehicle for its small plot
TEXTS_KEPT = 8
MAX_TEXT = 300  # characters of one STATUSTEXT shown
MAX_SHAPE = 500  # points of a waypoint list or fence shown

# optional fields a state file may carry beyond statefile's checked ones, and their types
_NUM = (int, float)
_OPTIONAL: dict[str, tuple[type, ...]] = {
    "lat": _NUM,
    "lon": _NUM,
    "alt_amsl_m": _NUM,
    "groundspeed_m_s": _NUM,
    "climb_m_s": _NUM,
    "airspeed_m_s": _NUM,
    "heading_deg": _NUM,
    "gps_fix_type": (int,),
    "gps_satellites": (int,),
    "ready_to_arm": (bool,),
    "not_ready_because": (str,),
    "kind": (str,),
    "holder": (str,),
    "prearm_ok": (bool,),
    "ekf_ok": (bool,),
    "booting": (bool,),
}
_LIMITS = {"lat": 90.0, "lon": 180.0}


def _finite(v: object, limit: float = 1e9) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and abs(v) <= limit


def _latlon(p: object) -> tuple[float, float] | None:
    """``[lat, lon, ...]`` or ``{"lat":..,"lon":..}`` -> (lat, lon), else None."""
    if isinstance(p, dict):
        p = [p.get("lat"), p.get("lon")]
    if isinstance(p, (list, tuple)) and len(p) >= 2 and _finite(p[0], 90) and _finite(p[1], 180):
        return float(p[0]), float(p[1])
    return None


def _shape(v: object) -> list[tuple[float, float]]:
    if not isinstance(v, list):
        return []
    out = [q for q in (_latlon(p) for p in v[:MAX_SHAPE]) if q is not None]
    return out


def readiness(v: dict, d: dict) -> dict:
    """Ready to arm and why not, from what a state file says (as ``Flight.readiness`` decides it
    on a link: the link, booting, the pre-arm bit with its PreArm texts, the EKF, a GPS fix and
    a home); nothing when the state file says none of it."""
    if not any(k in v for k in ("prearm_ok", "ekf_ok", "booting")):
        return {}
    why = []
    if v.get("link") not in (None, "connected"):
        why.append(f"the link is {v.get('link')}")
    elif v.get("booting"):
        why.append("the vehicle is still booting")
    if v.get("prearm_ok") is False:
        raw = d.get("prearm_texts")
        texts = [t[:MAX_TEXT] for t in raw[:3] if isinstance(t, str)] if isinstance(raw, list) else []
        why.append("pre-arm checks failing" + (": " + "; ".join(texts) if texts else " (no PreArm text yet)"))
    if v.get("ekf_ok") is False:
        why.append("the EKF is not ready to fly on GPS")
    elif "ekf_ok" not in v:
        if (v.get("gps_fix_type") or 0) < 3:
            why.append(f"no 3D GPS fix yet (fix type {v.get('gps_fix_type')})")
        elif _latlon(d.get("home")) is None:
            why.append("no home position yet")
    return {"ready_to_arm": not why, "not_ready_because": "; ".join(why)[:MAX_TEXT]}


def vehicle_facts(d: dict) -> dict:
    """The part of a (statefile-checked) state document the page shows, every extra field
    checked for its type; the rest of the document is not passed on."""
    out: dict[str, Any] = {
        k: d.get(k)
        for k in (
            "instance",
            "link",
            "mode",
            "armed",
            "relative_alt_m",
            "battery_pct",
            "battery_v",
            "heartbeat_age_s",
            "sitl_pid",
            "time",
            "age_s",
            "stale",
            "stale_reason",
        )
    }
    for k, types in _OPTIONAL.items():
        v = d.get(k)
        if isinstance(v, types) and not (isinstance(v, bool) and bool not in types):
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not _finite(v, _LIMITS.get(k, 1e9)):
                continue
            out[k] = v[:MAX_TEXT] if isinstance(v, str) else v
    texts = d.get("texts")
    if isinstance(texts, list):
        out["texts"] = [t[:MAX_TEXT] for t in texts[-TEXTS_KEPT:] if isinstance(t, str)]
    elif isinstance(d.get("last_text"), str):
        out["texts"] = [d["last_text"][:MAX_TEXT]]
    else:
        out["texts"] = []
    if "ready_to_arm" not in out:
        out.update(readiness(out, d))
    home = _latlon(d.get("home"))
    out["home"] = list(home) if home else None
    out["waypoints"] = [list(p) for p in _shape(d.get("waypoints"))]
    out["fence"] = [list(p) for p in _shape(d.get("fence"))]
    return out


class Track:
    """One vehicle's recent positions, altitudes and mode/arm changes, as the dashboard saw them."""

    def __init__(self) -> None:
        self.points: deque = deque(maxlen=TRACK_POINTS)  # (t, lat, lon, rel_alt)
        self.alts: deque = deque(maxlen=ALT_POINTS)  # (t, rel_alt)
        self.events: deque = deque(maxlen=200)  # (t, kind, text) as picture.render takes them
        self.last_time: float | None = None
        self.mode: str | None = None
        self.armed: bool | None = None
        self.home: tuple[float, float] | None = None

    def add(self, v: dict) -> None:
        t = v.get("time")
        if not _finite(t, 1e12) or t == self.last_time:
            return
        self.last_time = t
        alt = v.get("relative_alt_m")
        if _finite(alt):
            self.alts.append((t, alt))
        if "lat" in v and "lon" in v:
            self.points.append((t, v["lat"], v["lon"], alt if _finite(alt) else 0.0))
        if v.get("home"):
            self.home = (v["home"][0], v["home"][1])
        if v.get("mode") != self.mode and v.get("mode") is not None:
            self.mode = v["mode"]
            self.events.append((t, "mode", str(v["mode"])))
        if v.get("armed") != self.armed:
            self.armed = v.get("armed")
            self.events.append((t, "armed" if self.armed else "disarmed", "armed" if self.armed else "disarmed"))

    def as_dict(self) -> dict:
        return {"points": [[p[1], p[2]] for p in self.points], "alts": [[a[0], a[1]] for a in self.alts]}


class Model:
    """The dashboard's view of the pool, refreshed by ``poll()``; ``document()`` is what the
    page receives (``tracks=True``: with every vehicle's kept track, for a page that just opened)."""

    def __init__(
        self,
        settings: Any = None,
        full_period: float = 5.0,
        logs_period: float = 10.0,
        fleet_status: Callable[[], dict] | None = None,
        fleet_period: float = 10.0,
        livelog_period: float = 1.0,
        tiles: str | None = None,
    ) -> None:
        self.settings = settings or load_settings()
        self.data_dir = Path(self.settings.data_dir)
        self.pool = LeasePool.from_settings(self.settings, check=False)
        self.full_period = full_period
        self.logs_period = logs_period
        self.fleet_status = fleet_status
        self.fleet_period = fleet_period
        self.version = 0
        self.status: dict = {}
        self.vehicles: dict[int, dict] = {}
        self.unreadable_states: dict[int, str] = {}
        self.tracks: dict[int, Track] = {}
        self.logs: list[dict] = []
        self.logs_error: str | None = None
        self.fleet: dict | None = None
        self._stat: dict[int, tuple] = {}
        self.livelog_period = livelog_period
        self.livelogs: dict[int, Any] = {}  # instance -> LiveLog (its live DataFlash log, for the plots)
        self.tiles = tiles  # a tile URL ({z}/{x}/{y}) the page's maps draw under the track, or None
        self.briefs = Briefs(self.data_dir)
        self._uids: dict[int, int] = {}  # instance -> the owner of its state file (the SITL's user)
        self._next_livelogs = 0.0
        self._logs_soon_until = 0.0
        self._next_full = self._next_leases = self._next_logs = self._next_fleet = 0.0
        self._next_ages = 0.0
        self._errors: list[str] = []
        self._fleet_busy = threading.Event()
        self._fleet_got: tuple[dict | None] | None = None

    # ---- reading ------------------------------------------------------------------------

    def poll(self) -> bool:
        """Read what changed; True if the document changed."""
        now = time.monotonic()
        changed = self._poll_states(now >= self._next_ages)
        if now >= self._next_ages:
            self._next_ages = now + 1.0
        if now >= self._next_full:
            self._next_full = now + self.full_period
            self._next_leases = now + 1.0
            self.status = self._guard("pool status", lambda: pool_status(self.settings, all_=True), self.status)
            changed = True
        elif now >= self._next_leases:
            self._next_leases = now + 1.0
            changed = self._leases() or changed
        if now >= self._next_livelogs:
            self._next_livelogs = now + self.livelog_period
            changed = self._guard("live logs", self._poll_livelogs, False) or changed
        if now >= self._next_logs:
            # every second for a while once a vehicle left: its logs are kept as its SITL ends
            self._next_logs = now + (1.0 if now < self._logs_soon_until else self.logs_period)
            changed = self._read_logs() or changed
        elif self.briefs.fresh():
            self.logs = self.briefs.merge(self.logs)  # a new list: the page gets the logs again
            changed = True
        if self._fleet_got is not None:
            self.fleet, self._fleet_got = self._fleet_got[0], None
            changed = True
        if self.fleet_status is not None and now >= self._next_fleet and not self._fleet_busy.is_set():
            # in a thread of its own: a cluster that does not answer never holds up the vehicles
            self._next_fleet = now + self.fleet_period
            self._fleet_busy.set()
            threading.Thread(target=self._read_fleet, daemon=True, name="dashboard: Ray cluster").start()
        if changed:
            self.version += 1
        return changed

    def _guard(self, what: str, fn: Callable[[], Any], old: Any) -> Any:
        try:
            got = fn()
        except Exception as e:  # a reader's failure is one line on the page, never a dead dashboard
            line = f"{what}: {type(e).__name__}: {e}"[:MAX_TEXT]
            if line not in self._errors:  # the same failure again is the same line
                self._errors = [*self._errors[-4:], line]
            return old
        if self._errors:  # it answers again: its failure is no longer a problem
            self._errors = [x for x in self._errors if not x.startswith(f"{what}: ")]
        return got

    def _read_fleet(self) -> None:
        assert self.fleet_status is not None
        try:
            self._fleet_got = (self._guard("Ray cluster", self.fleet_status, self.fleet),)
        finally:
            self._fleet_busy.clear()

    def _leases(self) -> bool:
        """The held/broken leases and the free count, once a second (no /proc scan)."""
        if not self.status:
            return False

        def read() -> dict:
            doc = status_document(self.pool)
            for h in doc["held"]:
                rec = pidfiles.read(self.data_dir, h["instance"])
                h["sitl"] = (
                    None
                    if rec is None
                    else {"pid": rec.pid, "binary": rec.binary, "alive": procinfo.is_alive(rec.pid, rec.start_ticks)}
                )
            av = self.pool.availability({h["instance"] for h in doc["held"]}).as_dict()
            doc["free"], doc["free_count"], doc["ports_taken"] = av["free"], len(av["free"]), av["ports_taken"]
            return doc

        doc = self._guard("leases", read, None)
        if doc is None:
            return False
        old = {k: self.status.get(k) for k in doc}
        self.status.update(doc)
        return old != {k: self.status.get(k) for k in doc} or any(h.get("age_s") for h in doc["held"])

    def _poll_states(self, all_: bool) -> bool:
        root = self.data_dir / "sessions"
        try:
            names = os.listdir(root)
        except OSError:
            names = []
        found = {int(n) for n in names if n.isascii() and n.isdigit() and str(int(n)) == n and len(n) < 12}
        found = {n for n in found if not out_of_range(n)}
        changed = False
        for gone in set(self.vehicles) - found:
            del self.vehicles[gone]
            changed = True
            self._logs_soon()
        for gone in set(self.unreadable_states) - found:
            del self.unreadable_states[gone]
            changed = True
        for n in sorted(found):
            path = statefile.state_path(self.data_dir, n)
            try:
                st = os.lstat(path)
                key: tuple = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode)
                self._uids[n] = st.st_uid
            except OSError:
                key = ()
            if not key:
                if n in self.vehicles or n in self.unreadable_states:
                    if n in self.vehicles:
                        self._logs_soon()
                    self.vehicles.pop(n, None)
                    self.unreadable_states.pop(n, None)
                    changed = True
                self._stat.pop(n, None)
                continue
            if key == self._stat.get(n) and not all_:
                continue
            self._stat[n] = key
            d, why = statefile.read_checked(self.data_dir, n)
            if d is None:
                if why is not None and self.unreadable_states.get(n) != why:
                    self.unreadable_states[n] = why
                    self.vehicles.pop(n, None)
                    changed = True
                continue
            self.unreadable_states.pop(n, None)
            v = vehicle_facts(d)
            if self.vehicles.get(n) != v:
                self.vehicles[n] = v
                self.tracks.setdefault(n, Track()).add(v)
                changed = True
        return changed

    def _logs_soon(self) -> None:
        """A vehicle left (its session closed): read the kept logs every second for 10 s."""
        now = time.monotonic()
        self._logs_soon_until = now + 10.0
        self._next_logs = min(self._next_logs, now + 1.0)

    def _read_logs(self) -> bool:
        def read() -> list[dict]:
            return [r.as_dict() for r in LogStore(self.data_dir).list()[:200]]  # the newest

        got = self._guard("kept logs", read, self.logs)
        self.briefs.want(got)
        got = self.briefs.merge(got)
        changed = got != self.logs
        self.logs = got
        return changed

    def _poll_livelogs(self) -> bool:
        """Each vehicle's live DataFlash log: what it gained since the last poll (``LiveLog``)."""
        changed = False
        for gone in set(self.livelogs) - set(self.vehicles):
            del self.livelogs[gone]
            changed = True
        for n in self.vehicles:
            run_dir = run_dir_of(self.data_dir, n, self._uids.get(n, os.geteuid()))
            ll = self.livelogs.get(n)
            if ll is None or ll.run_dir != run_dir:
                ll = self.livelogs[n] = LiveLog(run_dir)
            changed = ll.poll() or changed
        return changed

    # ---- what the page gets ------------------------------------------------------------

    def document(self, tracks: bool = False) -> dict:
        s = self.status
        unreadable = list(s.get("unreadable", ()))
        seen = set(unreadable)
        for n, why in sorted(self.unreadable_states.items()):
            line = why if why.startswith(str(self.data_dir)) else f"{statefile.state_path(self.data_dir, n)}: {why}"
            if line not in seen:
                unreadable.append(line)
        vehicles = []
        for n, v in sorted(self.vehicles.items()):
            tr = self.tracks.get(n)
            v = dict(v, point=None)
            if tr is not None and tr.points:
                v["point"] = [tr.points[-1][1], tr.points[-1][2]]
            if tr is not None and tr.home and not v.get("home"):
                v["home"] = list(tr.home)
            if tracks and tr is not None:
                v["track"] = tr.as_dict()
            ll = self.livelogs.get(n)
            v["log"] = ll.as_dict(series=tracks) if ll is not None else None
            vehicles.append(v)
        return {
            "version": self.version,
            "now": round(time.time(), 3),
            "pool": {
                "lock_dir": s.get("lock_dir"),
                "pool": s.get("pool"),
                "held": s.get("held", []),
                "broken": s.get("broken", []),
                "free": s.get("free", []),
                "free_count": s.get("free_count"),
                "ports_taken": s.get("ports_taken", []),
                "running_without_lease": [
                    dict(d, in_pool=d.get("instance") in self.pool.pool) for d in s.get("running_without_lease", [])
                ],
                "warnings": s.get("warnings", []),
            },
            "unreadable": unreadable,
            "vehicles": vehicles,
            "logs": self.logs,
            "fleet": self.fleet,
            "errors": self._errors,
            "plots": [{"name": p, "unit": u, "series": list(names)} for p, u, names in PLOTS],
            "tiles": self.tiles,
        }

    def picture(self, instance: int) -> bytes:
        """The flight picture (``sitlpool.picture``) of what the dashboard saw of ``instance``."""
        from .. import picture  # Pillow: on the first picture asked for

        tr = self.tracks.get(instance) or Track()
        t0 = tr.points[0][0] if tr.points else 0.0
        points = [(p[0] - t0, p[1], p[2], p[3]) for p in tr.points]
        events = [(e[0] - t0, e[1], e[2]) for e in tr.events]
        v = self.vehicles.get(instance) or {}
        wps = [(i, p[0], p[1]) for i, p in enumerate(v.get("waypoints") or [], start=1)]
        return picture.render(points, events, wps, tr.home, f"instance {instance} as the dashboard saw it")
