"""Item 1d/extra: from a wind run's .BIN: when SIM_WIND_SPD was logged (PARM), SIM2.As (sim airspeed) around it,
and the airspeed statistics during the GUIDED hold (turbulence). usage: wind_log.py TAG..."""
import sys, json, glob, statistics
from pymavlink import DFReader
for tag in sys.argv[1:]:
    r = json.load(open(f"/tmp/m/results/wind_{tag}.json"))
    bins = sorted(glob.glob(r["dir"] + "/logs/*.BIN"))
    f = DFReader.DFReader_binary(bins[-1], zero_time_base=True)
    parm_t = None
    sim2 = []
    xkf2 = []
    while True:
        m = f.recv_msg()
        if m is None:
            break
        t = m.get_type()
        if t == "PARM" and m.Name == "SIM_WIND_SPD" and m.Value > 0 and parm_t is None:
            parm_t = m.TimeUS / 1e6
        elif t == "SIM2":
            sim2.append((m.TimeUS / 1e6, m.As, m.VN, m.VE))
        elif t == "XKF2" and m.C == 0:
            xkf2.append((m.TimeUS / 1e6, m.VWN, m.VWE))
    if parm_t is None:
        print(tag, "no SIM_WIND_SPD PARM row"); continue
    before = [a for (t, a, *_ ) in sim2 if parm_t - 1 <= t < parm_t]
    after = [(round(t - parm_t, 3), round(a, 2)) for (t, a, *_ ) in sim2 if parm_t <= t < parm_t + 0.05][::10]
    hold = [a for (t, a, *_ ) in sim2 if parm_t + 10 <= t < parm_t + 30]
    sq = statistics.mean(hold)
    print(f"{tag}: PARM SIM_WIND_SPD logged at {parm_t:.3f}s; SIM2.As before {statistics.mean(before):.2f}; first 50 ms after: {after}")
    print(f"   hold 10-30 s after: SIM2.As mean {sq:.2f} std {statistics.pstdev(hold):.2f} min {min(hold):.2f} max {max(hold):.2f} (SPD {r['SIM_WIND_SPD']}, sqrt(10/60)*SPD = {r['SIM_WIND_SPD']*(10/60)**0.5:.2f})")
    print(f"   XKF2 VWN/VWE max abs over the flight: {max(abs(x[1]) for x in xkf2):.2f} / {max(abs(x[2]) for x in xkf2):.2f}")
