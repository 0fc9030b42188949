"""The fence's avoidance (ArduCopter's AC_Avoid, AVOID_ENABLE bit 1, on by default) on the built-in
vehicle and on real ArduCopter 4.7, side by side: flying toward a 60 m circle fence at 10 m/s in
GUIDED velocity control, and climbing at full throttle in ALT_HOLD under a 30 m ceiling, the copter
stops FENCE_MARGIN (2 m) inside and nothing is breached; toward the edge of an uploaded polygon it
stops as well and slides along it into the corner, and a GUIDED destination outside the polygon or
above FENCE_ALT_MAX is ignored. FENCE_ACTION 0 (report only) and 2 (LAND) on a breach. The breaches
with FENCE_ACTION 1 (AVOID_ENABLE 0): test_gcs_world_failsafes.py. Figures measured:
bench/measure_real_world/README.md ("Fence", "Third pass")."""

from __future__ import annotations

import math

import pytest
from test_gcs_mission_commands_fly import upload
from test_gcs_world_failsafes import GEOFENCE, Watch, finish, hover

from gcs_scenarios import (  # noqa: F401
    arducopter_vehicle,
    assert_same,
    builtin_vehicle,
    cases,
    check,
    differences,
    near,
    offset,
    records,
)

pytestmark = pytest.mark.xdist_group("gcs_world_fence")
# ArduCopter holds its stop at the fence only while velocity targets come at ~10 Hz of sim time (sent
# every 0.4 s or 2 s, or falling behind at speedup 10, it flies out 1.5-3 s later and breaches;
# bench/measure_real_world/README.md): targets at 10 Hz, the real vehicle at speedup 5, and the
# record taken at the first stop
SPEEDUP_OVERRIDE = {"arducopter": 5, "builtin": 20}


def _fence_texts(w: Watch) -> list[str]:
    return w.said("Circle fence", "Max Alt fence", "Fence breach", "Manual recovery")


def s_avoid_circle(v) -> dict:
    """FENCE_TYPE 2, FENCE_RADIUS 60; GUIDED velocity 10 m/s north: it slows and stops at 58 m.
    Recorded at that first stop (see SPEEDUP_OVERRIDE)."""
    w = hover(v, {"FENCE_ENABLE": 1, "FENCE_TYPE": 2, "FENCE_RADIUS": 60, "FENCE_ACTION": 1}, alt=10)
    try:
        w.g.m.mav.request_data_stream_send(1, 1, 6, 10, 1)  # POSITION at 10 Hz: a velocity target each
        w.mark()
        fast: list[float] = []
        stop: list[tuple[float, float]] = []

        def push(w, m):
            if m.get_type() == "GLOBAL_POSITION_INT" and w.mode == "GUIDED":
                w.g.m.mav.set_position_target_local_ned_send(
                    0, 1, 1, 1, 0b110111000111, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0
                )
                speed = math.hypot(*w.vel)
                if speed > 5:
                    fast.append(w.rel())
                elif fast and speed < 0.3 and not stop:
                    stop.append((w.rel(), w.dist))

        w.hooks.append(push)
        w.run(25, until=lambda w: bool(stop) or w.mode != "GUIDED")
        w.hooks.clear()
        return {
            "modes": [n for _, n in w.modes],
            "texts": _fence_texts(w),
            "stop_distance_m": round(stop[0][1], 1) if stop else None,
            "_stop_s": stop[0][0] if stop else None,
            "max_distance_m": round(w.max_dist, 1),
            "geofence_unhealthy": GEOFENCE in w.lost,
        }
    finally:
        finish(w, {"FENCE_ENABLE": 0, "FENCE_TYPE": 7, "FENCE_RADIUS": 150})


def s_avoid_ceiling(v) -> dict:
    """FENCE_TYPE 1, FENCE_ALT_MAX 30; ALT_HOLD at full throttle from 10 m: it stops at 28 m."""
    w = hover(v, {"FENCE_ENABLE": 1, "FENCE_TYPE": 1, "FENCE_ALT_MAX": 30, "FENCE_ACTION": 1}, alt=10)
    try:
        w.override = True  # centred sticks while the mode changes
        w.run(1)
        w.g.mode("ALT_HOLD")
        w.run(3, until=lambda w: w.mode == "ALT_HOLD")  # its HEARTBEAT seen
        w.override = False
        w.mark()

        def throttle_up(w, m):
            if m.get_type() == "GLOBAL_POSITION_INT":
                w.g.m.mav.rc_channels_override_send(1, 1, 1500, 1500, 2000, 1500, 0, 0, 0, 0)

        w.hooks.append(throttle_up)
        w.run(18, until=lambda w: w.mode != "ALT_HOLD" or w.alt > 27.9)
        w.run(2, until=lambda w: w.mode != "ALT_HOLD")  # settled there (or breached: RTL)
        w.hooks.clear()
        w.override = True
        return {
            "modes": [n for _, n in w.modes],
            "texts": _fence_texts(w),
            "max_alt_m": round(w.max_alt, 1),
            "end_alt_m": round(w.alt, 1),
            "geofence_unhealthy": GEOFENCE in w.lost,
        }
    finally:
        finish(w, {"FENCE_ENABLE": 0, "FENCE_TYPE": 7, "FENCE_ALT_MAX": 100})


SQUARE = [(40, -40), (40, 40), (-40, 40), (-40, -40)]  # (north, east) m from home: an 80 m square


def _push_velocity(vn: float, ve: float):
    """A hook sending a GUIDED velocity target at each GLOBAL_POSITION_INT (10 Hz of sim time)."""

    def push(w, m):
        if m.get_type() == "GLOBAL_POSITION_INT" and w.mode == "GUIDED":
            w.g.m.mav.set_position_target_local_ned_send(0, 1, 1, 1, 0b110111000111, 0, 0, 0, vn, ve, 0, 0, 0, 0, 0, 0)

    return push


def _north_east(w) -> tuple[float, float]:
    lat, lon = w.true_pos or w.pos or w.home
    return (lat - w.home[0]) * 111319.5, (lon - w.home[1]) * 111319.5 * math.cos(math.radians(w.home[0]))


def s_avoid_polygon(v) -> dict:
    """An 80 m square inclusion polygon and FENCE_ALT_MAX 30 (FENCE_TYPE 5): a goto 60 m north
    (outside) and one 40 m up are ignored; GUIDED velocity 5 m/s north, 2 m/s east slides along the
    north edge and stops in the corner, FENCE_MARGIN from both edges. Recorded at that first stop."""
    w = hover(v, alt=10)
    g = w.g
    try:
        square = [(0, 5001, 0, 4, 0, 0, 0, *offset(*w.home, n, e), 0.0) for n, e in SQUARE]
        upload(g, square, 1)
        for k, val in {"FENCE_TYPE": 5, "FENCE_ALT_MAX": 30, "FENCE_ACTION": 1, "FENCE_ENABLE": 1}.items():
            w.set(k, val)
        g.m.mav.request_data_stream_send(1, 1, 6, 10, 1)  # POSITION at 10 Hz: a velocity target each
        w.run(1)
        start, alt0 = _north_east(w), w.alt
        for north, up in ((60, 10), (0, 40)):
            lat, lon = offset(*w.home, north, 0)
            g.m.mav.set_position_target_global_int_send(
                0, 1, 1, 6, 0b110111111000, int(lat * 1e7), int(lon * 1e7), up, 0, 0, 0, 0, 0, 0, 0, 0
            )
        w.run(4)
        moved = math.dist(start, _north_east(w))
        climbed = w.alt - alt0
        w.mark()
        fast: list[float] = []
        stop: list[tuple[float, float]] = []

        def watch(w, m):
            if m.get_type() == "GLOBAL_POSITION_INT":
                speed = math.hypot(*w.vel)
                if speed > 3:
                    fast.append(w.rel())
                elif fast and speed < 0.2 and not stop:
                    stop.append(_north_east(w))

        w.hooks += [_push_velocity(5, 2), watch]
        w.run(40, until=lambda w: bool(stop) or w.mode != "GUIDED")
        w.hooks.clear()
        return {
            "outside_goto_moved_m": round(moved, 1),
            "above_goto_climbed_m": round(climbed, 1),
            "modes": [n for _, n in w.modes],
            "texts": w.said("Polygon fence", "Max Alt fence", "Fence breach", "Manual recovery"),
            "stop_north_m": round(stop[0][0], 1) if stop else None,
            "stop_east_m": round(stop[0][1], 1) if stop else None,
        }
    finally:
        g.m.mav.mission_clear_all_send(1, 1, 1)
        finish(w, {"FENCE_ENABLE": 0, "FENCE_TYPE": 7, "FENCE_ALT_MAX": 100})


def _breach(v, action: int) -> dict:
    """FENCE_TYPE 2, FENCE_RADIUS 60, AVOID_ENABLE 0, FENCE_ACTION ``action``; GUIDED velocity
    10 m/s north from 10 m over home until the mode changes or the third breach text (report only)."""
    params = {"FENCE_ENABLE": 1, "FENCE_TYPE": 2, "FENCE_RADIUS": 60, "FENCE_ACTION": action, "AVOID_ENABLE": 0}
    w = hover(v, params, alt=10)
    try:
        w.g.m.mav.request_data_stream_send(1, 1, 6, 10, 1)
        w.mark()
        at: list[float] = []
        w.hooks.append(lambda w, m: at.append(w.dist) if m.get_type() == "STATUSTEXT" and "fence" in m.text else None)
        push = _push_velocity(10, 0)
        w.hooks.append(push)
        w.run(30, until=lambda w: w.mode != "GUIDED" or len(at) >= 3)
        w.hooks.remove(push)
        w.run(1)  # the texts of that instant
        w.hooks.clear()
        rec = {
            "modes": [n for _, n in w.modes],
            "texts": w.said("Circle fence", "Fence breach", "Manual recovery"),
            "_first_breach_s": w.first("Circle fence"),
        }
        rec.update({f"breach_{i + 1}_m": round(d, 1) for i, d in enumerate(at)})
        return rec
    finally:
        _back_home(w)
        finish(w, {"FENCE_ENABLE": 0, "FENCE_TYPE": 7, "FENCE_RADIUS": 150, "FENCE_ACTION": 1, "AVOID_ENABLE": 3})


def _back_home(w) -> None:
    """Fence off and back over home in GUIDED: ArduCopter refuses to arm outside its fence (the
    next scenario's home is where it arms)."""
    w.set("FENCE_ENABLE", 0)
    if w.armed and w.dist > 3:
        w.g.mode("GUIDED")
        w.g.m.mav.set_position_target_global_int_send(
            0, 1, 1, 6, 0b110111111000, int(w.home[0] * 1e7), int(w.home[1] * 1e7), 10, 0, 0, 0, 0, 0, 0, 0, 0
        )
        w.run(40, until=lambda w: w.dist < 2 and math.hypot(*w.vel) < 0.5)


def s_report_only(v) -> dict:
    """FENCE_ACTION 0: "Circle fence breached" at 60 m and again each 20 m further; stays GUIDED."""
    return _breach(v, 0)


def s_land_action(v) -> dict:
    """FENCE_ACTION 2: "Circle fence breached", LAND, "Manual recovery started"."""
    return _breach(v, 2)


SCENARIOS = {
    "avoid_circle": s_avoid_circle,
    "avoid_ceiling": s_avoid_ceiling,
    "avoid_polygon": s_avoid_polygon,
    "report_only": s_report_only,
    "land_action": s_land_action,
}
EXPECT = {
    # measured (10 m/s, three runs at speedup 5): stops at 58.0-58.1 m, holds there, no breach
    "avoid_circle": {
        "modes": [],
        "texts": [],
        "stop_distance_m": near(58.0, 0.6),
        "max_distance_m": near(58.1, 0.6),
        "geofence_unhealthy": False,
    },
    # measured: climbs at 2.5 m/s, slows from 25.3 m, stops at 28.08 m and settles at 28.0
    "avoid_ceiling": {
        "modes": [],
        "texts": [],
        "max_alt_m": near(28.1, 0.6),
        "end_alt_m": near(28.0, 0.5),
        "geofence_unhealthy": False,
    },
    # measured (world3.py poly_goto, alt_goto, poly_slide): gotos ignored; slides east at ~38 m N,
    # stops at (38.0, 38.0)
    "avoid_polygon": {
        "outside_goto_moved_m": near(0, 0.5),
        "above_goto_climbed_m": near(0, 0.5),
        "modes": [],
        "texts": [],
        "stop_north_m": near(38.0, 0.6),
        "stop_east_m": near(38.0, 1.0),
    },
    # measured (act0): a text at 60, 80, 100 ... m (every 2 s at 10 m/s), no mode change
    "report_only": {
        "modes": [],
        "texts": ["Circle fence breached"] * 3,
        "breach_1_m": near(60.5, 1.5),
        "breach_2_m": near(80.5, 1.5),
        "breach_3_m": near(100.5, 1.5),
    },
    # measured (act2): LAND at the breach, once
    "land_action": {
        "modes": ["LAND"],
        "texts": ["Circle fence breached", "Manual recovery started"],
        "breach_1_m": near(60.5, 1.5),
    },
}
TOLERANCES = {
    "stop_distance_m": 0.6,
    "max_distance_m": 0.6,
    "max_alt_m": 0.6,
    "end_alt_m": 0.5,
    "outside_goto_moved_m": 0.5,
    "above_goto_climbed_m": 0.5,
    "stop_north_m": 0.6,
    "stop_east_m": 1.0,
    "breach_1_m": 1.5,
    "breach_2_m": 1.5,
    "breach_3_m": 1.5,
}
XFAIL: dict[str, str] = {}
XFAIL_DIFF: dict[str, str] = {}


@pytest.mark.parametrize("name,kind", cases(SCENARIOS, XFAIL))
def test_world_fence_avoidance(records, name, kind):
    rec = records.get(name, kind)
    expect = EXPECT[name]
    if _polygon_stop_unseen(name, kind, rec):
        expect = {k: v for k, v in expect.items() if k not in STOP_KEYS}
    elif name == "avoid_polygon" and kind == "arducopter":
        # where along the north edge real's slide first pauses depends on its target stream's timing
        # in a full run (29.2 m once, 38.0 alone): its stop 2 m inside the north edge is what is checked
        expect = {k: v for k, v in expect.items() if k != "stop_east_m"}
    bad = check(rec, expect)
    assert not bad, f"{name} on {kind}: " + "; ".join(bad) + f"\n(record: {rec})"


STOP_KEYS = ("stop_north_m", "stop_east_m")


def _polygon_stop_unseen(name: str, kind: str, rec: dict) -> bool:
    """Real ArduCopter holds its polygon stop only while velocity targets keep coming at ~10 Hz of
    its time; in CI's full runs it was still sliding when the window ended (twice, never when the
    module ran alone): then its stop is not compared; the rest (gotos ignored, no breach, no mode
    change) still is. The built-in vehicle's stop is always checked against the measured 38.0 m."""
    return name == "avoid_polygon" and kind == "arducopter" and rec.get("stop_north_m") is None


@pytest.mark.parametrize("name,kind", cases(SCENARIOS, XFAIL_DIFF, kinds=("diff",)))
def test_world_fence_avoidance_same_as_arducopter(records, name, kind):
    real = records.get(name, "arducopter")
    if name == "avoid_polygon":  # see test_world_fence_avoidance: the slide's pause point is timing
        ours = records.get(name, "builtin")
        diff = differences(
            ours,
            real,
            TOLERANCES,
            ignore=STOP_KEYS if _polygon_stop_unseen(name, "arducopter", real) else ("stop_east_m",),
        )
        assert not diff, f"fence {name}: the built-in vehicle differs from ArduCopter:\n" + "\n".join(diff)
        return
    assert_same("fence", name, records, TOLERANCES)
