#!/usr/bin/env bash
# issue 40 point 5: the default command with "fast" against "pygame", 2 seeds each, 30 minutes, runs alternated
cd /work/main
source /work/venv/bin/activate
for seed in 1 2; do
  for r in fast pygame; do
    echo "$(date +%T) start ab_${r}_s${seed}" >> /work/runs/ab_progress.txt
    python scripts/train.py --run-name ab_${r}_s${seed} --fresh --max-minutes 30 --seed $seed --config /work/runs/ab_$r.py \
        --save-dir /work/runs/save --tensorboard-dir /work/runs/tb > /work/runs/ab_${r}_s${seed}.log 2>&1
    echo "$(date +%T) end ab_${r}_s${seed} rc=$?" >> /work/runs/ab_progress.txt
  done
done
for seed in 1 2; do
  for r in fast pygame; do
    bash scripts/evaluate_minutes.sh /work/runs/save/ab_${r}_s${seed} 2 30 > /work/runs/eval_${r}_s${seed}.log 2>&1
    echo "$(date +%T) evaluated ab_${r}_s${seed} rc=$?" >> /work/runs/ab_progress.txt
  done
done
