"""The built-in vehicle's DataFlash log writer: files and numbering as ArduPilot's, formats equal to a
real ArduCopter 4.7 log's, every field read back by pymavlink's DFReader and mavlogdump.py, live and
truncated logs readable, and ArduCopter's logging policy (arming, LOG_DISARMED, LOG_FILE_DSRMROT)."""

import math
import os
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from pymavlink import DFReader

from sitlpool.sim.dataflash import FMTS, DataFlashLog, next_log_number, read_lastlog
from sitlpool.sim.dataflash_formats import FORMATS
from sitlpool.sim.dataflash_logger import PERSIST_S, Logger, Sample

ROOT = Path(__file__).resolve().parents[2]
REAL_LOG = ROOT.parent / "shared" / "logs" / "copter-hop.BIN"
MAVLOGDUMP = Path(sys.executable).with_name("mavlogdump.py")
HOME = (-35.3632621, 149.1652374, 584.08)
ORIGIN = (-35.363261, 149.1652299, 584.09)
STRUCT = {"a": "64s", "b": "b", "B": "B", "h": "h", "H": "H", "i": "i", "I": "I", "f": "f", "d": "d"}
STRUCT.update({"n": "4s", "N": "16s", "Z": "64s", "c": "h", "C": "H", "e": "i", "E": "I", "L": "i", "M": "B"})
STRUCT.update({"q": "q", "Q": "Q"})


def raw_records(path: Path) -> list[tuple[str, tuple]]:
    """Every record of a BIN in file order, parsed independently of the writer: (type name, values)."""
    data = path.read_bytes()
    fmts = {128: ("FMT", 89, "BBnNZ")}
    out = []
    pos = 0
    while pos + 3 <= len(data) and data[pos] == 0xA3 and data[pos + 1] == 0x95:
        name, length, fmt = fmts[data[pos + 2]]
        if pos + length > len(data):
            break
        vals = struct.unpack("<" + "".join(STRUCT[c] for c in fmt), data[pos + 3 : pos + length])
        vals = tuple(v.rstrip(b"\0").decode(errors="replace") if isinstance(v, bytes) else v for v in vals)
        if name == "FMT":
            fmts[vals[0]] = (vals[2], vals[1], vals[3])
        out.append((name, vals))
        pos += length
    return out


def describe(path: Path) -> dict:
    """FMT, FMTU, UNIT and MULT content of a log, by message name."""
    recs = raw_records(path)
    fmt = {v[2]: (v[0], v[1], v[3], v[4]) for n, v in recs if n == "FMT"}
    names = {t: name for name, (t, *_rest) in fmt.items()}
    fmtu = {names[v[1]]: (v[2], v[3]) for n, v in recs if n == "FMTU"}
    units = [(v[1], v[2]) for n, v in recs if n == "UNIT"]
    mults = [(v[1], v[2]) for n, v in recs if n == "MULT"]
    return {"fmt": fmt, "fmtu": fmtu, "units": units, "mults": mults}


def read_all(path: Path) -> list:
    r = DFReader.DFReader_binary(str(path))
    out = []
    while (m := r.recv_msg()) is not None:
        out.append(m)
    return out


PARAMS = {
    "LOG_DISARMED": 0.0,
    "LOG_FILE_DSRMROT": 0.0,
    "MOT_THST_HOVER": 0.39,
    "FRAME_TYPE": 0.0,
    "ARMING_CHECK": 1.0,
    "WPNAV_SPEED": 1000.0,
}


class Flight:
    """Feeds a Logger as the vehicle would, 25 steps per sim second (the sim's main loop)."""

    def __init__(self, logs: Path, **params: float):
        self.params = {**PARAMS, **params}
        self.log = Logger(logs, self.params, {"WPNAV_SPEED": 500.0}, utc_at_boot=1.7e9)
        self.t = 0.0
        self.alt = 0.0
        self.climb = 0.0
        self.landed = True
        self.log.set_mission(0.0, [(16, 0, 0, 0, 0, *HOME, 0), (22, 0, 0, 0, 0, 0, 0, 10.0, 3)])
        self.log.boot(0.45, 0)
        self.log.set_home(0.45, HOME, ORIGIN)

    def sample(self) -> Sample:
        return Sample(
            lat=HOME[0],
            lon=HOME[1],
            alt=ORIGIN[2] + self.alt,
            rel_home_alt=self.alt + ORIGIN[2] - HOME[2],
            rel_origin_alt=self.alt,
            roll=1.5,
            pitch=-2.25,
            yaw=352.5,
            climb=self.climb,
            throttle_out=0.4 if not self.landed else 0.0,
            ground_speed=0.5,
            ground_course=90.0,
            curr=25.0,
            curr_tot=120.5,
            enrg_tot=1.5,
            rem_pct=96,
            rc_in=(1500, 1500, 1000, 1500, 1800, 1000, 1000, 1800),
            rc_out=(1600, 1601, 1602, 1603),
            landed=self.landed,
        )

    def run(self, seconds: float, climb: float = 0.0) -> None:
        self.climb = climb
        for _ in range(round(seconds / 0.04)):
            self.t += 0.04
            self.alt = max(0.0, self.alt + climb * 0.04)
            if climb > 0:
                self.landed = False
            elif self.alt == 0.0:
                self.landed, self.climb = True, 0.0
            self.log.tick(self.t, self.sample)

    def arm(self) -> None:
        self.log.mode(self.t, 4)
        self.log.armed_now(self.t)
        self.log.text(self.t, "Arming motors")

    def disarm(self) -> None:
        self.log.disarmed_now(self.t, 13)
        self.log.text(self.t, "Disarming motors")

    def hop(self) -> None:
        self.run(2.0)
        self.arm()
        self.run(1.0)
        self.run(5.0, climb=2.0)
        self.log.text(self.t, "Mode change to FLIP failed: init failed")
        self.log.mode_refused(self.t, 14)
        self.log.text(self.t, "Mode change to AUTO RTL failed: No return path or landing sequence found")
        self.run(3.0)
        self.run(6.0, climb=-2.0)
        self.run(1.0)
        self.disarm()


@pytest.fixture
def hop_log(tmp_path) -> Path:
    f = Flight(tmp_path / "logs")
    f.hop()
    f.run(PERSIST_S + 5)
    f.log.close()
    return tmp_path / "logs" / "00000001.BIN"


def test_formats_units_and_multipliers_equal_the_real_arducopter_log(hop_log):
    if not REAL_LOG.exists():
        pytest.skip(f"no real log at {REAL_LOG}")
    real, ours = describe(REAL_LOG), describe(hop_log)
    written = {n for n, _ in raw_records(hop_log)}
    assert written == set(FORMATS), "every type in the table is written, and only those"
    for name in written:
        assert ours["fmt"][name] == real["fmt"][name], f"FMT {name}"
        assert ours["fmtu"][name] == real["fmtu"][name], f"FMTU {name}"
    assert ours["units"] == real["units"] and len(ours["units"]) == 38
    assert ours["mults"] == real["mults"] and len(ours["mults"]) == 15
    # as DFReader sees them: each column's unit, with multipliers applied
    rr = DFReader.DFReader_binary(str(REAL_LOG))
    ro = DFReader.DFReader_binary(str(hop_log))
    for name in written - {"FMT"}:
        a, b = rr.formats[rr.name_to_id[name]], ro.formats[ro.name_to_id[name]]
        assert (b.columns, b.format, b.len) == (a.columns, a.format, a.len)
        assert [b.get_unit(c) for c in b.columns] == [a.get_unit(c) for c in a.columns], name


def test_header_in_arducopters_order(hop_log):
    recs = raw_records(hop_log)
    kinds = [(n, v[2] if n == "FMT" else None) for n, v in recs[:4]]
    assert kinds == [("FMT", "FMT"), ("FMT", "FMTU"), ("FMTU", None), ("FMTU", None)]
    assert [v[1] for _, v in recs[2:4]] == [FORMATS["FMTU"][0], FORMATS["FMT"][0]]
    seq = [n for n, _ in recs]
    first = {n: seq.index(n) for n in ("PARM", "UNIT", "MULT", "VER", "CMD", "MODE", "ORGN")}
    last_fmt = max(i for i, n in enumerate(seq) if n == "FMT")
    fmtus = [i for i, n in enumerate(seq) if n == "FMTU"]
    assert last_fmt < first["PARM"] < first["UNIT"] < first["MULT"] < fmtus[2] and fmtus[-1] < first["VER"]
    assert [v[1] for n, v in recs if n == "FMTU"][2:] == [row[0] for row in FORMATS.values()]
    msgs = [v[1] for n, v in recs if n == "MSG"]
    assert msgs[:5] == ["ArduCopter V4.7.0-dev (90700977)", "Hd1219c7c4c5404aaa1f6d2a48adfda4", "RC Protocol: UDP"] + [
        "New mission",
        "New rally",
    ]
    assert first["VER"] < first["CMD"] < first["MODE"] < first["ORGN"]
    parms = {v[1]: (v[2], v[3]) for n, v in recs if n == "PARM"}
    assert set(parms) == set(PARAMS) and parms["WPNAV_SPEED"] == (1000.0, 500.0)
    assert math.isnan(parms["MOT_THST_HOVER"][1]), "no default known: NaN, as ArduPilot"


def test_every_field_round_trips_through_dfreader(tmp_path):
    """Each type written with a distinct value in every field comes back equal from DFReader."""
    log = DataFlashLog(tmp_path / "logs")
    log.start(1_000_000, {"A": 1.0})
    sent = {}
    for k, (name, f) in enumerate(FMTS.items()):
        if name in ("FMT", "FMTU", "UNIT", "MULT"):
            continue
        fields = {}
        for i, (col, c) in enumerate(zip(f.columns, f.format)):
            seed = k * 31 + i
            if col == "TimeUS":
                v = 2_000_000 + k
            elif c in "nNZa":
                v = f"{name}{seed}"[: {"n": 4, "N": 16}.get(c, 64)]
            elif c in "fd":
                v = struct.unpack("<f", struct.pack("<f", seed * 1.25 - 7.5))[0]
            elif c == "L":
                v = -35.3632621 + seed * 1e-7
            elif c in "ceE" or c == "C":
                v = (seed % 100) * 1.25 if c in "CE" else (seed % 100) * 1.25 - 30
            elif c in "bhM":
                v = -(seed % 100) if c != "M" else seed % 100  # M: uint8 in ArduPilot, int8 in DFReader
            else:
                v = seed % 200
            fields[col] = v
        log.write(name, **fields)
        sent[name] = fields
    log.stop()
    got = {m.get_type(): m for m in read_all(log.path) if m.get_type() in sent}
    assert set(got) == set(sent)
    for name, fields in sent.items():
        m = got[name]
        for col, v in fields.items():
            back = getattr(m, col)
            if isinstance(v, float):
                assert back == pytest.approx(v, rel=1e-9, abs=1e-9), f"{name}.{col}"
            else:
                assert back == v, f"{name}.{col}"


def test_bad_names_are_named(tmp_path):
    log = DataFlashLog(tmp_path)
    log.start(0, {})
    with pytest.raises(KeyError, match="no message type 'XYZ'.*ATT"):
        log.write("XYZ", TimeUS=1)
    with pytest.raises(KeyError, match="ATT has no field 'Rol'.*Roll"):
        log.write("ATT", Rol=1.0)
    log.write("BARO", TimeUS=1, Temp=1e9, Alt=math.nan, SMS=-5)  # out of range: clamped, not an error
    log.stop()
    m = [m for m in read_all(log.path) if m.get_type() == "BARO"][0]
    assert (m.Temp, m.SMS) == (327.67, 0) and math.isnan(m.Alt)


def test_logger_flight_values_rates_and_events(hop_log):
    assert PERSIST_S == 15.0, "HAL_LOGGER_ARM_PERSIST: ArduCopter logs 15 s more after a disarm"
    msgs = read_all(hop_log)
    count = Counter(m.get_type() for m in msgs)
    first_att = min(m.TimeUS for m in msgs if m.get_type() == "ATT") / 1e6
    last_att = max(m.TimeUS for m in msgs if m.get_type() == "ATT") / 1e6
    span = last_att - first_att
    # armed at 2.0 s, disarmed at 18.0 s, then 15 s more, as ArduCopter keeps logging after a disarm
    assert first_att == pytest.approx(2.0, abs=0.15) and last_att == pytest.approx(18.0 + PERSIST_S, abs=0.15)
    for name in ("ATT", "CTUN", "POS", "BAT", "RCIN", "RCOU"):
        assert count[name] / span == pytest.approx(10, rel=0.05), name
    assert count["BARO"] / span == pytest.approx(20, rel=0.05), "two barometers, as SITL's"
    assert {m.I for m in msgs if m.get_type() == "BARO"} == {0, 1}
    assert count["GPS"] / span == pytest.approx(5, rel=0.05)
    ev = [(m.TimeUS / 1e6, m.Id) for m in msgs if m.get_type() == "EV"]
    # the log that opens at an arming lacks that arming's ARM and EV ARMED, as the real one does
    assert [i for _, i in ev] == [15, 57, 28, 17, 18, 11, 56]
    assert ev[2][0] == pytest.approx(3.0, abs=0.15) and ev[5][0] == pytest.approx(18.0, abs=0.05)
    arm = [(m.ArmState, m.Method) for m in msgs if m.get_type() == "ARM"]
    assert arm == [(0, 13)]
    texts = [m.Message for m in msgs if m.get_type() == "MSG"]
    assert "Arming motors" in texts and texts[-1] == "Disarming motors"
    assert "Mode change to AUTO RTL failed: No return path or " in texts, "cut at 50 bytes, as ArduPilot"
    modes = [(m.Mode, m.Rsn) for m in msgs if m.get_type() == "MODE"]
    assert modes == [(4, 2)]
    top = max((m for m in msgs if m.get_type() == "CTUN"), key=lambda m: m.Alt)
    assert top.Alt == pytest.approx(10.0, abs=0.1) and top.BAlt == pytest.approx(top.Alt, abs=0.01)
    climbing = [m for m in msgs if m.get_type() == "CTUN" and 4 < m.TimeUS / 1e6 < 7]
    assert {m.CRt for m in climbing} == {200} and all(m.ThH == pytest.approx(0.39) for m in climbing)
    pos = [m for m in msgs if m.get_type() == "POS"][-1]
    assert (pos.Lat, pos.Lng) == (HOME[0], HOME[1]) and pos.Alt == pytest.approx(ORIGIN[2], abs=1e-3)
    gps = [m for m in msgs if m.get_type() == "GPS"][0]
    assert (gps.Status, gps.NSats, gps.HDop, gps.Lat, gps.GWk) == (6, 10, 1.21, HOME[0], 2288)
    bat = [m for m in msgs if m.get_type() == "BAT"][0]
    assert (bat.Curr, bat.CurrTot, bat.RemPct, bat.Volt) == (25.0, 120.5, 96, pytest.approx(12.6))
    rc = [m for m in msgs if m.get_type() == "RCOU"][0]
    assert (rc.C1, rc.C4, rc.C5, rc.C14) == (1600, 1603, 0, 0)
    cmd = [(m.CNum, m.CId, m.Alt, m.Frame) for m in msgs if m.get_type() == "CMD"]
    assert cmd == [(0, 16, pytest.approx(HOME[2]), 0), (1, 22, 10.0, 3)]
    orgn = [(m.Type, m.Lat, m.Lng) for m in msgs if m.get_type() == "ORGN"]
    assert orgn == [(0, ORIGIN[0], ORIGIN[1]), (1, HOME[0], HOME[1])]
    assert [m.TimeUS for m in msgs if hasattr(m, "TimeUS")] == sorted(m.TimeUS for m in msgs if hasattr(m, "TimeUS"))


def test_mavlogdump_reads_it(hop_log):
    n = sum(1 for _ in read_all(hop_log))
    for args in ([], ["--format", "json"], ["--verbose"]):
        r = subprocess.run(
            [sys.executable, str(MAVLOGDUMP), *args, str(hop_log)], capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
        if not args:
            assert len(r.stdout.splitlines()) == n


def test_lastlog_and_numbering(tmp_path):
    logs = tmp_path / "logs"
    assert next_log_number(logs) == 1
    log = DataFlashLog(logs)
    assert log.start(0, {}).name == "00000001.BIN"
    log.stop()
    assert (logs / "LASTLOG.TXT").read_bytes() == b"1\r\n", "ArduPilot's format: the number and CRLF"
    assert log.start(0, {}).name == "00000002.BIN"
    log.stop()
    assert read_lastlog(logs) == (2, False)
    (logs / "LASTLOG.TXT").write_bytes(b"41\r\n")
    (logs / "00000041.BIN").write_bytes(b"x")
    assert next_log_number(logs) == 42
    (logs / "00000042.BIN").write_bytes(b"")
    (logs / "LASTLOG.TXT").write_bytes(b"42\r\n")
    assert next_log_number(logs) == 42, "an empty log is reused, as ArduPilot does"
    (logs / "LASTLOG.TXT").write_bytes(b"7\r\n")
    assert next_log_number(logs) == 7, "so is a missing one (moved away), as ArduPilot does"
    (logs / "LASTLOG.TXT").write_bytes(b"500\r\n")
    (logs / "00000500.BIN").write_bytes(b"x")
    assert next_log_number(logs) == 1, "wraps after LOG_MAX_FILES"
    (logs / "LASTLOG.TXT").unlink()
    for n in (41, 42, 500):
        (logs / f"{n:08d}.BIN").unlink()
    assert next_log_number(logs) == 3, "without LASTLOG.TXT: after the highest log, never overwriting one"
    (logs / "LASTLOG.TXT").write_bytes(b"junk")
    assert read_lastlog(logs) is None


def test_log_disarmed_and_rotation(tmp_path):
    f = Flight(tmp_path / "a", LOG_DISARMED=1)
    assert f.log.log.path == tmp_path / "a" / "00000001.BIN", "LOG_DISARMED=1: a log from boot"
    f.hop()
    f.run(PERSIST_S + 5)
    f.hop()
    f.log.close()
    assert sorted(p.name for p in (tmp_path / "a").glob("*.BIN")) == ["00000001.BIN"], "one log per boot"
    msgs = read_all(tmp_path / "a" / "00000001.BIN")
    assert [(m.ArmState, m.Method) for m in msgs if m.get_type() == "ARM"] == [(1, 1), (0, 13)] * 2
    assert min(m.TimeUS for m in msgs if m.get_type() == "ATT") < 0.6e6
    assert [m.Id for m in msgs if m.get_type() == "EV"].count(10) == 2

    f = Flight(tmp_path / "b", LOG_FILE_DSRMROT=1)
    assert f.log.log.path is None, "LOG_DISARMED=0: no log before arming"
    f.hop()
    f.run(PERSIST_S - 1)
    assert f.log.log.active, "still logging 14 s after the disarm"
    f.run(2)
    assert not f.log.log.active, "closed when logging stops after a disarm"
    f.hop()
    f.log.close()
    assert sorted(p.name for p in (tmp_path / "b").glob("*.BIN")) == ["00000001.BIN", "00000002.BIN"]
    assert (tmp_path / "b" / "LASTLOG.TXT").read_bytes() == b"2\r\n"


def test_no_file_log_without_the_file_backend(tmp_path):
    f = Flight(tmp_path, LOG_BACKEND_TYPE=0, LOG_DISARMED=1)
    f.hop()
    f.log.close()
    assert not list(tmp_path.glob("*.BIN")) and not (tmp_path / "LASTLOG.TXT").exists()


def test_log_disarmed_discard(tmp_path):
    """LOG_DISARMED=3: a log from boot marked "ND" in LASTLOG.TXT, deleted at the next boot unless
    the vehicle armed; arming makes it a kept log."""
    f = Flight(tmp_path, LOG_DISARMED=3)
    f.run(3)
    f.log.close()
    assert (tmp_path / "LASTLOG.TXT").read_bytes() == b"1D\r\n"
    with open(tmp_path / "00000001.BIN", "ab") as old:
        old.write(b"old log")
    f = Flight(tmp_path, LOG_DISARMED=3)  # deleted at boot, and its number used again, as ArduPilot
    assert b"old log" not in (tmp_path / "00000001.BIN").read_bytes()
    assert sorted(p.name for p in tmp_path.glob("*.BIN")) == ["00000001.BIN"]
    f.hop()
    f.log.close()
    assert (tmp_path / "LASTLOG.TXT").read_bytes() == b"1\r\n", "armed: a log to keep"
    Flight(tmp_path, LOG_DISARMED=3).log.close()
    assert sorted(p.name for p in tmp_path.glob("*.BIN")) == ["00000001.BIN", "00000002.BIN"]
    assert (tmp_path / "LASTLOG.TXT").read_bytes() == b"2D\r\n"


def test_a_live_log_is_readable(tmp_path):
    f = Flight(tmp_path)
    f.run(1)
    f.arm()
    f.run(3, climb=1.0)
    live = read_all(tmp_path / "00000001.BIN")  # the log is still open
    att = [m for m in live if m.get_type() == "ATT"]
    assert len(att) == pytest.approx(30, abs=2) and att[-1].TimeUS / 1e6 == pytest.approx(f.t, abs=0.1)
    assert [m.Message for m in live if m.get_type() == "MSG"][-1] == "Arming motors"
    f.run(1, climb=1.0)
    assert len([m for m in read_all(tmp_path / "00000001.BIN") if m.get_type() == "ATT"]) > len(att)
    f.log.close()


def test_a_truncated_log_reads_up_to_the_damage(hop_log, tmp_path):
    whole = read_all(hop_log)
    data = hop_log.read_bytes()
    cut = tmp_path / "cut.BIN"
    cut.write_bytes(data[: len(data) - 20])  # mid-message: the last one is lost, the rest reads
    got = read_all(cut)
    assert len(got) >= len(whole) - 2 and [m.get_type() for m in got] == [m.get_type() for m in whole[: len(got)]]
    assert got[-1].TimeUS == whole[len(got) - 1].TimeUS
    r = subprocess.run([sys.executable, str(MAVLOGDUMP), str(cut)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Traceback" not in r.stderr
    half = tmp_path / "half.BIN"
    half.write_bytes(data[: len(data) // 2 + 7])
    got = read_all(half)
    assert 0 < len(got) < len(whole) and got[-1].TimeUS == whole[len(got) - 1].TimeUS


def test_a_full_disk_stops_logging_without_stopping_the_vehicle(tmp_path, capfd):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "00000001.BIN").symlink_to("/dev/full")  # empty: ArduPilot's numbering reuses it
    f = Flight(logs)
    f.run(1)
    f.arm()  # the header cannot be written: no exception reaches the vehicle
    f.run(2, climb=1.0)
    assert not f.log.log.active
    assert "No space left on device" in capfd.readouterr().err
    (logs / "00000001.BIN").unlink()
    f.run(4, climb=1.0)  # tried again 5 s later: a new log (number 1 again, as the file is gone)
    assert f.log.log.active
    f.log.close()
    assert any(m.get_type() == "ATT" for m in read_all(logs / "00000001.BIN"))
