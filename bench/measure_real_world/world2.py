"""Issue 22, second pass: the fence's avoidance, the transient of a wind step while holding, and
both barometers lost, on real ArduCopter. usage: world2.py INST CASE [TAG]

CASE: params | vel3 | vel5 | vel10 (GUIDED velocity north toward a 60 m circle fence) |
goto (GUIDED position target outside) | loiter_fwd (LOITER, pitch stick forward) |
althold_up / loiter_up / guided_up (toward FENCE_ALT_MAX 30) |
wind_guided / wind_loiter / wind_guided_t1 / wind_loiter_t1 (a step from 0 to 10 m/s from 90 while holding) |
baro_both (SIM_BARO_DISABLE + SIM_BAR2_DISABLE in GUIDED and LOITER).
Writes a JSON record to $OUT (default /tmp/m2/results/<CASE>_<TAG>.json) and prints a summary.
"""

from __future__ import annotations

import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from sitl import HOME_LAT, HOME_LON, Sitl, ne_offset, offset_latlon  # noqa: E402

OUT = os.environ.get("OUT", "/tmp/m2/results")
AVOID = (
    "AVOID_ENABLE",
    "AVOID_MARGIN",
    "AVOID_BEHAVE",
    "AVOID_ACCEL_MAX",
    "AVOID_BACKUP_SPD",
    "AVOID_BACKZ_SPD",
    "AVOID_ANGLE_MAX",
    "AVOID_DIST_MAX",
    "FENCE_MARGIN",
    "FENCE_TYPE",
    "FENCE_ENABLE",
    "FENCE_ACTION",
    "FENCE_RADIUS",
    "FENCE_ALT_MAX",
    "FENCE_ALT_MIN",
    "FENCE_AUTOENABLE",
    "FENCE_OPTIONS",
    "FENCE_RET_ALT",
    "FENCE_TOTAL",
    "LOIT_SPEED",
    "LOIT_ACC_MAX",
    "LOIT_BRK_ACCEL",
    "LOIT_BRK_DELAY",
    "LOIT_BRK_JERK",
    "PILOT_SPEED_UP",
    "PSC_POSXY_P",
    "PSC_VELXY_P",
    "PSC_VELXY_I",
    "PSC_VELXY_D",
)


def main() -> None:
    inst, case = int(sys.argv[1]), sys.argv[2]
    tag = sys.argv[3] if len(sys.argv) > 3 else "a"
    os.makedirs(OUT, exist_ok=True)
    s = Sitl(inst, speedup=float(os.environ.get("SPEEDUP", 5)))
    res: dict = {"case": case, "dir": s.dir}
    track: list[tuple] = []  # (t, true n, true e, est n, est e, rel alt, mode)
    s.hooks.append(lambda m: _track(s, m, track))
    try:
        if case == "params":
            res["params"] = {p: s.get_param(p) for p in AVOID}
            return
        fence = {}
        if case.startswith(("vel", "goto", "loiter_fwd")):
            fence = {"FENCE_ENABLE": 1, "FENCE_TYPE": 2, "FENCE_RADIUS": 60, "FENCE_ACTION": 1}
        elif case.endswith("_up"):
            fence = {"FENCE_ENABLE": 1, "FENCE_TYPE": 1, "FENCE_ALT_MAX": 30, "FENCE_ACTION": 1}
        for kv in filter(None, os.environ.get("EXTRA", "").split(",")):  # EXTRA="AVOID_ENABLE=0,..."
            fence[kv.split("=")[0]] = float(kv.split("=")[1])
        for k, v in fence.items():
            s.set_param(k, v)
        if case.endswith("_t1"):
            s.set_param("SIM_WIND_T", 1)
        s.wait_ready()
        home = s.last.get("HOME_POSITION")
        s.takeoff(float(os.environ.get("ALT", 10)))
        s.pump(sim=4)
        t0 = s.tb
        track.clear()
        res["t0"] = t0
        if case.startswith("goto_vel"):  # as tests/gcs/test_gcs_world_failsafes.py: first a refused goto
            lat, lon = offset_latlon(HOME_LAT, HOME_LON, 120, 0)
            s.goto(lat, lon, 10)
            s.pump(sim=5)
            _vel(s, float(case[8:]), 0, until=lambda: s.mode != "GUIDED", sim=60)
            s.pump(sim=10)
        elif case.startswith("vel"):
            speed = float(case[3:])
            _vel(s, speed, 0, until=lambda: s.mode != "GUIDED", sim=60)
            s.pump(sim=10)
        elif case == "goto":
            lat, lon = offset_latlon(HOME_LAT, HOME_LON, 120, 0)
            s.goto(lat, lon, 10)
            s.pump(sim=10)
        elif case == "loiter_fwd":
            s.rc_override = [1500, 1500, 1500, 1500, 0, 0, 0, 0]
            s.set_mode("LOITER")
            s.pump(sim=2)
            s.rc_override = [1500, 1000, 1500, 1500, 0, 0, 0, 0]  # pitch full forward
            s.pump(sim=40, until=lambda: s.mode != "LOITER")
            s.pump(sim=10)
        elif case in ("althold_up", "loiter_up"):
            s.rc_override = [1500, 1500, 1500, 1500, 0, 0, 0, 0]
            s.set_mode("ALT_HOLD" if case == "althold_up" else "LOITER")
            s.pump(sim=2)
            s.rc_override = [1500, 1500, 2000, 1500, 0, 0, 0, 0]  # throttle full up
            s.pump(sim=40, until=lambda: s.mode not in ("ALT_HOLD", "LOITER"))
            s.pump(sim=10)
        elif case == "guided_up":
            _vel(s, 0, 0, vd=-2.5, until=lambda: s.mode != "GUIDED", sim=40)
            s.pump(sim=10)
        elif case.startswith("wind_"):
            if "loiter" in case:
                s.rc_override = [1500, 1500, 1500, 1500, 0, 0, 0, 0]
                s.set_mode("LOITER")
                s.pump(sim=4)
            track.clear()
            s.set_param("SIM_WIND_DIR", 90)
            t0 = s.tb
            s.set_param("SIM_WIND_SPD", 10)
            res["t0"] = t0
            s.pump(sim=30)
        elif case == "baro_both":
            s.set_param("SIM_BARO_DISABLE", 1)
            t0 = s.tb
            s.set_param("SIM_BAR2_DISABLE", 1)
            res["t0"] = t0
            s.pump(sim=25)
            s.rc_override = [1500, 1500, 1500, 1500, 0, 0, 0, 0]
            s.set_mode("LOITER")
            s.pump(sim=10)
            s.set_mode("LAND")
            s.pump(sim=30)
        res["home"] = None if home is None else [home.latitude, home.longitude]
    finally:
        res["texts"] = [
            (round(t - res.get("t0", 0), 2), sev, tx) for t, sev, tx in s.texts if t >= res.get("t0", 0) - 0.5
        ]
        res["modes"] = [(round(t - res.get("t0", 0), 2), m) for t, m in s.modes if t >= res.get("t0", 0) - 0.5]
        t0 = res.get("t0", 0)
        res["track"] = [(round(r[0] - t0, 2), *[round(x, 3) for x in r[1:6]], r[6]) for r in track]
        s.close()
        with open(os.path.join(OUT, f"{case}_{tag}.json"), "w") as f:
            json.dump(res, f)
        summary(res)


def _vel(s: Sitl, vn: float, ve: float, vd: float = 0.0, until=None, sim: float = 30) -> None:
    """SET_POSITION_TARGET_LOCAL_NED velocity at every (PUSH_EVERY-th) GLOBAL_POSITION_INT (10 Hz sim)."""

    every = int(os.environ.get("PUSH_EVERY", 1))  # a target every Nth GLOBAL_POSITION_INT (10 Hz sim)
    count = [0]

    def push(m):
        if m.get_type() != "GLOBAL_POSITION_INT" or s.mode != "GUIDED":
            return
        count[0] += 1
        if count[0] % every == 0:
            s.m.mav.set_position_target_local_ned_send(0, 1, 1, 1, 0b110111000111, 0, 0, 0, vn, ve, vd, 0, 0, 0, 0, 0)

    s.hooks.append(push)
    try:
        s.pump(sim=sim, until=until)
    finally:
        s.hooks.remove(push)


def _track(s: Sitl, m, track: list) -> None:
    if m.get_type() != "GLOBAL_POSITION_INT":
        return
    st = s.last.get("SIMSTATE")
    if st is None:
        return
    tn, te = ne_offset(HOME_LAT, HOME_LON, st.lat * 1e-7, st.lng * 1e-7)
    en, ee = ne_offset(HOME_LAT, HOME_LON, m.lat * 1e-7, m.lon * 1e-7)
    track.append((s.tb, tn, te, en, ee, m.relative_alt / 1000, s.mode))


def summary(res: dict) -> None:
    print(res["case"], json.dumps(res.get("params")) if "params" in res else "")
    for t, sev, tx in res.get("texts", []):
        print(f"  text {t:7.2f} sev{sev} {tx}")
    print("  modes", res.get("modes"))
    tr = res.get("track", [])
    if not tr:
        return
    n0, e0 = tr[0][1], tr[0][2]
    far = max(tr, key=lambda r: math.hypot(r[1], r[2]))
    high = max(tr, key=lambda r: r[5])
    print(
        f"  max dist from home (true) {math.hypot(far[1], far[2]):.2f} m at {far[0]} s; max alt {high[5]:.2f} at {high[0]}"
    )
    err = [(r[0], math.hypot(r[1] - n0, r[2] - e0)) for r in tr]
    peak = max(err, key=lambda x: x[1])
    print(f"  max error from the first point {peak[1]:.3f} m at {peak[0]} s; last {err[-1][1]:.3f}")
    step = max(1, len(tr) // 40)
    for r in tr[::step]:
        print("   ", r)


if __name__ == "__main__":
    main()
