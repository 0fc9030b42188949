"""Item 1b detail: true ground speed (log SIM2 VN/VE) and tilt (SIM Roll/Pitch) at +t s after the switch to
ALT_HOLD / STABILIZE, from a wind run's .BIN. usage: drift_curve.py TAG..."""
import sys, json, glob, math
from pymavlink import DFReader
for tag in sys.argv[1:]:
    r = json.load(open(f"/tmp/m/results/wind_{tag}.json"))
    f = DFReader.DFReader_binary(sorted(glob.glob(r["dir"] + "/logs/*.BIN"))[-1], zero_time_base=True)
    modes = []; sim2 = []; sim = []
    while True:
        m = f.recv_msg()
        if m is None: break
        t = m.get_type()
        if t == "MODE": modes.append((m.TimeUS/1e6, m.Mode))
        elif t == "SIM2": sim2.append((m.TimeUS/1e6, m.VN, m.VE, m.PD))
        elif t == "SIM": sim.append((m.TimeUS/1e6, m.Roll, m.Pitch))
    for mode_num, name in ((2, "ALT_HOLD"), (0, "STABILIZE")):
        ts = [t for t, mm in modes if mm == mode_num and t > 45]
        if not ts: continue
        t0 = ts[0]
        out = []
        for dt in (0.5, 1, 2, 3, 5, 10, 15, 19.5):
            a = min(sim2, key=lambda x: abs(x[0] - t0 - dt))
            b = min(sim, key=lambda x: abs(x[0] - t0 - dt))
            out.append(f"+{dt:g}s {math.hypot(a[1], a[2]):.2f}m/s alt {-a[3]:.1f} tilt {math.hypot(b[1], b[2]):.1f}")
        print(f"{tag} {name}: " + "; ".join(out))
