"""The built-in vehicle's DataFlash ATT carries its lean (degrees, as ArduCopter's ATT.Roll/Pitch
and as its MAVLink ATTITUDE), so a batch's max_tilt_deg is not 0 on it."""

import math

import pytest
from pymavlink import DFReader

from sitlpool.sim.copter import Copter
from sitlpool.sim.dataflash_observer import DataFlashObserver
from sitlpool.sim.params import Params

HOME = (-35.363261, 149.165230, 584.0, 353.0)
DT = 0.04


def test_att_logs_the_lean_into_the_wind(tmp_path):
    """GUIDED at 10 m in a 10 m/s east wind: ATT Roll/Pitch are the vehicle's roll and pitch
    (~8.9 degrees of lean), not 0."""
    p = Params(tmp_path / "eeprom.bin", [], True, None, 1.0)
    c = Copter(p, HOME, 1.0, lambda *a, **k: None, lambda: None)
    c.observers.append(DataFlashObserver(tmp_path / "logs", utc_at_boot=1.7e9))
    c.ready()

    def run(seconds):
        for _ in range(round(seconds / DT)):
            c.step(DT)

    run(3)
    assert c.set_mode(4, None) == 0 and c.arm(False, None) == 0 and c.takeoff(10, None) == 0
    run(15)
    assert c.p.set("SIM_WIND_DIR", 90, save=False) and c.p.set("SIM_WIND_SPD", 10, save=False)
    run(20)
    lean = (c.roll, c.pitch)
    assert math.hypot(*lean) > 5, "the vehicle leans into the wind"
    run(0.2)  # one more ATT at 10 Hz
    r = DFReader.DFReader_binary(str(tmp_path / "logs" / "00000001.BIN"))
    att = []
    while (m := r.recv_match(type="ATT")) is not None:
        att.append(m)
    last = att[-1]
    assert (last.Roll, last.Pitch) == pytest.approx(lean, abs=0.2)
    tilts = [math.degrees(math.acos(math.cos(math.radians(m.Roll)) * math.cos(math.radians(m.Pitch)))) for m in att]
    assert max(tilts) == pytest.approx(math.hypot(*lean), abs=0.5)
