"""``<data_dir>/sessions/<n>/state.json``: the live state of a SITL that sitlpool launched,
written once a second by its launcher's link, so that ``sitlpool status`` shows mode, armed,
altitude, battery and the last STATUSTEXT without taking a serial port (SITL serves one
client per port). Written atomically (temp file + rename); the writer names its pid and
start ticks, so a reader tells a live file from one whose launcher is gone (stale).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path

from . import pidfiles, procinfo
from .instances import out_of_range

STATE_FILE = "state.json"
PERIOD_S = 1.0
STALE_AFTER_S = 5.0  # a live writer that has not written for this long is stuck: stale too
TEXTS = 8  # the last STATUSTEXTs a state file carries


def state_path(data_dir: Path, instance: int) -> Path:
    return pidfiles.session_dir(data_dir, instance) / STATE_FILE


class StateWriter:
    """Writes ``path`` every ``period`` s from ``link.vehicle`` until stopped; the file is
    removed when the writer stops or the link is stopped (the session closed)."""

    def __init__(
        self, link, path: Path, instance: int | None = None, sitl_pid: int | None = None, period: float = PERIOD_S
    ):
        self.link = link
        self.path = Path(path)
        self.instance = instance
        self.sitl_pid = sitl_pid
        self.period = period
        self._stop = threading.Event()
        self._tmp = self.path.with_name(f".{STATE_FILE}.{os.getpid()}.{id(self):x}.tmp")
        self._me = (os.getpid(), procinfo.start_ticks(os.getpid()) or 0)
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"state file {self.path.parent.name}")

    def start(self) -> StateWriter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(2)
        self._remove()

    def document(self) -> dict:
        v = self.link.vehicle
        texts = list(v.texts)
        last = texts[-1] if texts else None
        age = v.heartbeat_age()
        return {
            "schema": 1,
            "instance": self.instance,
            "sitl_pid": self.sitl_pid,
            "writer_pid": self._me[0],
            "writer_start_ticks": self._me[1],
            "time": round(time.time(), 3),
            "link": self.link.state,
            "mode": v.mode,
            "armed": v.armed,
            "relative_alt_m": None if v.rel_alt is None else round(v.rel_alt, 2),
            "battery_pct": v.battery_remaining,
            "battery_v": None if v.voltage is None else round(v.voltage, 2),
            "heartbeat_age_s": None if age is None else round(age, 2),
            "last_text": None if last is None else last[2],
            "last_text_time": None if last is None else round(last[0], 3),
            # for the dashboard (issue 25): where, how fast, GPS, home, the last texts, readiness
            "lat": v.lat,
            "lon": v.lon,
            "alt_amsl_m": None if v.alt_amsl is None else round(v.alt_amsl, 2),
            "groundspeed_m_s": round(v.groundspeed, 2),
            "climb_m_s": round(v.climb, 2),
            "heading_deg": v.heading,
            "gps_fix_type": v.gps_fix,
            "gps_satellites": v.gps_sats,
            "home": None if v.home is None else [v.home[0], v.home[1]],
            "texts": [t for _, _, t in texts[-TEXTS:]],
            "prearm_ok": v.prearm_ok,
            "ekf_ok": v.ekf_ok,
            "booting": v.booting,
            "prearm_texts": [t for when, _, t in texts if t.startswith("PreArm:") and time.time() - when < 30][-3:],
        }

    def write(self) -> None:
        data = json.dumps(self.document(), separators=(",", ":"))
        fd = pidfiles.open_new(self._tmp)  # never through a symlink someone planted in a shared dir
        with open(fd, "w") as f:
            f.write(data)
        os.replace(self._tmp, self.path)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            if self.link.state == "stopped":  # the session was closed: its state with it
                self._remove()
                return
            try:
                self.write()
            except OSError:
                pass  # the session dir went away (wiped): try again next second

    def _remove(self) -> None:
        for p in (self.path, self._tmp):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
            except OSError:
                pass


def start_writer(link, data_dir: Path, instance: int, sitl_pid: int | None = None) -> StateWriter:
    """What a launcher calls once its link to a SITL it launched is up."""
    return StateWriter(link, state_path(data_dir, instance), instance, sitl_pid).start()


_TYPES = {  # field -> what a writer puts there; anything else is someone else's junk
    "mode": (str, type(None)),
    "armed": (bool,),
    "link": (str, type(None)),
    "last_text": (str, type(None)),
    "relative_alt_m": (int, float, type(None)),
    "battery_pct": (int, type(None)),
    "battery_v": (int, float, type(None)),
    "heartbeat_age_s": (int, float, type(None)),
    "sitl_pid": (int, type(None)),
}
_INTS = {"battery_pct", "sitl_pid"}


def _no_constant(name: str):
    raise ValueError(f"{name} is not a value a writer puts there")


def read(data_dir: Path, instance: int) -> dict | None:
    """The state of ``instance`` with ``stale`` (and why) and ``age_s``; None if none or junk."""
    return read_checked(data_dir, instance)[0]


def read_checked(data_dir: Path, instance: int) -> tuple[dict | None, str | None]:
    """``(state, None)``, ``(None, None)`` if there is no state file, ``(None, why)`` if it
    cannot be read. Anyone sharing the data dir can put a file there: never follows a
    symlink, never blocks on a FIFO, reads a bounded amount and checks every field's type
    and range (a huge integer altitude is junk, not a crash later)."""
    path = state_path(data_dir, instance)
    try:
        got = pidfiles.read_regular(path)
        if got is None:
            return None, None
        if len(got[0]) > pidfiles.MAX_SIZE:
            return None, "larger than a state file"
        d = json.loads(got[0], parse_constant=_no_constant)  # no NaN/Infinity
        if not isinstance(d, dict) or d.get("schema") != 1:
            return None, "not a sitlpool state file"
        for k, types in _TYPES.items():
            if k in d and (not isinstance(d[k], types) or not _in_range(k, d[k])):
                return None, f"its {k} is not one a writer puts there"
        pid, ticks = d["writer_pid"], d["writer_start_ticks"]
        if type(pid) is not int or type(ticks) is not int or not 0 < pid < 2**31 or not 0 <= ticks < 2**63:
            return None, "its writer_pid is not a process id"
        when = float(d["time"])
        if not math.isfinite(when):
            return None, "its time is not a time"
        age = time.time() - when
    except pidfiles.BadEntry as e:
        return None, str(e)
    except (OSError, ValueError, KeyError, TypeError, OverflowError, RecursionError) as e:
        return None, f"unreadable ({type(e).__name__})"
    d["age_s"] = round(age, 1)
    if not procinfo.is_alive(pid, ticks or None):
        d["stale"], d["stale_reason"] = True, f"its launcher (pid {pid}) is gone"
    elif age > STALE_AFTER_S:
        d["stale"], d["stale_reason"] = True, f"not updated for {age:.0f}s"
    else:
        d["stale"], d["stale_reason"] = False, None
    d["instance"] = instance
    return d, None


def _in_range(key: str, v: object) -> bool:
    if v is None or isinstance(v, (str, bool)):
        return True
    assert isinstance(v, (int, float))
    if key in _INTS:
        return isinstance(v, int) and -(2**31) < v < 2**31
    try:
        return math.isfinite(float(v)) and abs(v) < 1e9  # no altitude, voltage or age is larger
    except OverflowError:
        return False


def read_all(data_dir: Path) -> list[dict]:
    """Every instance's readable state file under ``data_dir``, by instance."""
    return scan_all(data_dir)[0]


def scan_all(data_dir: Path) -> tuple[list[dict], list[str]]:
    """Every instance's readable state file under ``data_dir`` (by instance), and one line
    for each state file that cannot be read (planted junk is shown, never a crash)."""
    root = Path(data_dir) / "sessions"
    try:
        names = os.listdir(root)
    except OSError:
        return [], []
    # an instance's directory has its canonical name: '²', '040' or '١' name none
    found = sorted({int(n) for n in names if n.isascii() and n.isdigit() and str(int(n)) == n})
    out, bad = [], []
    for n in found:
        if out_of_range(n):
            continue
        d, why = read_checked(data_dir, n)
        if d is not None:
            out.append(d)
        elif why is not None:
            path = state_path(data_dir, n)
            bad.append(why if why.startswith(str(path)) else f"{path}: {why}")
    return out, bad


def describe(d: dict) -> str:
    """One line for people: ``GUIDED, armed, 10.2 m, battery 87% — "Reached command #2"``."""
    if d.get("link") not in (None, "connected"):
        parts = [f"link {d['link']}"]
    else:
        parts = [str(d.get("mode") or "?"), "armed" if d.get("armed") else "disarmed"]
        if d.get("relative_alt_m") is not None:
            parts.append(f"{d['relative_alt_m']:.1f} m")
        if d.get("battery_pct") is not None:
            parts.append(f"battery {d['battery_pct']}%")
    line = ", ".join(parts)
    if d.get("last_text"):
        line += f' — "{d["last_text"]}"'
    if d.get("stale"):
        line = f"STALE ({d['stale_reason']}; {d.get('age_s', 0):.0f}s old): {line}"
    return line
