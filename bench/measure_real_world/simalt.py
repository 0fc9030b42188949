"""True altitude (log SIM.Alt - 584) and EKF alt (XKF1 PD) after a fault was set. usage: simalt.py TAG"""
import sys, json, glob
from pymavlink import DFReader
tag = sys.argv[1]
r = json.load(open(f"/tmp/m/results/fault_{tag}.json"))
f = DFReader.DFReader_binary(sorted(glob.glob(r["dir"] + "/logs/*.BIN"))[-1], zero_time_base=True)
t0 = r["t_sent_sim"]
last = -99; pd = None; baro = None
while True:
    m = f.recv_msg()
    if m is None: break
    t = m.get_type()
    if t == "XKF1" and m.C == 0: pd = m.PD
    if t == "BARO" and m.I == 0: baro = m.Alt
    if t == "SIM":
        ts = m.TimeUS / 1e6 - t0
        if ts > -2 and ts - last >= 2:
            last = ts
            print(f"t {ts:6.1f} true alt {m.Alt-584:7.2f} EKF -PD {(-pd if pd is not None else float('nan')):7.2f} baro0 {baro}")
