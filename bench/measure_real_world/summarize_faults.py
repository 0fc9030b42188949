"""Tables for items 2 and 4 from results/fault_*.json."""
import json, glob, math, sys, re
def load(tag):
    return json.load(open(f"/tmp/m/results/fault_{tag}.json"))
def motor_row(tag):
    r = load(tag); t0 = r["t_sent_sim"]; alt0 = r.get("takeoff_alt", 10)
    S = [dict(a, t=a["t"] - t0) for a in r["samples"] if a["t"] - t0 >= 0]
    ev = r["events"]
    hit = [e for e in ev if e[1] == "TEXT" and "Hit ground" in e[2]]
    tl = [e for e in ev if e[1] == "TEXT" and "Thrust Loss" in e[2]]
    crash = [e for e in ev if e[1] == "TEXT" and ("Crash" in e[2] or "Disarm" in e[2])]
    t_hit = hit[0][0] if hit else None
    air = [a for a in S if t_hit is None or a["t"] < t_hit]
    yr = [abs(a["yawrate"]) for a in air]
    tilt = [max(abs(a["roll"]), abs(a["pitch"])) for a in air]
    alt_at = {}
    for k in (1, 2, 3, 5):
        c = [a for a in S if a["t"] >= k]
        alt_at[k] = c[0].get("alt_est") if c else None
    vz = [a.get("vz_est", 0) for a in air]
    f = lambda x, n=1: "-" if x is None else f"{x:.{n}f}"
    print(f"| {tag} | {r['post']} | {alt0:g} | {f(t_hit)} | {hit[0][2].split('at ')[1] if hit else '-'} | "
          f"{' / '.join(f(alt_at[k]) for k in (1,2,3,5))} | {f(max(vz) if vz else None)} | {f(max(yr) if yr else None,0)} | "
          f"{f(max(tilt) if tilt else None,0)} | {tl[0][0] if tl else '-'}: {tl[0][2][5:] if tl else ''} (x{len(tl)}) | {crash or 'none'} | "
          f"{[m[1] for m in r['modes_after']]} armed {r['armed_after'][-1][1]} | {round(S[-1]['t'])} |")
if sys.argv[1:2] == ["motor"]:
    print("| run | params set (in order) | hover alt m | first ground hit s | impact speed | alt at +1/+2/+3/+5 s (GPI) | max descent m/s | max yaw rate °/s (airborne) | max tilt ° (airborne) | first 'Potential Thrust Loss' s (count) | crash/disarm texts | modes / armed at end | observed s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for fn in sorted(glob.glob("/tmp/m/results/fault_motor*.json")):
        motor_row(fn.split("fault_")[1][:-5])
else:
    for tag in sys.argv[1:]:
        r = load(tag)
        print(f"#### {tag}: {r['post']} (readback {r.get('readback')}); modes {[tuple(m) for m in r['modes_after']]}")
        for e in r["events"]:
            if e[1] != "SET":
                print(f"- +{e[0]:.1f} s {e[1]} {' '.join(str(x) for x in e[2:])}")
