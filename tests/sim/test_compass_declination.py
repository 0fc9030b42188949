"""COMPASS_DEC from the position (COMPASS_AUTODEC), as real ArduCopter 4.7 sets it, on the
built-in vehicle and on the real binary (skipped without one).

Measured on the real binary: at its first GPS fix (sim ~9.8 s, just after "GPS 1: detected
u-blox", before the EKF origin) it sets COMPASS_DEC to the declination of where it is
(0.223357 rad at CMAC, 0.010468 at 51.5,-0.12), in RAM only: no PARAM_VALUE is sent, a
restart without wipe reads the saved value again until the next fix. A value the user saved
is overwritten in RAM at the fix; with COMPASS_AUTODEC=0 it is left alone."""

import math
import os
import signal
import subprocess
import sys
import time

from conftest import Gcs, start_sim
from sitlpool.instances import ports

LONDON = (51.5, -0.12)
LONDON_DEC = 0.010468  # rad, as real ArduCopter reports it there
GPS_TEXT = "GPS 1: detected u-blox"
ORIGIN_TEXT = "EKF3 IMU0 origin set"
EKF_GPS_TEXT = "EKF3 IMU0 is using GPS"


def boot(procs, cwd, n, binary, wipe):
    """The vehicle at London (speedup 5: its GPS fix ~2 s after our first message), and a GCS."""
    args = ["-I", n, "--model", "+", "--speedup", 5, "--home", f"{LONDON[0]},{LONDON[1]},10,0"]
    if wipe:
        args.append("-w")
    if binary is None:
        p = start_sim(procs, cwd, n, *args[2:])
    else:
        parm = binary.parents[3] / "Tools/autotest/default_params/copter.parm"
        cwd.mkdir(parents=True, exist_ok=True)
        p = procs.popen(
            [str(binary), *map(str, args), "--defaults", str(parm)],
            cwd=cwd,
            stdout=open(cwd / "stdout", "ab"),
            stderr=open(cwd / "stderr", "ab"),
        )
    g = Gcs(ports(n).serial0)
    g.heartbeat()
    g.m.mav.heartbeat_send(6, 8, 0, 0, 0)  # a GCS that has spoken hears STATUSTEXTs
    return p, g


class Watch:
    """Every message of one connection in order: texts, and COMPASS_DEC values asked or not."""

    def __init__(self, g):
        self.g = g
        self.texts: list[str] = []
        self.unasked: list[float] = []

    def until(self, pred, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self.g.m.recv_match(blocking=True, timeout=0.2)
            if m is None:
                continue
            if m.get_type() == "STATUSTEXT":
                self.texts.append(m.text)
            r = pred(m)
            if r is not None:
                return r
            if m.get_type() == "PARAM_VALUE" and m.param_id == "COMPASS_DEC":
                self.unasked.append(m.param_value)
        raise AssertionError(f"timed out; texts so far {self.texts}")

    def read(self, name="COMPASS_DEC"):
        self.g.m.mav.param_request_read_send(1, 1, name.encode(), -1)
        return self.until(
            lambda m: m.param_value if m.get_type() == "PARAM_VALUE" and m.param_id == name else None, timeout=5
        )

    def set(self, name, value):
        self.g.m.mav.param_set_send(1, 1, name.encode(), value, 9)
        got = self.until(
            lambda m: m.param_value if m.get_type() == "PARAM_VALUE" and m.param_id == name else None, timeout=5
        )
        assert math.isclose(got, value, abs_tol=1e-6)

    def text(self, text):
        if text not in self.texts:
            self.until(lambda m: True if m.get_type() == "STATUSTEXT" and m.text == text else None)


def stop(p):
    """Kill the vehicle (its group) as a crash would: what it saved is in eeprom.bin."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def test_declination_set_at_gps_fix_in_ram_only(vehicle_binary, procs, tmp_path, instances):
    n, cwd = instances[0], tmp_path / "vehicle"
    # boot 1, wiped: 0 until the GPS fix, then London's declination, no PARAM_VALUE sent for it
    p, g = boot(procs, cwd, n, vehicle_binary, wipe=True)
    w = Watch(g)
    assert w.read() == 0.0
    assert GPS_TEXT not in w.texts, "asked before the GPS fix"
    w.text(ORIGIN_TEXT)
    assert w.unasked == [], "COMPASS_DEC changes without a PARAM_VALUE"
    assert math.isclose(w.read(), LONDON_DEC, abs_tol=2e-6)
    g.m.close()
    stop(p)
    # boot 2, not wiped: not saved; a value the user saves is overwritten (in RAM) at the fix
    p, g = boot(procs, cwd, n, vehicle_binary, wipe=False)
    w = Watch(g)
    assert w.read() == 0.0, "the declination was saved"
    w.set("COMPASS_DEC", 0.5)
    assert GPS_TEXT not in w.texts, "asked before the GPS fix"
    w.text(ORIGIN_TEXT)
    assert math.isclose(w.read(), LONDON_DEC, abs_tol=2e-6)
    w.set("COMPASS_AUTODEC", 0)
    w.text(EKF_GPS_TEXT)  # real SITL writes eeprom.bin a little after a PARAM_SET: a kill at once loses it
    g.m.close()
    stop(p)
    # boot 3: the user's saved value; COMPASS_AUTODEC=0 leaves it after the fix
    p, g = boot(procs, cwd, n, vehicle_binary, wipe=False)
    w = Watch(g)
    assert w.read("COMPASS_AUTODEC") == 0
    assert math.isclose(w.read(), 0.5, abs_tol=1e-6)
    w.text(ORIGIN_TEXT)
    assert math.isclose(w.read(), 0.5, abs_tol=1e-6)
    assert w.unasked == []


def test_declination_table():
    """The built-in vehicle's table gives what real ArduCopter said (CMAC, London)."""
    from sitlpool.sim.copter import declination

    assert math.isclose(declination(-35.363261, 149.165230), 0.223357, abs_tol=1e-6)
    assert math.isclose(declination(*LONDON), LONDON_DEC, abs_tol=1e-6)


def test_sim_stays_light():
    """The vehicle never loads numpy (pymavlink.mavextra would: +12 MB per vehicle), not at
    import and not when it computes the declination at the fix."""
    code = (
        "import sys, sitlpool.sim.server; from sitlpool.sim.copter import declination; declination(51.5, -0.12); "
        "print('numpy' in sys.modules, 'pymavlink.mavextra' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
