"""Item 1: wind. usage: wind.py INST SPD DIR TURB [TAG] [extra k=v params]
Writes /tmp/m/results/wind_<TAG>.json
Phases (after takeoff to 10 m in no wind, hold point P recorded):
 a) set wind; GUIDED hold 30 s sim; LOITER hold 20 s sim (RC override ch1-4=1500)
 b) ALT_HOLD 20 s sim, back to P; STABILIZE 20 s sim, back to P
 c) GUIDED goto 100 m upwind of P, then back to P (100 m downwind)
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from sitl import Sitl, lean, ne_offset, offset_latlon, HOME_LAT, HOME_LON  # noqa: E402


def circ_mean(degs):
    if not degs:
        return float("nan")
    s = sum(math.sin(math.radians(d)) for d in degs)
    c = sum(math.cos(math.radians(d)) for d in degs)
    return math.degrees(math.atan2(s, c)) % 360


def rel(a, b):
    return (a - b + 180) % 360 - 180


def main():
    inst, spd, wdir, turb = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    tag = sys.argv[5] if len(sys.argv) > 5 else f"{spd:g}_{wdir:g}_{turb:g}_{inst}"
    extra = dict(kv.split("=") for kv in sys.argv[6:])
    speedup = float(extra.pop("speedup", 5))
    res = {"inst": inst, "SIM_WIND_SPD": spd, "SIM_WIND_DIR": wdir, "SIM_WIND_TURB": turb, "extra": extra,
           "speedup": speedup}
    s = Sitl(inst, speedup=speedup)
    res["dir"] = s.dir
    samples = []  # list of dicts, filled by hook while recording
    rec = {"on": False}

    def hook(msg):
        if not rec["on"]:
            return
        t = msg.get_type()
        if t == "ATTITUDE":
            tilt, brg = lean(msg.roll, msg.pitch, msg.yaw)
            samples.append({"t": s.tb, "k": "att", "tilt": tilt, "brg": brg,
                            "roll": math.degrees(msg.roll), "pitch": math.degrees(msg.pitch),
                            "yaw": math.degrees(msg.yaw) % 360})
        elif t == "SIMSTATE":
            n, e = ne_offset(HOME_LAT, HOME_LON, msg.lat * 1e-7, msg.lng * 1e-7)
            samples.append({"t": s.tb, "k": "true", "n": n, "e": e})
        elif t == "GLOBAL_POSITION_INT":
            n, e = ne_offset(HOME_LAT, HOME_LON, msg.lat * 1e-7, msg.lon * 1e-7)
            samples.append({"t": s.tb, "k": "est", "n": n, "e": e, "alt": msg.relative_alt / 1000,
                            "vn": msg.vx / 100, "ve": msg.vy / 100})
        elif t == "VFR_HUD":
            samples.append({"t": s.tb, "k": "hud", "gs": msg.groundspeed, "as": msg.airspeed})
        elif t == "WIND":
            samples.append({"t": s.tb, "k": "wind", "dir": msg.direction, "spd": msg.speed, "vz": msg.speed_z})

    s.hooks.append(hook)

    def record(sim):
        samples.clear()
        rec["on"] = True
        s.pump(sim=sim, timeout=sim * 3 + 60)
        rec["on"] = False
        return list(samples)

    def go_to_point(n, e, alt=10, tol=1.5, timeout=120):
        lat, lon = offset_latlon(HOME_LAT, HOME_LON, n, e)
        if s.mode != "GUIDED":
            s.set_mode("GUIDED")
        t0 = s.tb
        s.goto(lat, lon, alt)

        def arrived():
            p = s.est_ne()
            g = s.last.get("GLOBAL_POSITION_INT")
            return p is not None and math.hypot(p[0] - n, p[1] - e) < tol and g is not None and \
                math.hypot(g.vx, g.vy) < 100
        ok = s.pump(until=arrived, timeout=timeout)
        return ok, s.tb - t0

    try:
        res["armed_sim"] = s.wait_ready()
        for k, v in extra.items():
            res.setdefault("set", {})[k] = s.set_param(k, float(v))
        res["takeoff_done_sim"] = s.takeoff(10)
        s.rc_override = [1500, 1500, 1500, 1500, 0, 0, 0, 0]
        s.pump(sim=4)
        P = s.est_ne()
        Pt = s.true_ne()
        res["hold_point_est"] = P
        res["hold_point_true"] = Pt
        res["wind_readback"] = {}
        for k, v in (("SIM_WIND_DIR", wdir), ("SIM_WIND_TURB", turb), ("SIM_WIND_SPD", spd)):
            res["wind_readback"][k] = s.set_param(k, v)
        t_wind = s.tb
        s.log("wind set", spd, wdir, turb)

        def hold_stats(smp, t_from, ref_est, ref_true):
            est = [x for x in smp if x["k"] == "est"]
            tru = [x for x in smp if x["k"] == "true"]
            att = [x for x in smp if x["k"] == "att"]
            e_err = [math.hypot(x["n"] - ref_est[0], x["e"] - ref_est[1]) for x in est]
            t_err = [math.hypot(x["n"] - ref_true[0], x["e"] - ref_true[1]) for x in tru]
            e_err_ss = [math.hypot(x["n"] - ref_est[0], x["e"] - ref_est[1]) for x in est if x["t"] >= t_from]
            t_err_ss = [math.hypot(x["n"] - ref_true[0], x["e"] - ref_true[1]) for x in tru if x["t"] >= t_from]
            att_ss = [x for x in att if x["t"] >= t_from]
            tilt = [x["tilt"] for x in att_ss]
            brg = circ_mean([x["brg"] for x in att_ss if x["tilt"] > 0.5])
            alts = [x["alt"] for x in est]
            winds = [x for x in smp if x["k"] == "wind"]
            hud = [x for x in smp if x["k"] == "hud" and x["t"] >= t_from]
            out = {
                "est_err_max": max(e_err) if e_err else None,
                "true_err_max": max(t_err) if t_err else None,
                "est_err_mean_ss": statistics.mean(e_err_ss) if e_err_ss else None,
                "true_err_mean_ss": statistics.mean(t_err_ss) if t_err_ss else None,
                "true_err_max_ss": max(t_err_ss) if t_err_ss else None,
                "tilt_mean_ss": statistics.mean(tilt) if tilt else None,
                "tilt_max": max(x["tilt"] for x in att) if att else None,
                "tilt_max_ss": max(tilt) if tilt else None,
                "lean_bearing_ss": brg,
                "lean_rel_wind_from": rel(brg, wdir) if not math.isnan(brg) else None,
                "roll_mean_ss": statistics.mean(x["roll"] for x in att_ss) if att_ss else None,
                "pitch_mean_ss": statistics.mean(x["pitch"] for x in att_ss) if att_ss else None,
                "yaw_mean_ss": circ_mean([x["yaw"] for x in att_ss]),
                "alt_min": min(alts) if alts else None, "alt_max": max(alts) if alts else None,
                "wind_msg_last": winds[-1] if winds else None,
                "hud_gs_mean_ss": statistics.mean(x["gs"] for x in hud) if hud else None,
                "hud_as_mean_ss": statistics.mean(x["as"] for x in hud) if hud else None,
            }
            return out

        # a) GUIDED hold
        smp = record(30)
        res["guided_hold"] = hold_stats(smp, t_wind + 10, P, Pt)
        s.log("guided hold", res["guided_hold"])
        # LOITER hold
        P2, P2t = s.est_ne(), s.true_ne()
        s.set_mode("LOITER")
        t_l = s.tb
        smp = record(20)
        res["loiter_hold"] = hold_stats(smp, t_l + 5, P2, P2t)
        res["loiter_hold"]["entry_point_est"] = P2
        s.log("loiter hold", res["loiter_hold"])
        # back to P
        ok, dt = go_to_point(*P)
        res["return1"] = [ok, dt]

        # b) drift in ALT_HOLD and STABILIZE
        for mode in ("ALT_HOLD", "STABILIZE"):
            start_t = s.true_ne()
            start_e = s.est_ne()
            s.set_mode(mode)
            t_m = s.tb
            smp = record(20)
            tru = [x for x in smp if x["k"] == "true"]
            est = [x for x in smp if x["k"] == "est"]
            att = [x for x in smp if x["k"] == "att"]
            end = (tru[-1]["n"], tru[-1]["e"])
            dn, de = end[0] - start_t[0], end[1] - start_t[1]
            dur = tru[-1]["t"] - t_m
            # steady speed over the last 10 s
            last10 = [x for x in tru if x["t"] >= tru[-1]["t"] - 10]
            sn, se = last10[-1]["n"] - last10[0]["n"], last10[-1]["e"] - last10[0]["e"]
            sdur = last10[-1]["t"] - last10[0]["t"]
            vel = [math.hypot(x["vn"], x["ve"]) for x in est if x["t"] >= est[-1]["t"] - 2]
            d = {
                "dur_sim": dur, "true_disp_m": math.hypot(dn, de),
                "true_disp_bearing": math.degrees(math.atan2(de, dn)) % 360,
                "disp_bearing_rel_wind_to": rel(math.degrees(math.atan2(de, dn)) % 360, (wdir + 180) % 360),
                "avg_speed": math.hypot(dn, de) / dur if dur else None,
                "speed_last10": math.hypot(sn, se) / sdur if sdur else None,
                "bearing_last10": math.degrees(math.atan2(se, sn)) % 360,
                "est_speed_end": statistics.mean(vel) if vel else None,
                "est_disp_m": math.hypot(est[-1]["n"] - start_e[0], est[-1]["e"] - start_e[1]),
                "alt_start": est[0]["alt"], "alt_end": est[-1]["alt"],
                "tilt_mean": statistics.mean(x["tilt"] for x in att) if att else None,
                "tilt_max": max(x["tilt"] for x in att) if att else None,
            }
            res[f"drift_{mode}"] = d
            s.log("drift", mode, d)
            ok, dt = go_to_point(*P, timeout=240)
            res[f"return_{mode}"] = [ok, dt]

        # c) goto upwind and downwind
        ur = math.radians(wdir)
        U = (P[0] + 100 * math.cos(ur), P[1] + 100 * math.sin(ur))
        for leg, (tn, te) in (("upwind", U), ("downwind", P)):
            start = s.est_ne()
            samples.clear()
            rec["on"] = True
            ok, dt = go_to_point(tn, te, timeout=240)
            rec["on"] = False
            smp = list(samples)
            hud = []
            total = math.hypot(tn - start[0], te - start[1])
            est = [x for x in smp if x["k"] == "est"]
            # cruise: where 20%..80% of the way
            cruise_t = [x["t"] for x in est
                        if 0.2 * total <= math.hypot(x["n"] - start[0], x["e"] - start[1]) <= 0.8 * total]
            if cruise_t:
                t1, t2 = min(cruise_t), max(cruise_t)
                hud = [x for x in smp if x["k"] == "hud" and t1 <= x["t"] <= t2]
                att = [x for x in smp if x["k"] == "att" and t1 <= x["t"] <= t2]
                ev = [math.hypot(x["vn"], x["ve"]) for x in est if t1 <= x["t"] <= t2]
            else:
                att, ev = [], []
            d = {"ok": ok, "time_sim": dt, "dist": total,
                 "gs_hud_median": statistics.median(x["gs"] for x in hud) if hud else None,
                 "as_hud_median": statistics.median(x["as"] for x in hud) if hud else None,
                 "gs_gpi_median": statistics.median(ev) if ev else None,
                 "gs_gpi_max": max((math.hypot(x["vn"], x["ve"]) for x in est), default=None),
                 "tilt_median": statistics.median(x["tilt"] for x in att) if att else None,
                 "tilt_max": max((x["tilt"] for x in smp if x["k"] == "att"), default=None)}
            res[f"goto_{leg}"] = d
            s.log("goto", leg, d)
        res["texts"] = s.texts
        res["modes"] = s.modes
        res["msg_types"] = sorted(s.last)
        res["wind_msg"] = str(s.last.get("WIND"))
    finally:
        res["wall"] = time.time() - s.t0
        s.close()
        os.makedirs("/tmp/m/results", exist_ok=True)
        with open(f"/tmp/m/results/wind_{tag}.json", "w") as f:
            json.dump(res, f, indent=1, default=str)
        print("WROTE", tag)


if __name__ == "__main__":
    main()
