"""Logs for the tests of tests/logs (a helper module, not a conftest: tests/conftest.py
is imported as ``conftest`` by other folders' tests). Fixtures: ``hop_log``, ``gcs_log``,
``make_flight``, imported by the test modules that use them. Logs made here: a small DataFlash writer (FMT, FMTU, UNIT, MULT and messages
packed as ArduPilot packs them) and a synthetic flight of a plane or copter."""

from __future__ import annotations

import math
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from pymavlink.DFReader import FORMAT_TO_STRUCT

HOP = Path(__file__).resolve().parents[2].parent / "shared" / "logs" / "copter-hop.BIN"
GCS_XZ = HOP.parent / "copter-gcs-scenarios.BIN.xz"
HEAD = b"\xa3\x95"


class BinWriter:
    """Writes a DataFlash log: ``define`` a type (writes its FMT and FMTU), ``write`` messages."""

    def __init__(self, path: Path):
        self.f = open(path, "wb")
        self.types: dict[str, tuple[int, str]] = {}
        self.next_type = 1
        self.define("FMTU", "QBNN", "TimeUS,FmtType,UnitIds,MultIds")
        self.define("UNIT", "QbZ", "TimeUS,Id,Label")
        self.define("MULT", "Qbd", "TimeUS,Id,Mult")
        for uid, label in (("s", "s"), ("m", "m"), ("n", "m/s"), ("v", "V"), ("#", "instance"), ("-", "")):
            self.write("UNIT", 0, ord(uid), label.encode())
        for mid, mult in (("F", 1e-6), ("0", 1.0), ("-", 0.0)):
            self.write("MULT", 0, ord(mid), mult)

    def define(self, name: str, fmt: str, cols: str, units: str = "", mults: str = "") -> None:
        length = 3 + struct.calcsize("<" + "".join(FORMAT_TO_STRUCT[c][0] for c in fmt))
        ty = self.next_type
        self.next_type += 1
        self.types[name] = (ty, fmt)
        self.f.write(
            HEAD + bytes([128]) + struct.pack("<BB4s16s64s", ty, length, name.encode(), fmt.encode(), cols.encode())
        )
        if units:
            self.write("FMTU", 0, ty, units.encode(), mults.encode())

    def write(self, name: str, *values) -> None:
        ty, fmt = self.types[name]
        vals = []
        for c, v in zip(fmt, values):
            mul = FORMAT_TO_STRUCT[c][1]
            vals.append(int(round(v / mul)) if mul else v)
        self.f.write(HEAD + bytes([ty]) + struct.pack("<" + "".join(FORMAT_TO_STRUCT[c][0] for c in fmt), *vals))

    def close(self) -> None:
        self.f.close()


def synthetic_flight(path: Path, vehicle: str = "plane") -> Path:
    """62 s: boot on the ground (0-10 s), armed at 10, climb 15-25 s to 50 m, cruise 25-45 s
    at 15 m/s, descend 45-55 s, disarmed at 60. Modes MANUAL(0)/AUTO(10)/RTL(11) for a
    plane, STABILIZE(0)/AUTO(3)/RTL(6) for a copter; a radio failsafe at 40 s."""
    w = BinWriter(path)
    w.define("VER", "QBHBBBBIZHBBII", "TimeUS,BT,BST,Maj,Min,Pat,FWT,GH,FWS,APJ,BU,FV,IMI,ICI")
    w.define("MSG", "QZ", "TimeUS,Message")
    w.define("MODE", "QMBB", "TimeUS,Mode,ModeNum,Rsn")
    w.define("ARM", "QBIBB", "TimeUS,ArmState,ArmChecks,Forced,Method")
    w.define("EV", "QB", "TimeUS,Id")
    w.define("ERR", "QBB", "TimeUS,Subsys,ECode")
    w.define("POS", "QLLfff", "TimeUS,Lat,Lng,Alt,RelHomeAlt,RelOriginAlt", "sDUmmm", "FGG000")
    w.define(
        "GPS",
        "QBBIHBcLLeffffB",
        "TimeUS,I,Status,GMS,GWk,NSats,HDop,Lat,Lng,Alt,Spd,GCrs,VZ,Yaw,U",
        "s#-----DUmnhnh-",
        "F------GG0000--",
    )
    w.define(
        "BAT",
        "QBfffffcfBBB",
        "TimeUS,Inst,Volt,VoltR,Curr,CurrTot,EnrgTot,Temp,Res,RemPct,H,SH",
        "s#vv----------",
        "F000----------",
    )
    w.define("CTUN", "Qff", "TimeUS,Alt,Spd", "smn", "F00")
    plane = vehicle == "plane"
    name = "ArduPlane V4.7.0-dev (12345678)" if plane else "ArduCopter V4.7.0-dev (12345678)"
    w.write("VER", 100_000, 3, 0, 4, 7, 0, 0, 0x12345678, name.encode(), 0, 3 if plane else 2, 0, 0, 0)
    w.write("MSG", 100_000, name.encode())
    auto, rtl = (10, 11) if plane else (3, 6)
    w.write("MODE", 200_000, 0, 0, 1)
    lat0, lon0 = -35.363261, 149.165230
    north = 0.0
    alt = 0.0
    t = 0.0
    while t <= 62.0 + 1e-9:
        us = int(t * 1e6) + 300_000
        if 15 <= t < 25:
            vz = 5.0
        elif 45 <= t < 55:
            vz = -5.0
        else:
            vz = 0.0
        spd = 15.0 if 25 <= t < 45 else (5.0 if 15 <= t < 25 or 45 <= t < 55 else 0.0)
        alt = max(0.0, alt + vz * 0.1)
        north += spd * 0.1
        lat = lat0 + math.degrees(north / 6378137.0)
        w.write("POS", us, lat, lon0, 584 + alt, alt, alt)
        w.write("CTUN", us, alt, spd)
        if round(t * 10) % 2 == 0:
            w.write("GPS", us, 0, 3, 0, 0, 10, 0.8, lat, lon0, 584 + alt, spd, 0.0, -vz, 0.0, 0)
            w.write("BAT", us, 0, 12.6 - t * 0.01, 12.6, 10.0, t * 3.0, t * 0.03, 25, 0.01, 90, 0, 0)
        if abs(t - 10) < 1e-6:
            w.write("ARM", us, 1, 0, 0, 1)
            w.write("EV", us, 10)
            w.write("MSG", us, b"Arming motors")
        if abs(t - 14) < 1e-6:
            w.write("MODE", us, auto, auto, 2)
        if abs(t - 40) < 1e-6:
            w.write("ERR", us, 5, 1)
            w.write("MSG", us, b"Radio Failsafe")
        if abs(t - 44) < 1e-6:
            w.write("MODE", us, rtl, rtl, 3)
        if abs(t - 60) < 1e-6:
            w.write("ARM", us, 0, 0, 0, 13)
            w.write("EV", us, 11)
            w.write("MSG", us, b"Disarming motors")
        t = round(t + 0.1, 1)
    w.close()
    return path


@pytest.fixture
def make_flight(tmp_path):
    def make(vehicle: str = "plane", name: str = "flight.BIN") -> Path:
        return synthetic_flight(tmp_path / name, vehicle)

    return make


@pytest.fixture(scope="session")
def gcs_log(tmp_path_factory) -> Path:
    """The 22.7 MB real ArduCopter log, unpacked once per test session."""
    if not GCS_XZ.is_file() or shutil.which("xz") is None:
        pytest.skip("the real log copter-gcs-scenarios.BIN.xz (or xz) is not here")
    out = tmp_path_factory.mktemp("gcs") / "copter-gcs-scenarios.BIN"
    with open(out, "wb") as f:
        subprocess.run(["xz", "-dc", str(GCS_XZ)], stdout=f, check=True)
    return out


@pytest.fixture
def hop_log() -> Path:
    if not HOP.is_file():
        pytest.skip("the real log copter-hop.BIN is not here")
    return HOP
