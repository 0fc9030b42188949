"""Item 1d: which log messages/fields of a SITL .BIN carry wind. usage: logscan.py BIN [SPD DIR]"""
import sys, collections, math
from pymavlink import DFReader
f = DFReader.DFReader_binary(sys.argv[1], zero_time_base=True)
counts = collections.Counter()
fmts = {}
keep = collections.defaultdict(list)
while True:
    m = f.recv_msg()
    if m is None:
        break
    t = m.get_type()
    counts[t] += 1
    if t not in fmts:
        fmts[t] = m.get_fieldnames()
    if t in ("XKF2", "SIM", "SIM2", "NKF2", "WIND", "SITL", "DCM") or t.startswith("SIM") or (t == "PARM" and m.Name.startswith("SIM_WIND")):
        keep[t].append(m.to_dict())
print("types:", dict(sorted(counts.items())))
for t in sorted(fmts):
    if any(w in ",".join(fmts[t]).upper() for w in ("WN", "WE", "WIND", "VWN")) or t.startswith(("SIM", "XKF2")):
        print(t, fmts[t])
for t, rows in keep.items():
    if not rows:
        continue
    print("==", t, len(rows))
    for r in rows[:: max(1, len(rows) // 8)][:10]:
        print("  ", {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items() if k != "mavpackettype"})
