#!/bin/bash
# benchmark.py ray, alternated: after (the status in each handoff) and before (ed7bb79), 3 each
for i in 1 2 3; do
  for kind in after before; do
    cd /work/bench_$kind
    date -u +"%H:%M:%S start $kind $i" >> /work/diag/ab.log
    PYTHONPATH=/work/bench_$kind /work/venv/bin/python scripts/benchmark.py ray > /work/diag/ray_${kind}_run$i.jsonl 2>/work/diag/ray_${kind}_run$i.err
    echo "rc $?" >> /work/diag/ab.log
  done
done
date -u +"%H:%M:%S done" >> /work/diag/ab.log
