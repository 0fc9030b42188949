"""Item 3: sim-time / wall-time ratio. usage: speedup.py INST BOOT_SPEEDUP TAG [LIVE1 LIVE2 ...]
Measures the ratio over 10 s wall (ATTITUDE time_boot_ms, SYSTEM_TIME time_unix_usec, TIMESYNC tc1) while
disarmed idle right after boot, then hovering at 10 m; then for each LIVE value sets SIM_SPEEDUP in flight,
logs 0.5 s windows for 5 s wall (how fast it takes effect) and a 10 s steady window.
CPU share of the SITL process (utime+stime from /proc) per window. Writes results/speedup_<TAG>.json
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from sitl import Sitl  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / CLK


def main():
    inst, boot, tag = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    lives = [float(x) for x in sys.argv[4:]]
    s = Sitl(inst, speedup=boot)
    res = {"boot_speedup": boot, "dir": s.dir, "windows": []}
    pts = []  # (wall, tb)
    sys_t = []  # (wall, unix_usec)
    ts = []  # (wall, tc1 ns)

    def hook(msg):
        t = msg.get_type()
        now = time.time()
        if t == "ATTITUDE":
            pts.append((now, msg.time_boot_ms / 1000))
        elif t == "SYSTEM_TIME":
            sys_t.append((now, msg.time_unix_usec / 1e6, msg.time_boot_ms / 1000))
        elif t == "TIMESYNC" and msg.tc1 != 0:
            ts.append((now, msg.tc1 / 1e9))
    s.hooks.append(hook)

    def ratio(series, w0, w1):
        sel = [p for p in series if w0 <= p[0] <= w1]
        if len(sel) < 2:
            return None
        return (sel[-1][1] - sel[0][1]) / (sel[-1][0] - sel[0][0])

    def window(label, wall=10.0, sub=None):
        c0, w0 = cpu_s(s.proc.pid), time.time()
        la0 = os.getloadavg()[0]
        subs = []
        last_ts = 0.0
        while time.time() - w0 < wall:
            if time.time() - last_ts > 0.5:
                s.m.mav.timesync_send(0, int(time.time() * 1e9))
                last_ts = time.time()
            s.pump(wall=0.1)
        w1, c1 = time.time(), cpu_s(s.proc.pid)
        if sub:
            t = w0
            while t + sub <= w1 + 1e-6:
                subs.append(round(ratio(pts, t, t + sub) or -1, 2))
                t += sub
        d = {"label": label, "wall": round(w1 - w0, 2), "ratio_boot_ms": ratio(pts, w0, w1),
             "ratio_system_time_unix": ratio([(a, b) for a, b, _ in sys_t], w0, w1),
             "ratio_timesync": ratio(ts, w0, w1), "cpu_core_frac": (c1 - c0) / (w1 - w0),
             "loadavg1": la0, "mode": s.mode, "alt": s.rel_alt(), "sub_ratios": subs}
        res["windows"].append(d)
        s.log(d)
        return d

    try:
        s.pump(wall=1)
        s.set_interval(2, 2)  # SYSTEM_TIME 2 Hz
        window("idle_disarmed")
        res["SIM_SPEEDUP_readback_boot"] = s.get_param("SIM_SPEEDUP")
        res["armed_sim"] = s.wait_ready()
        res["takeoff_sim"] = s.takeoff(10)
        s.pump(sim=2)
        window("hover")
        for v in lives:
            w_set = time.time()
            tb_set = s.tb
            s.m.mav.param_set_send(1, 1, b"SIM_SPEEDUP", v, 9)
            s.last.pop("PARAM_VALUE", None)
            d = window(f"live_set_{v:g}_first5s", wall=5, sub=0.5)
            pv = s.last.get("PARAM_VALUE")
            d["param_value_ack"] = (pv.param_id, pv.param_value) if pv else None
            d["set_at_sim"] = tb_set
            d["set_at_wall"] = w_set - s.t0
            window(f"live_{v:g}_steady")
            d2 = res["windows"][-1]
            d2["readback"] = s.get_param("SIM_SPEEDUP")
        res["final_mode"] = s.mode
        res["final_alt"] = s.rel_alt()
        res["texts"] = s.texts
    finally:
        s.close()
        with open(f"/tmp/m/results/speedup_{tag}.json", "w") as f:
            json.dump(res, f, indent=1, default=str)
        print("WROTE", tag)


if __name__ == "__main__":
    main()
