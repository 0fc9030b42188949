"""Third pass: polygon fences (avoidance, gotos outside, exclusion zones) and FENCE_ACTION 0 / 2 on a
breach, on real ArduCopter. usage: world3.py INST CASE [TAG]

CASE: act0 | act2 (GUIDED velocity 10 m/s north through a 60 m circle, AVOID_ENABLE 0, FENCE_ACTION 0 / 2) |
poly_vel (GUIDED velocity 5 m/s north toward the north edge of a 80 m square inclusion polygon) |
poly_slide (the same, velocity 5 N 2 E: slides along the edge or stops?) |
poly_loiter (LOITER, pitch stick full forward, toward the north edge) |
poly_goto (GUIDED position target 60 m north, outside the square) |
poly_act (poly_vel with AVOID_ENABLE 0: the breach) |
excl_circle / excl_poly (GUIDED velocity 5 m/s north toward an exclusion circle r 10 m at 30 m N /
a 20 m exclusion square centred 30 m N; FENCE_TYPE 4) | excl_goto (position target inside the exclusion circle) |
alt_goto (FENCE_TYPE 1, FENCE_ALT_MAX 30, GUIDED position target at 40 m).
Writes $OUT/<CASE>_<TAG>.json (default /tmp/m3/results) and prints the summary of world2.py.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from sitl import HOME_LAT, HOME_LON, Sitl, offset_latlon  # noqa: E402  (sets MAVLINK20 before pymavlink loads)

from pymavlink import mavutil  # noqa: E402
from world2 import _track, _vel, summary  # noqa: E402

OUT = os.environ.get("OUT", "/tmp/m3/results")
SQUARE = [(40, -40), (40, 40), (-40, 40), (-40, -40)]  # north, east of home (m): 80 m square
EXCL_SQUARE = [(40, -10), (40, 10), (20, 10), (20, -10)]
M = mavutil.mavlink


def upload_fence(s: Sitl, items: list[tuple[int, float, float, float]]) -> int:
    """Items (command, param1, north m, east m) uploaded as MAV_MISSION_TYPE_FENCE; the ACK's type."""
    s.m.mav.mission_count_send(1, 1, len(items), M.MAV_MISSION_TYPE_FENCE)
    acked: dict = {}

    def hook(m):
        if m.get_type() in ("MISSION_REQUEST", "MISSION_REQUEST_INT") and m.mission_type == 1:
            cmd, p1, n, e = items[m.seq]
            lat, lon = offset_latlon(HOME_LAT, HOME_LON, n, e)
            s.m.mav.mission_item_int_send(
                1, 1, m.seq, M.MAV_FRAME_GLOBAL, cmd, 0, 1, p1, 0, 0, 0, int(lat * 1e7), int(lon * 1e7), 0, 1
            )
        elif m.get_type() == "MISSION_ACK" and m.mission_type == 1:
            acked["type"] = m.type

    s.hooks.append(hook)
    try:
        s.pump(until=lambda: "type" in acked, timeout=20)
    finally:
        s.hooks.remove(hook)
    s.log("fence upload ack", acked)
    return int(acked.get("type", -1))


def main() -> None:
    inst, case = int(sys.argv[1]), sys.argv[2]
    tag = sys.argv[3] if len(sys.argv) > 3 else "a"
    os.makedirs(OUT, exist_ok=True)
    s = Sitl(inst, speedup=float(os.environ.get("SPEEDUP", 5)))
    res: dict = {"case": case, "dir": s.dir}
    track: list[tuple] = []
    s.hooks.append(lambda m: _track(s, m, track))
    try:
        params: dict[str, float] = {"FENCE_ENABLE": 1, "FENCE_ACTION": 1}
        if case in ("act0", "act2"):
            params.update(FENCE_TYPE=2, FENCE_RADIUS=60, AVOID_ENABLE=0, FENCE_ACTION=int(case[3]))
        elif case == "alt_goto":
            params.update(FENCE_TYPE=1, FENCE_ALT_MAX=30)
        else:
            params.update(FENCE_TYPE=4)
        if case == "poly_act":
            params["AVOID_ENABLE"] = 0
        for kv in filter(None, os.environ.get("EXTRA", "").split(",")):
            params[kv.split("=")[0]] = float(kv.split("=")[1])
        if case.startswith("poly"):
            res["fence_ack"] = upload_fence(s, [(M.MAV_CMD_NAV_FENCE_POLYGON_VERTEX_INCLUSION, 4, n, e) for n, e in SQUARE])
        elif case in ("excl_circle", "excl_goto"):
            res["fence_ack"] = upload_fence(s, [(M.MAV_CMD_NAV_FENCE_CIRCLE_EXCLUSION, 10, 30, 0)])
        elif case == "excl_poly":
            res["fence_ack"] = upload_fence(
                s, [(M.MAV_CMD_NAV_FENCE_POLYGON_VERTEX_EXCLUSION, 4, n, e) for n, e in EXCL_SQUARE]
            )
        for k, v in params.items():
            s.set_param(k, v)
        res["params"] = params
        s.wait_ready()
        s.takeoff(float(os.environ.get("ALT", 10)))
        s.pump(sim=4)
        track.clear()
        res["t0"] = s.tb
        guided = lambda: s.mode != "GUIDED"  # noqa: E731
        if case in ("act0", "act2"):
            _vel(s, 10, 0, until=lambda: s.mode != "GUIDED" or any("breached" in x[2] for x in s.texts), sim=60)
            _vel(s, 10, 0, until=guided, sim=6)  # act0: keeps going
            s.pump(sim=40, until=lambda: not s.armed)
            s.pump(sim=3)
        elif case in ("poly_vel", "poly_act", "excl_circle", "excl_poly"):
            _vel(s, 5, 0, until=guided, sim=40)
            s.pump(sim=10)
        elif case == "poly_slide":
            _vel(s, 5, 2, until=guided, sim=50)
            s.pump(sim=5)
        elif case == "poly_loiter":
            s.rc_override = [1500, 1500, 1500, 1500, 0, 0, 0, 0]
            s.set_mode("LOITER")
            s.pump(sim=2)
            s.rc_override = [1500, 1000, 1500, 1500, 0, 0, 0, 0]
            s.pump(sim=30, until=lambda: s.mode != "LOITER")
            s.rc_override = [1500, 1500, 1500, 1500, 0, 0, 0, 0]
            s.pump(sim=5)
        elif case == "poly_goto":
            lat, lon = offset_latlon(HOME_LAT, HOME_LON, 60, 0)
            s.goto(lat, lon, 10)
            s.pump(sim=15)
            lat, lon = offset_latlon(HOME_LAT, HOME_LON, 30, 0)  # and one inside, to see it moves at all
            s.goto(lat, lon, 10)
            s.pump(sim=15)
        elif case == "excl_goto":
            lat, lon = offset_latlon(HOME_LAT, HOME_LON, 30, 0)
            s.goto(lat, lon, 10)
            s.pump(sim=20)
        elif case == "alt_goto":
            lat, lon = offset_latlon(HOME_LAT, HOME_LON, 0, 0)
            s.goto(lat, lon, 40)
            s.pump(sim=25)
            s.goto(lat, lon, 20)
            s.pump(sim=10)
        res["ack"] = str(s.last.get("COMMAND_ACK"))
    finally:
        t0 = res.get("t0", 0)
        res["texts"] = [(round(t - t0, 2), sev, tx) for t, sev, tx in s.texts if t >= t0 - 0.5]
        res["modes"] = [(round(t - t0, 2), m) for t, m in s.modes if t >= t0 - 0.5]
        res["armed"] = [(round(t - t0, 2), a) for t, a in s.armed_log if t >= t0 - 0.5]
        res["track"] = [(round(r[0] - t0, 2), *[round(x, 3) for x in r[1:6]], r[6]) for r in track]
        s.close()
        with open(os.path.join(OUT, f"{case}_{tag}.json"), "w") as f:
            json.dump(res, f)
        summary(res)
        print("  armed", res["armed"], "at", time.strftime("%H:%M:%S"))


if __name__ == "__main__":
    main()
