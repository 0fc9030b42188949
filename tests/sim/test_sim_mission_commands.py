"""The built-in vehicle alone, in this process (no sockets: its ``Copter`` stepped on sim time),
flies the common mission commands as ArduCopter 4.7 does (issue 23; compared with the real
binary in ``tests/gcs/test_gcs_mission_commands_fly.py``): CONDITION_YAW, NAV_DELAY, an ROI,
spline waypoints, a LOITER_TURNS circle, a DO_JUMP, RTL to the nearest rally point; what
ArduCopter skips, CONDITION_DELAY, LOITER_UNLIM, DO_JUMP for ever, the rally point's limits."""

from __future__ import annotations

import math
import time

import pytest

from sitlpool.sim.copter import MODES, Copter, MissionItem
from sitlpool.sim.geo import to_latlon
from sitlpool.sim.params import Params

HOME = (-35.363261, 149.165230, 584.0, 353.0)
DT = 0.02


def item(cmd: int, p=(), n: float | None = None, e: float = 0.0, alt: float = 0.0) -> MissionItem:
    """A stored item at ``n``, ``e`` metres from home (``alt`` above home), or without a position."""
    params = tuple(float(x) for x in (*p, 0, 0, 0, 0)[:4])
    if n is None:
        return MissionItem(cmd, 0.0, 0.0, alt, params, 3 if cmd == 22 else 0)  # type: ignore[arg-type]
    lat, lon = to_latlon(HOME[0], HOME[1], n, e)
    return MissionItem(cmd, lat, lon, alt, params, 3)  # type: ignore[arg-type]


class Sim:
    """One vehicle stepped in this process; what it sends is recorded with its sim time."""

    def __init__(self, tmp_path, **params):
        p = Params(tmp_path / "eeprom.bin", [], True, None, 1.0)
        for k, v in params.items():
            assert p.set(k, v, save=False), k
        self.c = Copter(p, HOME, 1.0, self.send, lambda: None)
        self.ev: list[tuple] = []
        self.c.ready()
        self.run(3)

    def send(self, msg, link=None) -> None:
        kind = msg.get_type()
        if kind == "STATUSTEXT":
            self.ev.append((self.c.t, "text", msg.text))
        elif kind == "MISSION_ITEM_REACHED":
            self.ev.append((self.c.t, "reached", msg.seq))
        elif kind == "MISSION_CURRENT":
            self.ev.append((self.c.t, "cur", msg.seq))

    def run(self, seconds: float, until=None) -> bool:
        for _ in range(int(round(seconds / DT))):
            self.c.step(DT)
            if self.c.armed and int(self.c.t / DT) % 5 == 0:
                self.ev.append((self.c.t, "pos", self.c.north, self.c.east, self.c.rel_alt, self.c.heading))
            if until is not None and until(self.c):
                return True
        return False

    def fly(self, items: list[MissionItem], rally=(), seconds: float = 300, until=None) -> None:
        """Rally points ((n, e, alt above home)), the mission, GUIDED, arm, AUTO; until disarmed."""
        self.c.rally_items = lambda: [item(5100, n=n, e=e, alt=a) for n, e, a in rally]
        self.c.set_mission([MissionItem(16, HOME[0], HOME[1], 0.0, frame=0), *items])
        assert self.c.set_mode(MODES["GUIDED"], None) == 0
        assert self.c.arm(False, None) == 0
        assert self.c.set_mode(MODES["AUTO"], None) == 0
        self.t0 = self.c.t
        self.run(seconds, until or (lambda c: not c.armed))

    def texts(self) -> list[str]:
        return [e[2] for e in self.ev if e[1] == "text"]

    def when(self, prefix: str) -> float:
        return next(e[0] for e in self.ev if e[1] == "text" and e[2].startswith(prefix))

    def reached(self) -> list[int]:
        return [e[2] for e in self.ev if e[1] == "reached"]

    def pos(self, t0: float = 0.0, t1: float = math.inf) -> list[tuple]:
        return [e for e in self.ev if e[1] == "pos" and t0 <= e[0] <= t1]


def closest(pos, n: float, e: float) -> float:
    return min(math.hypot(p[2] - n, p[3] - e) for p in pos)


def angle(a: float) -> float:
    return (a + 180) % 360 - 180


SHORT = [
    item(22, alt=5),  # 1 takeoff 5 m
    item(115, (180, 0, 0, 0)),  # 2 CONDITION_YAW to 180 at the default rate
    item(93, (4, -1, -1, -1)),  # 3 NAV_DELAY 4 s
    item(195, n=0, e=60),  # 4 ROI 60 m east
    item(82, n=10, e=10, alt=5),  # 5 spline
    item(82, n=20, e=0, alt=6),  # 6 spline
    item(197),  # 7 ROI none
    item(18, (1, 0, 5, 0), n=20, e=0, alt=6),  # 8 LOITER_TURNS 1 turn, radius 5
    item(16, n=5, e=0, alt=5),  # 9 waypoint
    item(16, n=5, e=15, alt=5),  # 10 waypoint
    item(177, (9, 1)),  # 11 DO_JUMP to 9, once
    item(20),  # 12 RTL: to the rally point 10 m east (nearer than home), at RTL_ALT
]


@pytest.fixture(scope="module")
def short(tmp_path_factory) -> Sim:
    s = Sim(tmp_path_factory.mktemp("short"))
    s.fly(SHORT, rally=[(5, 25, 8), (-200, 0, 30)])
    return s


def test_items_reached_in_order_with_the_jump_repeated(short):
    # one MISSION_ITEM_REACHED per step, as ArduCopter: 3 and 6 end in the step 4 and 7 are done in
    assert short.reached() == [1, 2, 4, 5, 7, 8, 9, 10, 9, 10, 12]
    assert "Mission: 11 Jump 1/1" in short.texts()
    assert [t for t in short.texts() if "circle" in t] == [f"Mission: starting circle {k}/1" for k in (1, 2)]
    assert [e[2] for e in short.ev if e[1] == "cur"][-1] == 0  # complete


def test_condition_yaw_and_delay(short):
    t3, t4 = short.when("Mission: 3 "), short.when("Mission: 4 ")
    assert t4 - t3 == pytest.approx(4, abs=0.1)
    assert "Delaying 4 sec" in short.texts()
    assert abs(angle(short.pos(t3, t4)[-1][5] - 180)) < 2


def test_roi_spline_and_circle(short):
    t5, t7 = short.when("Mission: 5 "), short.when("Mission: 7 ")
    spline = short.pos(t5, t7)
    assert closest(spline, 10, 10) < 1 and closest(spline, 20, 0) < 1
    late = [p for p in spline if p[0] > t5 + 2]
    assert all(abs(angle(p[5] - math.degrees(math.atan2(60 - p[3], -p[2])))) < 5 for p in late)  # facing the ROI
    circle = short.pos(short.when("Mission: starting circle 1"), short.when("Mission: 9 "))
    radius = [math.hypot(p[2] - 20, p[3]) for p in circle]
    assert sum(radius) / len(radius) == pytest.approx(5, abs=0.6)
    facing = [abs(angle(p[5] - math.degrees(math.atan2(-p[3], 20 - p[2])))) for p in circle]
    assert max(facing[len(facing) // 2 :]) < 5  # the nose to the centre, once turned at the yaw slew rate


def test_rtl_goes_to_the_nearest_rally_point(short):
    last = short.pos()[-1]
    assert math.hypot(last[2] - 5, last[3] - 25) < 0.5 and last[4] < 0.1
    assert max(p[4] for p in short.pos(short.when("Mission: 12 "))) == pytest.approx(15, abs=0.5)


def test_skipped_commands_and_loiter_unlimited(tmp_path):
    s = Sim(tmp_path)
    s.fly(
        [
            item(22, alt=3),  # 1
            item(210, (1,)),  # 2 DO_INVERTED_FLIGHT: Copter skips it
            item(112, (2,)),  # 3 CONDITION_DELAY 2 s, then
            item(178, (1, 3, -1)),  # 4 DO_CHANGE_SPEED 3 m/s
            item(16, n=20, e=0, alt=3),  # 5
            item(30, n=0, e=0, alt=9),  # 6 NAV_CONTINUE_AND_CHANGE_ALT: a plane's, skipped
            item(17, n=0, e=6, alt=4),  # 7 LOITER_UNLIM
            item(16, n=0, e=0, alt=3),  # 8 never
        ],
        seconds=60,
        until=lambda c: False,
    )
    assert "Skipping invalid cmd #210" in s.texts()
    assert s.when("Mission: 4 ") - s.when("Mission: 3 ") == pytest.approx(2, abs=0.1)
    assert s.c.guided_speed == 3
    assert [t for t in s.texts() if t.startswith("Mission: ")][-2:] == [
        "Mission: 6 ContinueAndChangeAlt",
        "Mission: 7 LoitUnlim",
    ]
    assert s.c.mission_seq == 7 and not s.c.mission_done
    assert math.hypot(s.c.north, s.c.east - 6) < 0.3 and s.c.rel_alt == pytest.approx(4, abs=0.2)


def test_jump_for_ever_and_counts_start_again(tmp_path):
    s = Sim(tmp_path)
    loop = [item(22, alt=3), item(16, n=4, e=0, alt=3), item(16, n=0, e=0, alt=3), item(177, (2, -1))]
    s.fly(loop, seconds=60, until=lambda c: False)
    assert s.reached().count(3) >= 4 and not any("Jump" in t for t in s.texts())  # for ever: no count, no text
    (tmp_path / "again").mkdir()
    s2 = Sim(tmp_path / "again")
    twice = [item(22, alt=3), item(16, n=4, e=0, alt=3), item(177, (2, 2)), item(16, n=0, e=0, alt=3)]
    s2.fly(twice, seconds=60, until=lambda c: c.mission_done)
    assert [t for t in s2.texts() if "Jump" in t] == ["Mission: 3 Jump 1/2", "Mission: 3 Jump 2/2"]
    assert s2.c.set_mode(MODES["GUIDED"], None) == 0 and s2.c.set_mode(MODES["AUTO"], None) == 0
    s2.run(60, until=lambda c: c.mission_done)
    assert [t for t in s2.texts() if "Jump" in t][-2:] == ["Mission: 3 Jump 1/2", "Mission: 3 Jump 2/2"]


@pytest.mark.parametrize(
    "params,rally,to",
    [
        ({}, [(0, 35, 20)], (0, 35)),  # nearer than home
        ({}, [(0, -60, 20)], (0, 0)),  # farther than home: home
        ({"RALLY_INCL_HOME": 0}, [(0, -60, 20)], (0, -60)),  # home not considered
        ({"RALLY_LIMIT_KM": 0.01}, [(0, 35, 20)], (0, 0)),  # beyond RALLY_LIMIT_KM (10 m): home
    ],
)
def test_rtl_mode_picks_rally_or_home_as_ap_rally(tmp_path, params, rally, to):
    s = Sim(tmp_path, **params)
    s.fly([item(22, alt=10), item(16, n=0, e=20, alt=10), item(17, n=0, e=20, alt=10)], rally=rally, seconds=40,
          until=lambda c: c.mission_seq == 3)  # fmt: skip
    assert s.c.set_mode(MODES["RTL"], None) == 0
    s.run(200, until=lambda c: not c.armed)
    assert math.hypot(s.c.north - to[0], s.c.east - to[1]) < 0.5


def test_circle_from_its_centre_anticlockwise_and_a_delay_to_a_utc_time(tmp_path):
    """Measured on ArduCopter 4.7: at the centre of a LOITER_TURNS it circles at once (no move to
    the edge), a negative radius turns anticlockwise; NAV_DELAY param1 -1 waits until the UTC
    time of day param2:param3:param4 ("Delaying N sec")."""
    s = Sim(tmp_path)
    at = time.gmtime(s.c.utc_at_boot + s.c.t + 40)
    s.fly(
        [
            item(22, alt=10),
            item(18, (1, 0, -8, 0), n=0, e=0, alt=10),
            item(93, (-1, at.tm_hour, at.tm_min, at.tm_sec)),
            item(16, n=5, e=0, alt=10),
        ],
        seconds=120,
        until=lambda c: c.mission_done,
    )
    t2, c0 = s.when("Mission: 2 "), s.when("Mission: starting circle 1/1")
    assert c0 == t2
    turned, prev = 0.0, None
    for p in s.pos(c0, s.when("Mission: 3 ")):
        a = math.atan2(p[3], p[2])
        turned += 0 if prev is None or math.hypot(p[2], p[3]) < 1 else (a - prev + math.pi) % (2 * math.pi) - math.pi
        prev = a
    assert turned / (2 * math.pi) == pytest.approx(-1, abs=0.15)
    said = [t for t in s.texts() if t.startswith("Delaying")]
    waited = s.when("Mission: 4 ") - s.when("Mission: 3 ")
    assert len(said) == 1 and 0 < waited < 40 and int(said[0].split()[1]) == pytest.approx(waited, abs=1)


def test_mission_start_announces_the_first_command_twice_and_a_disarm_resets(tmp_path):
    """As ArduCopter 4.7 (tests/gcs/test_gcs_mission_commands_fly.py): MISSION_START from GUIDED
    enters AUTO, which starts the mission, and starts it again ("Mission: 1 Takeoff" twice); after an
    RTL (not AUTO) landing and the disarm, MISSION_CURRENT says seq 0, NOT_STARTED."""
    from types import SimpleNamespace

    from sitlpool.sim.commands import Call, handle

    s = Sim(tmp_path)
    c = s.c
    c.set_mission([MissionItem(16, HOME[0], HOME[1], 0.0, frame=0), item(22, alt=5), item(16, n=20, e=0, alt=5)])
    assert c.set_mode(MODES["GUIDED"], None) == 0 and c.arm(False, None) == 0
    assert handle(SimpleNamespace(copter=c), Call(300, [0, 0, 0, 0, 0, 0, 0], None)) == 0  # type: ignore[arg-type]
    s.run(20, until=lambda c: c.mission_seq == 2)
    assert [t for t in s.texts() if t.startswith("Mission: 1 ")] == ["Mission: 1 Takeoff"] * 2
    assert c.set_mode(MODES["RTL"], None) == 0
    assert s.run(120, until=lambda c: not c.armed)
    cur = c.mission_current()
    assert (cur.seq, cur.mission_state) == (0, 2)
