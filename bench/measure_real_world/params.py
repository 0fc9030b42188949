"""PARAM_REQUEST_LIST on a fresh SITL; writes results/params.json and prints the SIM_*/MOT_*/fault params.
usage: params.py INST"""
import json, os, re, sys
sys.path.insert(0, os.path.dirname(__file__))
from sitl import Sitl
s = Sitl(int(sys.argv[1]) if len(sys.argv) > 1 else 244, speedup=5, verbose=False)
try:
    s.pump(wall=2)
    p = s.all_params()
finally:
    s.close()
json.dump(p, open("/tmp/m/results/params.json", "w"), indent=0, sort_keys=True)
print("count", len(p))
pat = re.compile(r"^(SIM_(WIND|ENGINE|GPS1?_|GPS_|MAG|BARO|BATT|RC|SPEEDUP|ESC|MOT|THR|FLOW|IMU|ACC|GYR|ARSPD|TEMP|VIB|DRIFT|WOW|SONAR|RATE|OPOS|LOOP|TIME)|MOT_|FS_|CRASH|THRUST|EK3_SRC|AHRS_)")
for k in sorted(p):
    if pat.match(k):
        print(k, p[k])
