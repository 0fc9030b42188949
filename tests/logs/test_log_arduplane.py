"""Real ArduPlane's log through sitlpool (skipped without SITLPOOL_TEST_SITL_BINARY): a
managed ``arduplane`` takes off with ``Flight.takeoff`` (TAKEOFF mode, TKOFF_ALT, armed: it
launches itself) and circles at that altitude. Its log, opened at arming, is read while it
is written (``current_log``: summary and a field series up to the last whole message) and
after the SITL is stopped (the kept log in the log store): a plane's mode names, a climb to
the takeoff altitude, the circling in GPS's ground course, and the same modes and flight
in the live read as in the final one. Without a real SITL: a plane's log that opens at
arming, as ArduPlane writes it ("Throttle armed", no ARM message), has its flight."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from logfiles import BinWriter

from sitlpool.config import load_settings
from sitlpool.flight import Flight
from sitlpool.logs import LogReader, LogStore, fields, sitl_logs, summary
from sitlpool.logs.tables import MODE_TABLES
from sitlpool.process import ManagedManager

SPEEDUP = 5
ALT = 40.0
STILL_ARMED = "still armed at the end of the log"
CIRCLE_S = 40.0  # vehicle seconds circling at the top: more than one turn of a ~60 m loiter


@pytest.fixture
def settings(env, real_plane):
    s = load_settings()
    s.sitl_binary = real_plane
    return s


def log_of(h) -> Path:
    """The stopped SITL's log: its kept log (the log store), else its directory's newest."""
    kept = [Path(r.path) for r in getattr(h, "kept_logs", []) if str(r.path).upper().endswith(".BIN")]
    if kept:
        return kept[-1]
    found = sitl_logs(h.cwd / "logs")
    assert found, f"no DataFlash log in {h.cwd / 'logs'}"
    return found[-1]


def live_log(h) -> Path | None:
    if hasattr(h, "current_log"):
        return h.current_log()
    found = sitl_logs(h.cwd / "logs") if h.cwd else []
    return found[-1] if found else None


def turned_degrees(courses: list[float]) -> float:
    """How far a ground course turned in all, one way (degrees, unwrapped)."""
    total = 0.0
    for a, b in zip(courses, courses[1:]):
        total += (b - a + 180.0) % 360.0 - 180.0
    return abs(total)


def test_arduplane_takes_off_circles_and_its_log_reads_live_and_kept(settings, instances):
    m = ManagedManager(settings)
    try:
        h = m.start("plane-log", model="plane", speedup=SPEEDUP, ready_timeout=60)
        f = Flight(h.link)
        assert f.kind == "plane"
        f.arm_and_takeoff(ALT, timeout=120)
        reached = h.link.wait(lambda v: (v.rel_alt or 0) >= ALT * 0.8, 240 / SPEEDUP + 30)
        assert reached, f"no climb to {ALT * 0.8:g} m: at {h.link.vehicle.rel_alt} m"
        time.sleep(CIRCLE_S / SPEEDUP)
        live = live_log(h)
        assert live is not None and live.is_file(), "no log being written while it flies"
        s = summary(live)  # being written: read up to the last whole message
        assert s["vehicle"] == "ArduPlane" and s["end"]["status"] in ("complete", "truncated"), s["end"]
        assert [x["disarmed_by"] for x in s["arming"]] == [STILL_ARMED], s["arming"]  # "Throttle armed"
        assert s["altitude"]["max"] >= ALT * 0.8, s["altitude"]
        live_modes = [x["mode"] for x in s["modes"]]
        assert "TAKEOFF" in live_modes, live_modes
        series = fields(live, ["GPS.GCrs", "POS.RelHomeAlt"], max_points=2000)["fields"]
        assert series["POS.RelHomeAlt"]["count"] > 10 and series["GPS.GCrs"]["count"] > 10, series
        assert "takeoff" in [p["phase"] for p in s["phases"]] or "climb" in [p["phase"] for p in s["phases"]]
        h.kill(wait=True)
        log = log_of(h)
    finally:
        m.close_all()
    kept = [r for r in getattr(h, "kept_logs", []) if r.kind == "bin"]
    if kept:  # the process layer keeps it: in the store, recorded
        rec = kept[-1]
        assert (rec.model, rec.binary) == ("plane", "arduplane"), rec
        assert rec.binary_version.startswith("4.7"), rec.binary_version
        assert LogStore(settings.data_dir).get(rec.id).path == rec.path
    s = summary(log)
    print(
        "ArduPlane log:",
        log.stat().st_size,
        "bytes;",
        [(x["mode"], x["start"]) for x in s["modes"]],
        [(p["phase"], p["duration"]) for p in s["phases"]],
        s["altitude"],
        s["end"]["status"],
    )
    assert s["vehicle"] == "ArduPlane" and s["firmware"].startswith("ArduPlane V4.7"), s["firmware"]
    modes = [x["mode"] for x in s["modes"]]
    assert modes[: len(live_modes)] == live_modes, (modes, live_modes)
    # a plane's names for its mode numbers (13 is TAKEOFF for a plane, SPORT for a copter)
    assert all(x["mode"] == MODE_TABLES["ArduPlane"][x["number"]] for x in s["modes"]), s["modes"]
    assert {"mode": "TAKEOFF", "number": 13} in [{"mode": x["mode"], "number": x["number"]} for x in s["modes"]]
    phases = [p["phase"] for p in s["phases"]]
    assert phases[0] == "armed on ground", phases
    assert "climb" in phases or "takeoff" in phases, phases
    assert ALT * 0.8 <= s["altitude"]["max"] <= ALT * 1.5, s["altitude"]
    assert s["speed"]["max_climb"] > 1.0 and s["speed"]["max_horizontal"] > 10.0, s["speed"]
    assert [x["disarmed_by"] for x in s["arming"]] == [STILL_ARMED], s["arming"]  # stopped in flight
    assert "Throttle armed" in [x["text"] for x in s["messages"]]  # a plane's arming text
    # the circling: after the climb the ground course turns through more than a full circle
    top = next(p for p in s["phases"] if p["phase"] not in ("armed on ground", "takeoff", "climb"))["start"]
    crs = fields(log, ["GPS.GCrs"], t0=top, max_points=10000)["fields"]["GPS.GCrs"]["v"]
    assert turned_degrees(crs) > 360.0, f"turned {turned_degrees(crs):.0f} degrees after {top} s"
    assert {"MODE", "PARM", "GPS", "BARO", "ATT", "CTUN", "POS"} <= set(LogReader(log).describe()["types"])


def test_a_plane_log_opened_at_arming_has_its_flight(tmp_path):
    """ArduPlane says "Throttle armed" / "Throttle disarmed" (Copter: "Arming motors"); a log
    that opens at arming has no ARM message of the arming: the text is what tells."""
    w = BinWriter(tmp_path / "plane.BIN")
    w.define("VER", "QBHBBBBIZHBBII", "TimeUS,BT,BST,Maj,Min,Pat,FWT,GH,FWS,APJ,BU,FV,IMI,ICI")
    w.define("MSG", "QZ", "TimeUS,Message")
    w.define("MODE", "QMBB", "TimeUS,Mode,ModeNum,Rsn")
    w.define("POS", "QLLfff", "TimeUS,Lat,Lng,Alt,RelHomeAlt,RelOriginAlt", "sDUmmm", "FGG000")
    w.write("MSG", 20_000_000, b"Throttle armed")
    w.write("VER", 20_000_100, 3, 0, 4, 7, 0, 0, 0x90700977, b"ArduPlane V4.7.0-dev (90700977)", 0, 3, 0, 0, 0)
    w.write("MSG", 20_000_100, b"ArduPlane V4.7.0-dev (90700977)")
    w.write("MODE", 20_000_100, 13, 13, 2)
    for i in range(500):  # 50 s: 3 s on the ground, climb at 4 m/s to 40 m, circle, glide down, land
        t = i / 10
        alt = 0.0 if t < 3 else min(40.0, 4 * (t - 3)) if t < 30 else max(0.0, 40.0 - 4 * (t - 30))
        w.write("POS", 20_000_000 + int(t * 1e6), -35.36, 149.16, 584 + alt, alt, alt)
        if i == 450:
            w.write("MSG", 65_000_000, b"Throttle disarmed")
    w.close()
    s = summary(tmp_path / "plane.BIN")
    assert s["vehicle"] == "ArduPlane" and [m["mode"] for m in s["modes"]] == ["TAKEOFF"]
    assert s["arming"] == [{"armed": 20.0, "disarmed": 65.0, "armed_by": "MSG", "disarmed_by": "MSG"}], s["arming"]
    phases = [p["phase"] for p in s["phases"]]
    assert phases == ["armed on ground", "takeoff", "hover", "landing", "armed on ground", "disarmed"], phases
