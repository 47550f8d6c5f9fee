#!/usr/bin/env bash
# issue 51 point 2: the one-hour default command with seed 1 (the shipped model's run had seed 0), from a clone at
# this commit (/work/run1h), alone on the 2 cores; then its best/, minute-30 and final weights on 500000-500099 by
# the native rules, and best/ by the training rules
cd /work/run1h
source /work/venv/bin/activate
export PYTHONPATH=/work/run1h
git rev-parse HEAD > /work/runs/default_1h_seed1_commit.txt
run=default_1h_seed1
echo "$(date +%T) start $run" >> /work/runs/progress.txt
python scripts/train.py --run-name $run --fresh --max-minutes 60 --seed 1 --save-dir /work/runs/save --tensorboard-dir /work/runs/tb > /work/runs/$run.log 2>&1
echo "$(date +%T) end $run rc=$?" >> /work/runs/progress.txt
d=/work/runs/save/$run
python scripts/evaluate.py --weights $d/best/weights_online.torch --seeds 500000-500099 --rules native --workers 2 > $d/best_native.jsonl 2> /work/runs/$run.eval.err
echo "$(date +%T) evaluated $run best native rc=$?" >> /work/runs/progress.txt
python scripts/evaluate.py --weights $d/best/weights_online.torch --seeds 500000-500099 --rules training --workers 2 > $d/best_training.jsonl 2>> /work/runs/$run.eval.err
python scripts/evaluate.py --weights $d/at-minute-030/weights_online.torch --seeds 500000-500099 --rules native --workers 2 > $d/minute_030_native.jsonl 2>> /work/runs/$run.eval.err
python scripts/evaluate.py --run $d --seeds 500000-500099 --rules native --workers 2 > $d/final_native.jsonl 2>> /work/runs/$run.eval.err
echo "$(date +%T) evaluated $run all rc=$?" >> /work/runs/progress.txt
