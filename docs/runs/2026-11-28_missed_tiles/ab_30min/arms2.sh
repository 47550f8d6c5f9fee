#!/usr/bin/env bash
# issue 41 point 2, session of 2026-11-28 afternoon: arms against the default, 30 minutes each, seed 1, one after the
# other on this session's 2 cores; each run's minute-30 weights on 500000-500099 by the native rules right after it.
# An arm whose config is not there when its turn comes falls back to the next name given.
cd /work/main
source /work/venv/bin/activate
git rev-parse HEAD > /work/runs/arms2_commit.txt
for arm in "$@"; do
  [ -f /work/runs/arm_$arm.py ] || { echo "$(date +%T) no config for $arm: skipped" >> /work/runs/arms2_progress.txt; continue; }
  run=a2_${arm}_s1
  echo "$(date +%T) start $run" >> /work/runs/arms2_progress.txt
  python scripts/train.py --run-name $run --fresh --max-minutes 30 --seed 1 --config /work/runs/arm_$arm.py \
      --save-dir /work/runs/save --tensorboard-dir /work/runs/tb > /work/runs/$run.log 2>&1
  echo "$(date +%T) end $run rc=$?" >> /work/runs/arms2_progress.txt
  python scripts/evaluate.py --weights /work/runs/save/$run/at-minute-030/weights_online.torch --seeds 500000-500099 \
      --rules native --workers 2 > /work/runs/save/$run/minute_030_native.jsonl 2> /work/runs/$run.eval.err
  echo "$(date +%T) evaluated $run rc=$? $(tail -c 400 /work/runs/save/$run/minute_030_native.jsonl)" >> /work/runs/arms2_progress.txt
done
