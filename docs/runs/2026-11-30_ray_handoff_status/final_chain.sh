#!/bin/bash
# wait for the CI run to end, then benchmark.py ray 3 times on HEAD 57fd287
while ! grep -q "^rc " /work/ci3.log; do sleep 5; done
cd /work/bench_final
for i in 1 2 3; do
  date -u +"%H:%M:%S start final $i" >> /work/diag/final.log
  PYTHONPATH=/work/bench_final /work/venv/bin/python scripts/benchmark.py ray > /work/diag/ray_final_run$i.jsonl 2>/work/diag/ray_final_run$i.err
  echo "rc $?" >> /work/diag/final.log
done
date -u +"%H:%M:%S done" >> /work/diag/final.log
