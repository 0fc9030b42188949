"""Table for item 3 from results/speedup_*.json."""
import json, glob
f = lambda x, n=2: "-" if x is None else f"{x:.{n}f}"
print("| run (--speedup) | window | wall s | ratio time_boot_ms | ratio SYSTEM_TIME unix | ratio TIMESYNC | SITL CPU (core) | load avg | 0.5 s sub-window ratios | SIM_SPEEDUP read back |")
print("|---|---|---|---|---|---|---|---|---|---|")
for fn in sorted(glob.glob("/tmp/m/results/speedup_*.json")):
    r = json.load(open(fn))
    tag = fn.split("speedup_")[1][:-5]
    for w in r["windows"]:
        pv = w.get("param_value_ack")
        ack = pv[1] if pv and pv[0] == "SIM_SPEEDUP" else ""
        if w.get("readback") is not None:
            ack = f"{w['readback']:g}"
        print(f"| {tag} ({r['boot_speedup']:g}) | {w['label']} | {w['wall']} | {f(w['ratio_boot_ms'])} | {f(w['ratio_system_time_unix'])} | {f(w['ratio_timesync'])} | "
              f"{f(w['cpu_core_frac']*100,1)}% | {w['loadavg1']:.1f} | {' '.join(str(x) for x in w['sub_ratios'])} | {ack} |")
    print(f"| {tag} | end: mode {r.get('final_mode')} alt {r.get('final_alt')} | | | | | | | | |")
