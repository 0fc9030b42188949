"""Ground-station scenarios flown on the built-in vehicle and on real ArduCopter, side by side.

A scenario drives a vehicle the way one ground station does (MAVSDK, MAVProxy, pymavlink as
ArduPilot's autotest uses it) and returns a *record*: a flat dict of what that ground station
saw (armable reached?, versions, positions reached, mission items downloaded, ...). The test
modules assert expectations on each record, and compare the built-in vehicle's record with
real ArduCopter's field by field, so that a new difference shows up as a failing test.

Vehicles are module-scoped (one per kind and test module): every scenario starts by bringing
the vehicle back to a known state (landed, disarmed, no mission), so scenarios do not depend
on each other's order.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import Gcs, _real_binary, listening, release_blocks, reserve_blocks, wait_for

HOME = (-35.363261, 149.165230, 584.0, 353.0)  # autotest's default home (CMAC)
KINDS = ("builtin", "arducopter")
# sim seconds per wall second: real SITL as CI runs it; the built-in vehicle faster. Timeouts
# are written in sim seconds and scaled per vehicle (Vehicle.wall).
SPEEDUP = {"builtin": 20, "arducopter": 10}

# Both vehicles load these on top of their defaults. ArduCopter disarms itself 10 sim seconds
# after arming on the ground: half a wall second at speedup 20, less than a loaded CI machine may
# take between a GCS's arm and its takeoff; 127 s (the maximum) keeps the rule without the race.
EXTRA_PARAMS = {"DISARM_DELAY": 127}

MODES = {"STABILIZE": 0, "ALT_HOLD": 2, "AUTO": 3, "GUIDED": 4, "LOITER": 5, "RTL": 6, "LAND": 9, "BRAKE": 17}
ACCEPTED, FAILED, UNSUPPORTED = 0, 4, 3
PREARM_BIT = 1 << 28  # MAV_SYS_STATUS_PREARM_CHECK
M_PER_DEG = 111319.5


def wall(sim_seconds: float, speedup: float) -> float:
    """A wall-clock timeout for something that takes ``sim_seconds`` on the vehicle (plus slack
    for a loaded machine)."""
    return sim_seconds / speedup + 10


def offset(lat: float, lon: float, north: float, east: float) -> tuple[float, float]:
    return lat + north / M_PER_DEG, lon + east / (M_PER_DEG * math.cos(math.radians(lat)))


def distance(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    return math.hypot((lat2 - lat1) * M_PER_DEG, (lon2 - lon1) * M_PER_DEG * math.cos(math.radians(lat1)))


# ---- vehicles --------------------------------------------------------------------------------


@dataclass
class Vehicle:
    kind: str  # "builtin" or "arducopter"
    instance: int
    proc: subprocess.Popen
    cwd: Path
    serial0: int = 0
    serial1: int = 0
    serial2: int = 0
    binary: Path | None = None
    speedup: float = 10

    def wall(self, sim_seconds: float) -> float:
        return wall(sim_seconds, self.speedup)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass


def launch(
    kind: str,
    binary: Path | None,
    instance: int,
    cwd: Path,
    home_as_two_args: bool = False,
    speedup: float | None = None,
) -> Vehicle:
    """Start one vehicle in ``cwd`` (its eeprom and logs go there), in its own process group.
    ``home_as_two_args``: ``--home -35.36,...`` as ArduPilot's own tools pass it."""
    cwd.mkdir(parents=True, exist_ok=True)
    speedup = speedup or SPEEDUP[kind]
    n = instance
    home_value = ",".join(repr(x) for x in HOME)
    home = ["--home", home_value] if home_as_two_args else ["--home=" + home_value]
    extra = cwd / "gcs-tests.parm"
    extra.write_text("".join(f"{k} {v}\n" for k, v in EXTRA_PARAMS.items()))
    if kind == "builtin":
        cmd = [
            sys.executable,
            "-m",
            "sitlpool.sim",
            "-I",
            str(n),
            "--model",
            "quad",
            "--speedup",
            f"{speedup:g}",
            "-w",
            *home,
            "--defaults",
            str(extra),
        ]
    else:
        # the autotest defaults from the binary's ArduPilot tree (build/sitl/bin/arducopter); a
        # missing --defaults file would make SITL spin at 100% CPU after its first client
        parm = binary.parents[3] / "Tools/autotest/default_params/copter.parm"
        if not parm.is_file():
            pytest.skip(f"{parm} not found: the differential tests need {binary.name} inside an ArduPilot tree")
        # real SITL keeps -I in 8 bits (1000 -> 232): the test instances' ports are given explicitly
        cmd = [
            str(binary),
            "--model",
            "+",
            "--speedup",
            f"{speedup:g}",
            "-w",
            *home,
            "--defaults",
            f"{parm},{extra}",
            "--base-port",
            str(5760 + 10 * n),
            "--rc-in-port",
            str(5501 + 10 * n),
            "--sim-port-in",
            str(9003 + 10 * n),
            "--sim-port-out",
            str(9002 + 10 * n),
            "--irlock-port",
            str(9005 + 10 * n),
            "-I",
            "0",
        ]
    with open(cwd / "stdout", "ab") as out:
        proc = subprocess.Popen(
            cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    v = Vehicle(kind, n, proc, cwd, 5760 + 10 * n, 5762 + 10 * n, 5763 + 10 * n, binary, speedup)
    try:
        wait_for(lambda: listening(v.serial0) or proc.poll() is not None, 20, what=f"{kind} SERIAL0")
    except AssertionError:
        v.stop()
        raise
    if proc.poll() is not None:
        raise AssertionError(f"{kind} exited {proc.returncode}: {(cwd / 'stdout').read_text()[-2000:]}")
    return v


def vehicle_fixture(request, tmp_path_factory, kind: str):
    """A module's vehicle of ``kind`` (skipped without a real binary): a generator for fixtures."""
    binary = None
    if kind == "arducopter":
        binary = _real_binary(request.config, "arducopter")
        if binary is None:
            pytest.skip("real ArduCopter not given (--sitl-binary PATH or SITLPOOL_TEST_SITL_BINARY)")
    blocks = reserve_blocks(1)
    # a module may slow a kind down (SPEEDUP_OVERRIDE = {kind: speedup}) for a GCS that reads slowly
    speedup = getattr(request.module, "SPEEDUP_OVERRIDE", {}).get(kind)
    v = launch(kind, binary, blocks[0], tmp_path_factory.mktemp(f"{kind}-"), speedup=speedup)
    try:
        yield v
    finally:
        v.stop()
        release_blocks(blocks)


@pytest.fixture(scope="module")
def builtin_vehicle(request, tmp_path_factory):
    """The test module's built-in vehicle (import this fixture into the module)."""
    yield from vehicle_fixture(request, tmp_path_factory, "builtin")


@pytest.fixture(scope="module")
def arducopter_vehicle(request, tmp_path_factory):
    """The test module's real ArduCopter (skipped without a binary)."""
    yield from vehicle_fixture(request, tmp_path_factory, "arducopter")


@pytest.fixture(scope="module")
def records(request):
    """Records of the test module's SCENARIOS, per vehicle kind."""
    return Records(request, request.module.SCENARIOS)


def known_difference(reason: str):
    """A built-in difference not fixed yet: strict, so the test fails as soon as it is fixed."""
    return pytest.mark.xfail(strict=True, reason=f"built-in vehicle differs from ArduCopter: {reason}")


def cases(groups, xfail: dict[str, str], kinds=KINDS) -> list:
    """pytest params (group, kind) for every expectation group on every vehicle kind (or, with
    ``kinds=("diff",)``, for the differential test of each group); a group in ``xfail`` is a known
    built-in difference, marked on every kind but "arducopter"."""
    out = []
    for group in groups:
        for kind in kinds:
            marks = [known_difference(xfail[group])] if kind != "arducopter" and group in xfail else []
            out.append(pytest.param(group, kind, marks=marks, id=f"{group}-{kind}"))
    return out


def assert_same(gcs: str, name: str, records: Records, tolerances: dict) -> None:
    """The differential test: scenario ``name``'s records on both vehicles are equal."""
    real = records.get(name, "arducopter")
    ours = records.get(name, "builtin")
    print(
        f"{gcs} {name}: built-in {ours['_seconds']}s, ArduCopter {real['_seconds']}s",
        {k: (ours.get(k), real.get(k)) for k in ours if k.startswith("_") and k != "_seconds"} or "",
    )
    diff = differences(ours, real, tolerances)
    brief = lambda rec: {k: v for k, v in rec.items() if not isinstance(v, dict)}  # noqa: E731 (dicts: diffed above)
    assert not diff, (
        f"{gcs} {name}: the built-in vehicle differs from ArduCopter:\n"
        + "\n".join(diff)
        + f"\nbuilt-in: {brief(ours)}\nArduCopter: {brief(real)}"
    )


class Records:
    """Each scenario's record per vehicle kind, computed once per module (and test process).

    A scenario runs on both vehicles (on the real one when given), one after the other, when
    either is asked for, so that both have flown the same scenarios before it, whichever test
    asked first and however pytest-xdist split the module: a vehicle's state (home, stored
    parameters) follows its history. Not both at once: the ground stations' threads then share
    one interpreter, and under a loaded suite their replies come late in sim time (a second
    PARAM_SET seconds of sim time after the first), which moved the calibrated timings."""

    def __init__(self, request, scenarios: dict):
        self.request = request
        self.scenarios = scenarios
        self.cache: dict[tuple[str, str], dict] = {}
        self.skipped: dict[str, BaseException] = {}  # kind -> why its vehicle is not here

    def get(self, name: str, kind: str) -> dict:
        if kind in self.skipped:  # asked again for a vehicle that is not here: no scenario runs again
            raise self.skipped[kind]
        if (name, kind) not in self.cache:
            for k in KINDS:
                if (name, k) in self.cache or k in self.skipped:
                    continue
                try:
                    v = self.request.getfixturevalue(f"{k}_vehicle")
                except pytest.skip.Exception as e:
                    self.skipped[k] = e
                    continue
                self.cache[(name, k)] = self._run(name, v)
            if kind in self.skipped:
                raise self.skipped[kind]
        return self.cache[(name, kind)]

    def _run(self, name: str, v: Vehicle) -> dict:
        t0 = time.monotonic()
        try:
            rec = self.scenarios[name](v)
        except Exception as e:  # a scenario that crashed still yields a record saying so
            rec = {"crashed": f"{type(e).__name__}: {e}"}
        rec["_seconds"] = round(time.monotonic() - t0, 1)  # reported, never compared
        return rec


# ---- expectations and the differential comparison -------------------------------------------


def check(record: dict, expect: dict) -> list[str]:
    """``expect``: field -> value, or a callable taking the value and returning truth. Returns the
    mismatches as readable lines (empty when all hold)."""
    bad = []
    if "crashed" in record:
        bad.append(f"scenario crashed: {record['crashed']}")
    for k, want in expect.items():
        got = record.get(k, "<missing>")
        ok = want(got) if callable(want) else got == want
        if not ok:
            bad.append(f"{k}: got {got!r}, want {(want.__doc__ or 'a condition') if callable(want) else repr(want)}")
    return bad


def near(target: float, tol: float):
    def f(x):
        return isinstance(x, (int, float)) and abs(x - target) <= tol

    f.__doc__ = f"{target} ± {tol}"
    return f


def differences(ours: dict, real: dict, tolerances: dict | None = None, ignore: tuple = ()) -> list[str]:
    """Fields where the built-in vehicle's record differs from real ArduCopter's: numbers within
    ``tolerances[field]`` (absolute) count as equal; fields in ``ignore`` (timings) are skipped."""
    tolerances = tolerances or {}
    out = []
    for k in sorted(set(ours) | set(real)):
        if k in ignore or k.startswith("_"):
            continue
        a, b = ours.get(k, "<missing>"), real.get(k, "<missing>")
        if isinstance(a, dict) and isinstance(b, dict):  # e.g. parameters: only the entries that differ
            keys = sorted(x for x in set(a) | set(b) if not _same_number(a.get(x), b.get(x)))
            if keys:
                shown = ", ".join(f"{x}: {a.get(x, '<missing>')!r} vs {b.get(x, '<missing>')!r}" for x in keys[:30])
                out.append(
                    f"{k} ({len(keys)} entries differ, built-in vs ArduCopter): {shown}"
                    + (" ..." if len(keys) > 30 else "")
                )
            continue
        if (
            k in tolerances
            and isinstance(a, (int, float))
            and isinstance(b, (int, float))
            and not isinstance(a, bool)
            and not isinstance(b, bool)
        ):
            if abs(a - b) <= tolerances[k]:
                continue
        elif a == b:
            continue
        out.append(f"{k}: built-in {a!r}, ArduCopter {b!r}")
    return out


def _same_number(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= 1e-3 * max(1.0, abs(b))
    return a == b


# ---- pymavlink, the way ArduPilot's autotest uses it -----------------------------------------


class Autotest(Gcs):
    """A pymavlink GCS with the autotest helpers the scenarios need (vehicle_test_suite.py's
    wait_ready_to_arm, change_mode, arm_vehicle, wait_altitude, mission upload/download)."""

    def __init__(self, port: int, speedup: float, timeout: float = 20):
        super().__init__(port, timeout)
        self.speedup = speedup
        self.heartbeat(timeout)
        self.m.mav.heartbeat_send(6, 8, 0, 0, 0)  # GCS, INVALID: makes this link active on ArduPilot

    def streams(self, rate: int = 2) -> None:
        """MAV_DATA_STREAM_ALL, as autotest does; at ``rate`` Hz of sim time, so the speedup
        multiplies it: kept low enough for this process to read every message as it comes."""
        self.m.mav.request_data_stream_send(1, 1, 0, rate, 1)

    def wall(self, sim_seconds: float) -> float:
        return wall(sim_seconds, self.speedup)

    def wait_ready_to_arm(self, timeout: float | None = None) -> bool:
        """autotest: SYS_STATUS's pre-arm-check health bit set, and the EKF reports a position."""

        def ready():
            s = self.recv("SYS_STATUS", 2)
            e = self.recv("EKF_STATUS_REPORT", 2)
            return (
                s is not None and s.onboard_control_sensors_health & PREARM_BIT and e is not None and e.flags & 0x10
            )  # EKF_POS_HORIZ_ABS

        try:
            wait_for(ready, timeout or self.wall(120), interval=0, what="ready to arm")
            return True
        except AssertionError:
            return False

    def mode(self, name: str) -> int | None:
        return self.mode_number(MODES[name])

    def mode_number(self, number: int) -> int | None:
        self.m.mav.command_long_send(1, 1, 176, 0, 1, number, 0, 0, 0, 0, 0)  # DO_SET_MODE
        ack = self.recv("COMMAND_ACK", 5, lambda a: a.command == 176)
        return None if ack is None else ack.result

    def param_get(self, name: str) -> float | None:
        self.m.mav.param_request_read_send(1, 1, name.encode(), -1)
        m = self.recv("PARAM_VALUE", 5, lambda m: m.param_id == name)
        return None if m is None else m.param_value

    def param_set(self, name: str, value: float) -> float | None:
        self.m.mav.param_set_send(1, 1, name.encode(), value, 9)  # MAV_PARAM_TYPE_REAL32
        m = self.recv("PARAM_VALUE", 5, lambda m: m.param_id == name)
        return None if m is None else m.param_value

    def cmd(self, cmd: int, *params, timeout: float = 5, frame: int | None = None, x=0, y=0, z=0.0) -> int | None:
        """COMMAND_LONG (or COMMAND_INT when ``frame`` is given); the ack's result, None without one."""
        p = list(params) + [0] * (4 - len(params)) if frame is not None else list(params) + [0] * (7 - len(params))
        if frame is None:
            self.m.mav.command_long_send(1, 1, cmd, 0, *p)
        else:
            self.m.mav.command_int_send(1, 1, frame, cmd, 0, 0, *p[:4], x, y, z)
        ack = self.recv("COMMAND_ACK", timeout, lambda a: a.command == cmd)
        return None if ack is None else ack.result

    def armed(self) -> bool:
        hb = self.recv("HEARTBEAT", 5, lambda h: h.type != 6)
        return bool(hb and hb.base_mode & 128)

    def arm(self, timeout: float | None = None) -> bool:
        deadline = time.monotonic() + (timeout or self.wall(30))
        while time.monotonic() < deadline:
            if self.cmd(400, 1) == ACCEPTED:
                return True
            time.sleep(0.2)
        return False

    sim_t = 0.0  # the vehicle's clock (time_boot_ms) in the last position read: sim seconds

    def pos(self):
        p = self.recv("GLOBAL_POSITION_INT", 5)
        if p is not None:
            self.sim_t = p.time_boot_ms / 1000
        return p

    def sim_now(self) -> float:
        self.pos()
        return self.sim_t

    def wait_altitude(self, low: float, high: float, timeout: float) -> float | None:
        """Relative altitude (m) once within [low, high]; None on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = self.pos()
            if p is not None and low <= p.relative_alt / 1000 <= high:
                return p.relative_alt / 1000
        return None

    def wait_position(
        self, lat: float, lon: float, within: float, timeout: float, rel_alt: float | None = None
    ) -> bool:
        """True once within ``within`` m of (lat, lon) (and 1 m of ``rel_alt`` when given)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = self.pos()
            if (
                p
                and distance(p.lat / 1e7, p.lon / 1e7, lat, lon) < within
                and (rel_alt is None or abs(p.relative_alt / 1000 - rel_alt) < 1)
            ):
                return True
        return False

    def wait_disarmed(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hb = self.recv("HEARTBEAT", 5, lambda h: h.type != 6)
            if hb is not None and not hb.base_mode & 128:
                return True
        return False

    def takeoff(self, alt: float = 10) -> bool:
        """GUIDED, arm, NAV_TAKEOFF, climb: True once at ``alt``."""
        if self.mode("GUIDED") != ACCEPTED or not self.arm():
            return False
        t0 = self.sim_now()
        if self.cmd(22, 0, 0, 0, 0, 0, 0, alt) != ACCEPTED:
            return False
        ok = self.wait_altitude(alt - 0.5, alt + 2, self.wall(40)) is not None
        self.takeoff_sim_s = round(self.sim_t - t0, 1)  # how long the climb took on the vehicle's clock
        return ok

    def land_and_disarm(self) -> bool:
        if not self.armed():
            return True
        self.mode("LAND")
        return self.wait_disarmed(self.wall(120))

    def home(self):
        """HOME_POSITION asked for with MAV_CMD_REQUEST_MESSAGE (ArduPilot 4.x's way)."""
        self.m.mav.command_long_send(1, 1, 512, 0, 242, 0, 0, 0, 0, 0, 0)
        return self.recv("HOME_POSITION", 5)

    # -- missions (the MISSION_ITEM_INT protocol unless said otherwise) --
    def upload(self, items: list[tuple], *, use_int: bool = True) -> dict:
        """items: (frame, command, current, params1-4, x(lat), y(lon), z); item 0 is home.
        Returns what the vehicle asked with and its MISSION_ACK type."""
        while self.m.recv_match(blocking=False) is not None:  # late answers to an earlier exchange
            pass
        self.m.mav.mission_count_send(1, 1, len(items), 0)
        asked = []
        ack = None
        for _ in items:
            req = self.recv(("MISSION_REQUEST_INT", "MISSION_REQUEST", "MISSION_ACK"), 5)
            if req is None:
                break
            if req.get_type() == "MISSION_ACK":  # an item refused: the upload ends there
                ack = req
                break
            asked.append(req.get_type())
            frame, command, current, p1, p2, p3, p4, lat, lon, z = items[req.seq]
            if use_int:
                self.m.mav.mission_item_int_send(
                    1,
                    1,
                    req.seq,
                    frame,
                    command,
                    current,
                    1,
                    p1,
                    p2,
                    p3,
                    p4,
                    int(round(lat * 1e7)),
                    int(round(lon * 1e7)),
                    z,
                    0,
                )
            else:
                self.m.mav.mission_item_send(1, 1, req.seq, frame, command, current, 1, p1, p2, p3, p4, lat, lon, z, 0)
        if ack is None:
            ack = self.recv("MISSION_ACK", 5)
        return {"asked_with": sorted(set(asked)), "asked": len(asked), "ack": None if ack is None else ack.type}

    def download(self, *, use_int: bool = True) -> list | None:
        """(seq, frame, command, current, lat, lon, z) of each item; None when the count never came."""
        self.m.mav.mission_request_list_send(1, 1, 0)
        cnt = self.recv("MISSION_COUNT", 5)
        if cnt is None:
            return None
        out = []
        for seq in range(cnt.count):
            if use_int:
                self.m.mav.mission_request_int_send(1, 1, seq, 0)
            else:
                self.m.mav.mission_request_send(1, 1, seq, 0)
            it = self.recv(("MISSION_ITEM_INT", "MISSION_ITEM"), 5, lambda m: m.seq == seq)
            if it is None:
                out.append(None)
                continue
            scale = 1e7 if it.get_type() == "MISSION_ITEM_INT" else 1
            out.append(
                (
                    it.get_type(),
                    seq,
                    it.frame,
                    it.command,
                    it.current,
                    round(it.x / scale, 6),
                    round(it.y / scale, 6),
                    round(it.z, 1),
                )
            )
        self.m.mav.mission_ack_send(1, 1, 0, 0)
        return out

    def mission_count(self) -> int | None:
        self.m.mav.mission_request_list_send(1, 1, 0)
        cnt = self.recv("MISSION_COUNT", 5)
        if cnt is not None and cnt.count:
            self.m.mav.mission_ack_send(1, 1, 0, 0)  # (not downloading: end the transfer)
        return None if cnt is None else cnt.count

    def clear_mission(self) -> int | None:
        self.m.mav.mission_clear_all_send(1, 1, 0)
        ack = self.recv("MISSION_ACK", 5)
        return None if ack is None else ack.type


def reset(v: Vehicle, port: int | None = None) -> Autotest:
    """A GCS on ``port`` (SERIAL0) of a vehicle brought back to a known state: streams asked
    for, ready to arm, landed, disarmed, no mission, in STABILIZE. The caller closes it."""
    g = Autotest(port or v.serial0, v.speedup)
    g.streams()
    g.land_and_disarm()
    g.wait_ready_to_arm()
    g.clear_mission()
    g.mode("STABILIZE")
    return g
