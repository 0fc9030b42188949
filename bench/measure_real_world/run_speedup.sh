#!/bin/bash
# item 3 runs, sequential on instance 247
cd /tmp/m
P=/work/main/.venv/bin/python
for rep in a b; do
  $P speedup.py 247 5 boot5_live_$rep 1 10 20 5 > results/log_speedup_boot5_$rep.txt 2>&1; echo "done boot5 $rep $?"
  $P speedup.py 247 1 boot1_$rep > results/log_speedup_boot1_$rep.txt 2>&1; echo "done boot1 $rep $?"
  $P speedup.py 247 10 boot10_$rep > results/log_speedup_boot10_$rep.txt 2>&1; echo "done boot10 $rep $?"
done
