"""Small harness to run the real ArduCopter SITL and measure it (helper M, issue 22 prep).

Usage: from sitl import Sitl; s = Sitl(240, speedup=5); s.wait_ready(); s.takeoff(10); ...; s.close()
Every SITL is started with Popen and killed by its pid (process group) in close().
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("MAVLINK20", "1")
from pymavlink import mavutil  # noqa: E402

BIN = "/work/shared/ardupilot/build/sitl/bin/arducopter"
DEFAULTS = "/work/shared/ardupilot/Tools/autotest/default_params/copter.parm"
HOME = "-35.363261,149.165230,584,353"
HOME_LAT, HOME_LON = -35.363261, 149.165230

MODES = {
    "STABILIZE": 0, "ACRO": 1, "ALT_HOLD": 2, "AUTO": 3, "GUIDED": 4, "LOITER": 5,
    "RTL": 6, "CIRCLE": 7, "LAND": 9, "DRIFT": 11, "SPORT": 13, "POSHOLD": 16, "BRAKE": 17,
}
MODE_NAMES = {v: k for k, v in MODES.items()}


def ne_offset(lat1: float, lon1: float, lat2: float, lon2: float) -> tuple[float, float]:
    """metres north, east of point 2 relative to point 1 (flat earth)."""
    r = 6378137.0
    dn = math.radians(lat2 - lat1) * r
    de = math.radians(lon2 - lon1) * r * math.cos(math.radians(lat1))
    return dn, de


def offset_latlon(lat: float, lon: float, dn: float, de: float) -> tuple[float, float]:
    r = 6378137.0
    return (lat + math.degrees(dn / r), lon + math.degrees(de / (r * math.cos(math.radians(lat)))))


def lean(roll: float, pitch: float, yaw: float) -> tuple[float, float]:
    """(tilt angle deg, bearing deg of the horizontal thrust direction) from euler rad."""
    cr, sr, cp, sp, cy, sy = (math.cos(roll), math.sin(roll), math.cos(pitch), math.sin(pitch),
                              math.cos(yaw), math.sin(yaw))
    zn = cr * sp * cy + sr * sy
    ze = cr * sp * sy - sr * cy
    zd = cr * cp
    tn, te = -zn, -ze  # thrust (body -z) horizontal part
    tilt = math.degrees(math.acos(max(-1.0, min(1.0, zd))))
    return tilt, math.degrees(math.atan2(te, tn)) % 360


class Sitl:
    def __init__(self, inst: int, speedup: float = 5, model: str = "+", extra: list[str] | None = None,
                 verbose: bool = True) -> None:
        self.inst = inst
        self.verbose = verbose
        self.dir = tempfile.mkdtemp(prefix=f"m_sitl{inst}_")
        self.out = open(os.path.join(self.dir, "sitl.out"), "wb")
        cmd = [BIN, "-I", str(inst), "--model", model, "--speedup", str(speedup), "--defaults", DEFAULTS,
               "--home", HOME] + (extra or [])
        self.proc = subprocess.Popen(cmd, cwd=self.dir, stdout=self.out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.t0 = time.time()
        port = 5760 + 10 * (inst & 0xFF)  # real SITL keeps the low 8 bits of -I
        deadline = time.time() + 30
        while True:
            try:
                self.m = mavutil.mavlink_connection(f"tcp:127.0.0.1:{port}", source_system=255,
                                                    source_component=190, autoreconnect=False)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        self.m.WIRE_PROTOCOL_VERSION = "2.0"
        self.last = {}  # type -> msg
        self.texts: list[tuple[float, int, str]] = []  # (sim s, severity, text)
        self.modes: list[tuple[float, str]] = []
        self.armed_log: list[tuple[float, bool]] = []
        self.tb = 0.0  # sim seconds from time_boot_ms
        self.hooks = []  # callables(msg)
        self.last_hb_sent = 0.0
        self.rc_override: list[int] | None = None
        self.last_rc_sent = 0.0
        self.m.wait_heartbeat(timeout=30)
        self.request_streams()

    def log(self, *a):
        if self.verbose:
            print(f"[I{self.inst} sim {self.tb:8.2f} wall {time.time()-self.t0:6.1f}]", *a, flush=True)

    def request_streams(self, rate: int = 10) -> None:
        self.m.mav.request_data_stream_send(1, 1, mavutil.mavlink.MAV_DATA_STREAM_ALL, rate, 1)

    def set_interval(self, msgid: int, hz: float) -> None:
        self.m.mav.command_long_send(1, 1, mavutil.mavlink.MAV_CMD_SET_MESSAGE_INTERVAL, 0,
                                     msgid, 1e6 / hz, 0, 0, 0, 0, 0)

    # ---------------- pump
    def pump(self, wall: float | None = None, until=None, sim: float | None = None, timeout: float = 600):
        """Read messages for `wall` seconds, or `sim` sim seconds, or until until() is true."""
        start_w = time.time()
        start_s = self.tb
        while True:
            now = time.time()
            if now - self.last_hb_sent > 1.0:
                self.m.mav.heartbeat_send(mavutil.mavlink.MAV_TYPE_GCS, mavutil.mavlink.MAV_AUTOPILOT_INVALID,
                                          0, 0, 0)
                self.last_hb_sent = now
            if self.rc_override is not None and now - self.last_rc_sent > 0.1:
                self.m.mav.rc_channels_override_send(1, 1, *self.rc_override)
                self.last_rc_sent = now
            msg = self.m.recv_match(blocking=True, timeout=0.05)
            if msg is not None:
                self._handle(msg)
            if wall is not None and time.time() - start_w >= wall:
                return True
            if sim is not None and self.tb - start_s >= sim:
                return True
            if until is not None and until():
                return True
            if time.time() - start_w > timeout:
                return False
            if self.proc.poll() is not None:
                raise RuntimeError(f"SITL exited rc={self.proc.returncode}")

    def _handle(self, msg) -> None:
        t = msg.get_type()
        if t == "BAD_DATA":
            return
        tbm = getattr(msg, "time_boot_ms", None)
        if tbm is not None and t not in ("SYSTEM_TIME",):
            self.tb = max(self.tb, tbm / 1000.0)
        if t == "HEARTBEAT" and msg.get_srcComponent() == 1 and msg.type != mavutil.mavlink.MAV_TYPE_GCS:
            mode = MODE_NAMES.get(msg.custom_mode, str(msg.custom_mode))
            armed = bool(msg.base_mode & mavutil.mavlink.MAV_MODE_FLAG_SAFETY_ARMED)
            if not self.modes or self.modes[-1][1] != mode:
                self.modes.append((self.tb, mode))
                self.log("MODE", mode)
            if not self.armed_log or self.armed_log[-1][1] != armed:
                self.armed_log.append((self.tb, armed))
                self.log("ARMED" if armed else "DISARMED")
        if t == "STATUSTEXT":
            self.texts.append((self.tb, msg.severity, msg.text))
            self.log(f"TEXT sev{msg.severity}: {msg.text}")
        self.last[t] = msg
        for h in self.hooks:
            h(msg)

    # ---------------- helpers
    @property
    def mode(self) -> str:
        return self.modes[-1][1] if self.modes else "?"

    @property
    def armed(self) -> bool:
        return bool(self.armed_log and self.armed_log[-1][1])

    def rel_alt(self) -> float:
        g = self.last.get("GLOBAL_POSITION_INT")
        return g.relative_alt / 1000.0 if g else float("nan")

    def set_param(self, name: str, value: float, timeout: float = 10) -> float | None:
        self.m.mav.param_set_send(1, 1, name.encode(), float(value), mavutil.mavlink.MAV_PARAM_TYPE_REAL32)
        got = {}

        def done():
            p = self.last.get("PARAM_VALUE")
            if p is not None and p.param_id == name and abs(p.param_value - value) < 1e-3 * max(1, abs(value)):
                got["v"] = p.param_value
                return True
            return False
        self.last.pop("PARAM_VALUE", None)
        if not self.pump(until=done, timeout=timeout):
            self.log("param set not acked", name, value)
            return None
        return got["v"]

    def get_param(self, name: str, timeout: float = 5) -> float | None:
        self.last.pop("PARAM_VALUE", None)
        self.m.mav.param_request_read_send(1, 1, name.encode(), -1)
        ok = self.pump(until=lambda: self.last.get("PARAM_VALUE") is not None
                       and self.last["PARAM_VALUE"].param_id == name, timeout=timeout)
        return self.last["PARAM_VALUE"].param_value if ok else None

    def all_params(self, timeout: float = 60) -> dict[str, float]:
        params: dict[str, float] = {}
        total = {"n": None}

        def hook(msg):
            if msg.get_type() == "PARAM_VALUE":
                params[msg.param_id] = msg.param_value
                total["n"] = msg.param_count
        self.hooks.append(hook)
        self.m.mav.param_request_list_send(1, 1)
        self.pump(until=lambda: total["n"] is not None and len(params) >= total["n"], timeout=timeout)
        # retry missing? report count
        self.hooks.remove(hook)
        return params

    def set_mode(self, name: str, timeout: float = 10) -> bool:
        self.m.mav.set_mode_send(1, mavutil.mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED, MODES[name])
        return self.pump(until=lambda: self.mode == name, timeout=timeout)

    def command(self, cmd: int, *p: float) -> None:
        p = list(p) + [0] * (7 - len(p))
        self.m.mav.command_long_send(1, 1, cmd, 0, *p)

    def wait_ready(self, timeout: float = 240) -> float:
        """GUIDED, then try arming every 1 s wall until armed. Returns sim s when armed."""
        self.pump(until=lambda: (hb := self.last.get("HEARTBEAT")) is not None and hb.system_status != 0
                  and any("ArduPilot Ready" in x[2] for x in self.texts) or self.tb > 3, timeout=30)
        self.pump(wall=0.5)
        deadline = time.time() + timeout
        self.set_mode("GUIDED")
        # wait for EKF using GPS text
        self.pump(until=lambda: any("is using GPS" in x[2] for x in self.texts), timeout=timeout)
        while time.time() < deadline:
            if self.mode != "GUIDED":
                self.set_mode("GUIDED")
            self.command(mavutil.mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1)
            if self.pump(until=lambda: self.armed, timeout=1.0):
                return self.tb
        raise TimeoutError("never armed")

    def takeoff(self, alt: float = 10, timeout: float = 120) -> float:
        self.command(mavutil.mavlink.MAV_CMD_NAV_TAKEOFF, 0, 0, 0, 0, 0, 0, alt)
        ok = self.pump(until=lambda: self.rel_alt() >= alt - 0.3, timeout=timeout)
        if not ok:
            raise TimeoutError("takeoff")
        return self.tb

    def goto(self, lat: float, lon: float, alt: float) -> None:
        self.m.mav.set_position_target_global_int_send(
            0, 1, 1, mavutil.mavlink.MAV_FRAME_GLOBAL_RELATIVE_ALT_INT, 0b0000111111111000,
            int(lat * 1e7), int(lon * 1e7), alt, 0, 0, 0, 0, 0, 0, 0, 0)

    def true_ne(self) -> tuple[float, float] | None:
        s = self.last.get("SIMSTATE")
        if s is None:
            return None
        return ne_offset(HOME_LAT, HOME_LON, s.lat * 1e-7, s.lng * 1e-7)

    def est_ne(self) -> tuple[float, float] | None:
        g = self.last.get("GLOBAL_POSITION_INT")
        if g is None:
            return None
        return ne_offset(HOME_LAT, HOME_LON, g.lat * 1e-7, g.lon * 1e-7)

    def close(self) -> None:
        try:
            self.m.close()
        except Exception:
            pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.out.close()


def stats(xs):
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    if not xs:
        return float("nan"), float("nan")
    return sum(xs) / len(xs), max(xs)


if __name__ == "__main__":
    s = Sitl(int(sys.argv[1]) if len(sys.argv) > 1 else 240)
    try:
        print("armed at", s.wait_ready())
        print("takeoff done", s.takeoff(10))
        print("modes", s.modes)
    finally:
        s.close()
