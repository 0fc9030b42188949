"""Items 2 and 4: hover in GUIDED at 10 m, set PARAM=VALUE (in order), record DUR sim s.
usage: fault.py INST TAG DUR [takeoff=ALT] P1=V1 [P2=V2 ...]   (prefix a param with 'pre:' to set it before arming)
Writes results/fault_<TAG>.json with a timeline of events (texts, mode, armed, EKF flags, SYS_STATUS
health bits, GPS fix) and 1 Hz samples (alt est/true, roll, pitch, yaw, yaw rate, position).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from sitl import Sitl, ne_offset, HOME_LAT, HOME_LON  # noqa: E402

EKF_BITS = ["ATTITUDE", "VELOCITY_HORIZ", "VELOCITY_VERT", "POS_HORIZ_REL", "POS_HORIZ_ABS", "POS_VERT_ABS",
            "POS_VERT_AGL", "CONST_POS_MODE", "PRED_POS_HORIZ_REL", "PRED_POS_HORIZ_ABS", "UNINITIALIZED",
            "B11", "B12", "B13", "B14", "GPS_GLITCH"]
SENS = {0: "GYRO", 1: "ACCEL", 2: "MAG", 3: "BARO", 5: "GPS", 10: "ANG_RATE", 11: "ATT_STAB", 12: "YAW_POS",
        13: "Z_ALT", 14: "XY_POS", 15: "MOTORS", 16: "RC_RX", 21: "AHRS", 22: "TERRAIN", 25: "LOGGING",
        26: "BATTERY", 28: "EKF"}


def main():
    inst, tag, dur = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    pairs = [a.split("=") for a in sys.argv[4:]]
    takeoff = float(dict(pairs).get("takeoff", 10))
    pairs = [p for p in pairs if p[0] != "takeoff"]
    pre = [(k[4:], float(v)) for k, v in pairs if k.startswith("pre:")]
    post = [(k, float(v)) for k, v in pairs if not k.startswith("pre:")]
    speedup = 5
    res = {"inst": inst, "tag": tag, "pre": pre, "post": post}
    s = Sitl(inst, speedup=speedup)
    res["dir"] = s.dir
    events = []
    samples = []
    state = {"rec": False, "ekf": None, "health": None, "fix": None, "next": 0.0, "land": None}

    def hook(msg):
        if not state["rec"]:
            return
        t = msg.get_type()
        if t == "EKF_STATUS_REPORT":
            if state["ekf"] is not None and msg.flags != state["ekf"]:
                ch = msg.flags ^ state["ekf"]
                events.append((s.tb, "EKF", f"flags {state['ekf']:#x}->{msg.flags:#x}",
                               {EKF_BITS[i]: (msg.flags >> i) & 1 for i in range(16) if ch >> i & 1},
                               {"vel_var": round(msg.velocity_variance, 2), "pos_var": round(msg.pos_horiz_variance, 2),
                                "hgt_var": round(msg.pos_vert_variance, 2), "mag_var": round(msg.compass_variance, 2)}))
            state["ekf"] = msg.flags
            state["ekf_msg"] = msg
        elif t == "SYS_STATUS":
            h = (msg.onboard_control_sensors_present, msg.onboard_control_sensors_enabled,
                 msg.onboard_control_sensors_health)
            if state["health"] is not None and h != state["health"]:
                d = {}
                for i, name in SENS.items():
                    old = tuple((x >> i) & 1 for x in state["health"])
                    new = tuple((x >> i) & 1 for x in h)
                    if old != new:
                        d[name] = f"{old}->{new} (present,enabled,healthy)"
                if d:
                    events.append((s.tb, "SYS_STATUS", d))
            state["health"] = h
        elif t == "GPS_RAW_INT":
            if state["fix"] is not None and msg.fix_type != state["fix"]:
                events.append((s.tb, "GPS_FIX", f"{state['fix']}->{msg.fix_type} sats {msg.satellites_visible}"))
            state["fix"] = msg.fix_type
        elif t == "EXTENDED_SYS_STATE":
            if state["land"] is not None and msg.landed_state != state["land"]:
                events.append((s.tb, "LANDED_STATE", f"{state['land']}->{msg.landed_state}"))
            state["land"] = msg.landed_state
        elif t == "STATUSTEXT":
            events.append((s.tb, "TEXT", f"sev{msg.severity} {msg.text}"))
        elif t == "HEARTBEAT" and msg.get_srcComponent() == 1 and msg.type != 6:
            pass
        if t == "ATTITUDE":
            a = {"t": round(s.tb, 2), "roll": math.degrees(msg.roll), "pitch": math.degrees(msg.pitch),
                 "yaw": math.degrees(msg.yaw) % 360, "yawrate": math.degrees(msg.yawspeed)}
            g = s.last.get("GLOBAL_POSITION_INT")
            st = s.last.get("SIMSTATE")
            if g:
                a["alt_est"] = g.relative_alt / 1000
                a["est_ne"] = ne_offset(HOME_LAT, HOME_LON, g.lat * 1e-7, g.lon * 1e-7)
                a["vz_est"] = g.vz / 100
            if st:
                a["true_ne"] = ne_offset(HOME_LAT, HOME_LON, st.lat * 1e-7, st.lng * 1e-7)
                pass  # SIMSTATE has no altitude
            gp = s.last.get("GPS_RAW_INT")
            if gp:
                a["gps_ne"] = ne_offset(HOME_LAT, HOME_LON, gp.lat * 1e-7, gp.lon * 1e-7)
                a["gps_fix"] = gp.fix_type
            ss = s.last.get("SYS_STATUS")
            if ss:
                a["volt"] = ss.voltage_battery / 1000
            a["mode"] = s.mode
            a["armed"] = s.armed
            samples.append(a)

    s.hooks.append(hook)
    mode_mark = {"n": 0}
    try:
        s.pump(wall=1)
        for k, v in pre:
            res.setdefault("pre_readback", {})[k] = s.set_param(k, v)
        res["armed_sim"] = s.wait_ready()
        res["takeoff_sim"] = s.takeoff(takeoff)
        res["takeoff_alt"] = takeoff
        s.pump(sim=5)
        mode_mark["n"] = len(s.modes)
        arm_mark = len(s.armed_log)
        state["rec"] = True
        s.pump(sim=2)
        t0 = s.tb
        res["t0_sim"] = t0
        res["readback"] = {}
        for k, v in post:
            s.m.mav.param_set_send(1, 1, k.encode(), v, 9)
        res["t_sent_sim"] = s.tb
        events.append((s.tb, "SET", post))
        s.pump(sim=dur, timeout=dur * 4 + 60, until=lambda: s.proc.poll() is not None)
        for k, v in post:
            res["readback"][k] = s.get_param(k)
        state["rec"] = False
        res["modes_after"] = s.modes[mode_mark["n"] - 1:]
        res["armed_after"] = s.armed_log[arm_mark - 1:]
    finally:
        res["events"] = [(round(e[0] - res.get("t_sent_sim", 0), 2),) + tuple(e[1:]) for e in events]
        res["samples"] = samples
        res["texts_all"] = s.texts
        res["wall"] = time.time() - s.t0
        s.close()
        os.makedirs("/tmp/m/results", exist_ok=True)
        with open(f"/tmp/m/results/fault_{tag}.json", "w") as f:
            json.dump(res, f, indent=0, default=str)
        print("WROTE", tag)


if __name__ == "__main__":
    main()
