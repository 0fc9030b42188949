"""Print a fault_<tag>.json: events timeline and 1 Hz samples."""
import json, sys, math
for tag in sys.argv[1:]:
    r = json.load(open(f"/tmp/m/results/fault_{tag}.json"))
    t0 = r.get("t_sent_sim", 0)
    print("==", tag, "pre", r["pre"], "post", r["post"], "readback", r.get("readback"), "wall", round(r["wall"],1))
    print("modes", r.get("modes_after"), "armed", r.get("armed_after"))
    for e in r["events"]:
        print("  ", e)
    last = -99
    for a in r["samples"]:
        t = a["t"] - t0
        if t - last >= 1.0 or t < 3 and t - last >= 0.25:
            last = t
            tn = a.get("true_ne"); en = a.get("est_ne"); gn = a.get("gps_ne")
            print(f"   t{t:6.2f} alt {a.get('alt_est',float('nan')):6.2f} vz {a.get('vz_est',0):5.1f} r {a['roll']:6.1f} p {a['pitch']:6.1f} y {a['yaw']:5.0f} yr {a['yawrate']:7.1f} "
                  f"true {tn[0]:6.1f},{tn[1]:6.1f} est {en[0]:6.1f},{en[1]:6.1f} gps {gn[0]:6.1f},{gn[1]:6.1f} fix {a.get('gps_fix')} V {a.get('volt',0):.2f} {a['mode']} {'A' if a['armed'] else 'D'}")
