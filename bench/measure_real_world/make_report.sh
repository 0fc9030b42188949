#!/bin/bash
# assembles /tmp/iss/MEASURED_WORLD.md from the narrative parts and the generated tables
cd /tmp/m
P=/work/main/.venv/bin/python
$P summarize_wind.py > results/wind_tables.md
$P summarize_faults.py motor > results/motor_table.md
$P summarize_speedup.py > results/speedup_table.md
{
  cat report_head.md
  cat report_items.md
  echo
  sed 's/^### /#### /' results/wind_tables.md | grep -v "^WIND message"
  $P - <<'PY'
s = open('/tmp/m/report_tail.md').read()
s = s.replace('MOTOR_TABLE', open('/tmp/m/results/motor_table.md').read().strip())
s = s.replace('SPEEDUP_TABLE', open('/tmp/m/results/speedup_table.md').read().strip())
print(s)
PY
} > /tmp/iss/MEASURED_WORLD.md
wc -l /tmp/iss/MEASURED_WORLD.md
