"""The built-in vehicle writes its DataFlash log: through its observer hooks (its own classes) and
as a running simulator driven by a GCS, the log readable while it flies."""

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from pymavlink import DFReader

from conftest import Gcs, wait_for
from sitlpool.instances import ports
from sitlpool.sim.copter import Copter
from sitlpool.sim.dataflash_logger import PERSIST_S
from sitlpool.sim.dataflash_observer import DataFlashObserver
from sitlpool.sim.params import Params

MAVLOGDUMP = Path(sys.executable).with_name("mavlogdump.py")


def read_all(path: Path) -> list:
    r = DFReader.DFReader_binary(str(path))
    out = []
    while (m := r.recv_msg()) is not None:
        out.append(m)
    return out


def test_the_builtin_vehicle_logs_a_hop_through_its_observer(tmp_path):
    """The vehicle's own classes (no server): boot, GUIDED, arm, take off to 10 m, a refused mode,
    LAND, auto-disarm; the log as ArduCopter's would have it."""
    params = Params(tmp_path / "eeprom.bin", [], True, None, 1.0)
    v = Copter(params, (-35.363261, 149.165230, 584.0, 353.0), 5.0, lambda *a, **k: None, lambda: None)
    v.observers.append(DataFlashObserver(tmp_path / "logs", utc_at_boot=1.7e9))
    v.ready()

    def run(seconds, until=None):
        for _ in range(round(seconds / 0.04)):
            v.step(0.04)
            if until and until():
                return

    run(10)
    assert not (tmp_path / "logs").exists() or not list((tmp_path / "logs").glob("*.BIN")), "no log before arming"
    assert v.set_mode(4, None) == 0 and v.arm(False, None) == 0
    armed_at = v.t
    assert v.takeoff(10, None) == 0
    run(15)
    assert v.set_mode(14, None) != 0  # FLIP: refused, ERR FLIGHT_MODE 14
    assert v.set_mode(9, None) == 0
    run(30, until=lambda: not v.armed)
    disarmed_at = v.t
    assert not v.armed
    run(20)
    msgs = read_all(tmp_path / "logs" / "00000001.BIN")
    assert (tmp_path / "logs" / "LASTLOG.TXT").read_bytes() == b"1\r\n"
    kinds = Counter(m.get_type() for m in msgs)
    att = [m.TimeUS / 1e6 for m in msgs if m.get_type() == "ATT"]
    assert att[0] == pytest.approx(armed_at, abs=0.15) and att[-1] == pytest.approx(disarmed_at + PERSIST_S, abs=0.15)
    assert kinds["ATT"] / (att[-1] - att[0]) == pytest.approx(10, rel=0.05)
    texts = [m.Message for m in msgs if m.get_type() == "MSG"]
    assert texts[texts.index("Frame: QUAD/PLUS") + 1] == "Arming motors", "its first MSG after the header"
    assert "Disarming motors" in texts and "Mode change to FLIP failed: init failed" in texts
    assert [(m.Subsys, m.ECode) for m in msgs if m.get_type() == "ERR"] == [(10, 14)]
    assert [m.Mode for m in msgs if m.get_type() == "MODE"] == [4, 9]
    assert [m.Id for m in msgs if m.get_type() == "EV"] == [15, 57, 28, 17, 18, 11, 56]
    assert [(m.ArmState, m.Method) for m in msgs if m.get_type() == "ARM"] == [(0, 13)]
    top = max(m.Alt for m in msgs if m.get_type() == "CTUN")
    assert top == pytest.approx(10.0, abs=0.3)
    pos = [m for m in msgs if m.get_type() == "POS"]
    assert max(m.RelHomeAlt for m in pos) == pytest.approx(10.0, abs=0.3) and pos[-1].RelHomeAlt == pytest.approx(0)
    orgn = [m for m in msgs if m.get_type() == "ORGN"]
    assert [m.Type for m in orgn] == [0, 1] and orgn[1].Lat == pytest.approx(-35.363261, abs=1e-6)
    cmd = [m for m in msgs if m.get_type() == "CMD"]
    assert [(m.CNum, m.CId) for m in cmd] == [(0, 16)], "the mission: home as item 0"
    gps = [m for m in msgs if m.get_type() == "GPS"]
    assert {m.Status for m in gps} == {6} and kinds["GPS"] == pytest.approx(kinds["ATT"] / 2, abs=2)
    bat = [m for m in msgs if m.get_type() == "BAT"]
    assert bat[-1].CurrTot > bat[0].CurrTot and max(m.Curr for m in bat) == pytest.approx(25.0)


# the simulator with the observer attached (if server.py does not attach one itself yet)
ATTACH = """
import runpy, sys
from pathlib import Path
from sitlpool.sim import server
from sitlpool.sim.dataflash_observer import DataFlashObserver
init = server.Simulator.__init__
def attached(self, *a, **k):
    init(self, *a, **k)
    if not any(isinstance(o, DataFlashObserver) for o in self.copter.observers):
        self.copter.observers.append(DataFlashObserver(Path("logs")))
server.Simulator.__init__ = attached
sys.argv = ["sitlpool.sim", *sys.argv[1:]]
runpy.run_module("sitlpool.sim", run_name="__main__")
"""


def test_a_flight_of_the_running_simulator_is_logged_and_readable_live(procs, tmp_path, instances):
    n = instances[0]
    cmd = [sys.executable, "-c", ATTACH, "-I", str(n), "--model", "quad", "--speedup", "5", "--ready-delay", "3"]
    procs.popen(cmd, cwd=tmp_path, stdout=open(tmp_path / "stdout", "ab"), stderr=open(tmp_path / "stderr", "ab"))
    g = Gcs(ports(n).serial0)
    g.heartbeat()
    assert g.recv("HEARTBEAT", 20, lambda h: h.system_status == 3) is not None, "booted (STANDBY)"
    assert g.command(176, 1, 4) == 0  # GUIDED
    wait_for(lambda: g.command(400, 1) == 0, timeout=30, interval=0.5, what="arming")
    log = tmp_path / "logs" / "00000001.BIN"
    assert log.exists() and (tmp_path / "logs" / "LASTLOG.TXT").read_bytes() == b"1\r\n"
    assert g.command(22, 0, 0, 0, 0, 0, 0, 5) == 0
    wait_for(lambda: any(m.get_type() == "CTUN" and m.Alt > 4.5 for m in read_all(log)), timeout=20, what="5 m, live")
    assert g.command(176, 1, 9) == 0  # LAND
    wait_for(lambda: any(m.get_type() == "ARM" and m.ArmState == 0 for m in read_all(log)), timeout=30, what="disarm")
    g.close()
    msgs = read_all(log)
    texts = [m.Message for m in msgs if m.get_type() == "MSG"]
    assert "Arming motors" in texts and "Disarming motors" in texts
    assert [m.Mode for m in msgs if m.get_type() == "MODE"] == [4, 9]
    assert [m.Id for m in msgs if m.get_type() == "EV"][-2:] == [11, 56]
    r = subprocess.run([sys.executable, str(MAVLOGDUMP), str(log)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Traceback" not in r.stderr
