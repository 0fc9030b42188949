"""The built-in vehicle's observer hook (sitlpool.sim.observers): what a flight-log writer sees
of a flight, in order, on the vehicle's own clock."""

from sitlpool.sim.copter import MODES, Copter, MissionItem
from sitlpool.sim.observers import VehicleObserver
from sitlpool.sim.params import Params

HOME = (-35.363261, 149.165230, 584.0, 353.0)


class Recorder(VehicleObserver):
    def __init__(self):
        self.events: list[tuple] = []
        self.steps = 0
        self.max_alt = 0.0

    def on_step(self, vehicle, dt):
        self.steps += 1
        self.max_alt = max(self.max_alt, vehicle.rel_alt)

    def on_ready(self, vehicle):
        self.events.append(("ready",))

    def on_mode(self, vehicle, old, new, reason):
        self.events.append(("mode", old, new, reason))

    def on_mode_refused(self, vehicle, mode):
        self.events.append(("mode_refused", mode))

    def on_arming(self, vehicle, armed, reason, forced):
        self.events.append(("arming", armed, reason, forced))

    def on_text(self, vehicle, severity, text):
        self.events.append(("text", text))

    def on_mission(self, vehicle, items):
        self.events.append(("mission", len(items)))

    def on_mission_item(self, vehicle, seq, event):
        self.events.append(("item", seq, event))

    def on_home(self, vehicle):
        self.events.append(("home",))


def run(copter: Copter, seconds: float) -> None:
    for _ in range(int(seconds / 0.05)):
        copter.step(0.05)


def test_observer_sees_a_mission_flight(tmp_path):
    sent = []
    params = Params(tmp_path / "eeprom.bin", [], True, None, 1.0)
    c = Copter(params, HOME, 1.0, lambda msg, link=None: sent.append(msg), lambda: None)
    rec = Recorder()
    c.observers.append(rec)
    c.set_mode(MODES["GUIDED"], None)  # while booting: accepted, undone at the end of boot
    c.ready()
    assert ("mode", MODES["STABILIZE"], MODES["GUIDED"], "gcs") in rec.events
    assert rec.events[-1] == ("ready",) and ("mode", MODES["GUIDED"], MODES["STABILIZE"], "initialised") in rec.events
    assert c.set_mode(14, None) != 0 and ("mode_refused", 14) in rec.events  # FLIP: init failed
    run(c, 2.0)  # boot events: origin and home set, item 0 appears
    assert ("home",) in rec.events and ("mission", 1) in rec.events
    c.set_mission(
        [
            c.mission[0],
            MissionItem(22, 0.0, 0.0, 5.0),
            MissionItem(16, *c.latlon(), 5.0, (1.0, 0, 0, 0)),
            MissionItem(21, 0.0, 0.0, 0.0),
        ]
    )
    assert ("mission", 4) in rec.events
    assert c.set_mode(MODES["GUIDED"], None) == 0 and c.arm(False, None) == 0
    assert ("arming", True, "mavlink", False) in rec.events and ("text", "Arming motors") in rec.events
    assert c.set_mode(MODES["AUTO"], None) == 0
    run(c, 60.0)
    items = [e for e in rec.events if e[0] == "item"]
    assert items[:4] == [("item", 1, "started"), ("item", 1, "reached"), ("item", 2, "started"), ("item", 2, "reached")]
    assert ("item", 3, "started") in items
    assert rec.events[-2:] == [("text", "Disarming motors"), ("arming", False, "landed", False)]
    assert 4.5 < rec.max_alt < 6 and rec.steps > 1200
    assert not c.armed
