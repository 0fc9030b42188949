"""Markdown tables from results/wind_*.json (item 1)."""
import glob, json, math
rows = []
for fn in sorted(glob.glob("/tmp/m/results/wind_*.json")):
    r = json.load(open(fn))
    tag = fn.split("wind_")[1][:-5]
    rows.append((tag, r))
def f(x, n=1):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{n}f}"
def key(tr):
    tag, r = tr
    return (r["SIM_WIND_SPD"], "T1" in tag, r["SIM_WIND_DIR"], r["SIM_WIND_TURB"], tag)
rows.sort(key=key)
print("### a) hold at 10 m (GUIDED 30 s after the wind is set; LOITER 20 s)\n")
print("| run | SPD | DIR | TURB | GUIDED err max (true) m | GUIDED err mean ss (true/est) m | GUIDED tilt mean ss / max ss / max° | lean brg° (rel. to DIR) | LOITER err mean/max (true) m | LOITER tilt mean ss° | LOITER lean rel° |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for tag, r in rows:
    g = r.get("guided_hold"); l = r.get("loiter_hold")
    if not g or not l:
        print(f"| {tag} | incomplete |"); continue
    print(f"| {tag} | {r['SIM_WIND_SPD']:g} | {r['SIM_WIND_DIR']:g} | {r['SIM_WIND_TURB']:g} | {f(g['true_err_max'],2)} | {f(g['true_err_mean_ss'],2)}/{f(g['est_err_mean_ss'],2)} | "
          f"{f(g['tilt_mean_ss'])}/{f(g['tilt_max_ss'])}/{f(g['tilt_max'])} | {f(g['lean_bearing_ss'],0)} ({f(g['lean_rel_wind_from'],0)}) | "
          f"{f(l['true_err_mean_ss'],2)}/{f(l['true_err_max'],2)} | {f(l['tilt_mean_ss'])} | {f(l['lean_rel_wind_from'],0)} |")
print("\n### b) drift with sticks centred (RC override ch1-4 = 1500), 20 s sim from the mode change\n")
print("| run | SPD | DIR | TURB | ALT_HOLD disp m | ALT_HOLD avg / last-10s speed m/s | ALT_HOLD brg° (rel. downwind) | alt start→end m | STABILIZE disp m | STABILIZE avg / last-10s m/s | STABILIZE brg° (rel.) | alt start→end m |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for tag, r in rows:
    a = r.get("drift_ALT_HOLD"); s = r.get("drift_STABILIZE")
    if not a or not s:
        continue
    print(f"| {tag} | {r['SIM_WIND_SPD']:g} | {r['SIM_WIND_DIR']:g} | {r['SIM_WIND_TURB']:g} | {f(a['true_disp_m'])} | {f(a['avg_speed'],2)} / {f(a['speed_last10'],2)} | {f(a['true_disp_bearing'],0)} ({f(a['disp_bearing_rel_wind_to'],0)}) | {f(a['alt_start'])}→{f(a['alt_end'])} | "
          f"{f(s['true_disp_m'])} | {f(s['avg_speed'],2)} / {f(s['speed_last10'],2)} | {f(s['true_disp_bearing'],0)} ({f(s['disp_bearing_rel_wind_to'],0)}) | {f(s['alt_start'])}→{f(s['alt_end'])} |")
print("\n### c) GUIDED goto 100 m upwind, then 100 m back downwind (WPNAV_SPEED 1000)\n")
print("| run | SPD | DIR | TURB | upwind time s | upwind GS median (VFR_HUD / GPI) m/s | upwind VFR_HUD airspeed | upwind tilt median° | downwind time s | downwind GS median (HUD/GPI) | downwind airspeed | downwind tilt median° |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for tag, r in rows:
    u = r.get("goto_upwind"); d = r.get("goto_downwind")
    if not u or not d:
        continue
    print(f"| {tag} | {r['SIM_WIND_SPD']:g} | {r['SIM_WIND_DIR']:g} | {r['SIM_WIND_TURB']:g} | {f(u['time_sim'])} | {f(u['gs_hud_median'],2)} / {f(u['gs_gpi_median'],2)} | {f(u['as_hud_median'],2)} | {f(u['tilt_median'])} | "
          f"{f(d['time_sim'])} | {f(d['gs_hud_median'],2)} / {f(d['gs_gpi_median'],2)} | {f(d['as_hud_median'],2)} | {f(d['tilt_median'])} |")
bad = [(t, r.get("texts")) for t, r in rows]
print("\nWIND message (MAVLink 168) last seen:", {t: r.get("wind_msg") for t, r in rows[:3]})
