"""Run wind.py over the matrix, N at a time, each job on a free instance (241..243).
usage: run_matrix.py [N]"""
import subprocess, sys, threading, queue, os
N = int(sys.argv[1]) if len(sys.argv) > 1 else 3
jobs = []
for rep in "ab":
    for spd in (5, 10):
        for d in (0, 90, 180):
            for turb in (0, 2):
                jobs.append([str(spd), str(d), str(turb), f"{spd}_{d}_{turb}_{rep}"])
    jobs.append(["0", "0", "0", f"0_0_0_{rep}"])
    jobs.append(["10", "0", "0", f"10_0_0_T1_{rep}", "SIM_WIND_T=1"])
q = queue.Queue()
for j in jobs:
    if not os.path.exists(f"/tmp/m/results/wind_{j[3]}.json"):
        q.put(j)
def worker(inst):
    while True:
        try:
            j = q.get_nowait()
        except queue.Empty:
            return
        with open(f"/tmp/m/results/log_{j[3]}.txt", "w") as f:
            p = subprocess.Popen([ "/work/main/.venv/bin/python", "/tmp/m/wind.py", str(inst)] + j, stdout=f, stderr=subprocess.STDOUT)
            try:
                p.wait(900)
            except subprocess.TimeoutExpired:
                p.kill(); p.wait()
        print("done", j, p.returncode, flush=True)
ts = [threading.Thread(target=worker, args=(241 + i,)) for i in range(N)]
for t in ts: t.start()
for t in ts: t.join()
