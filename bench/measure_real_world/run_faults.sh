#!/bin/bash
# motor failure (item 2) and faults (item 4), sequential on instance $1; each fault.py kills its own SITL
I=${1:-245}; shift
cd /tmp/m
for spec in "$@"; do
  eval "set -- $spec"
  tag=$1; shift
  [ -f results/fault_$tag.json ] && continue
  /work/main/.venv/bin/python fault.py $I $tag "$@" > results/log_fault_$tag.txt 2>&1
  echo "done $tag $?"
done
