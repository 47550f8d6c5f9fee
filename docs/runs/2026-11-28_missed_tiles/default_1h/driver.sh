#!/usr/bin/env bash
# issue 41: after the missed-tile arm, the one-hour default command with missed_road_tile_penalty = 2.0 as default,
# from a clone at that commit (/work/run1h), alone on the 2 cores; then its best/, minute-30 and final weights on
# 500000-500099 by the native rules, and best/ by the training rules
while pgrep -f "arms2.sh base" > /dev/null; do sleep 5; done
cd /work/run1h
source /work/venv/bin/activate
export PYTHONPATH=/work/run1h
git rev-parse HEAD > /work/runs/default_1h_missed_commit.txt
run=default_1h_missed
echo "$(date +%T) start $run" >> /work/runs/arms2_progress.txt
python scripts/train.py --run-name $run --fresh --max-minutes 60 --save-dir /work/runs/save --tensorboard-dir /work/runs/tb > /work/runs/$run.log 2>&1
echo "$(date +%T) end $run rc=$?" >> /work/runs/arms2_progress.txt
d=/work/runs/save/$run
python scripts/evaluate.py --weights $d/best/weights_online.torch --seeds 500000-500099 --rules native --workers 2 > $d/best_native.jsonl 2> /work/runs/$run.eval.err
echo "$(date +%T) evaluated $run best native rc=$?" >> /work/runs/arms2_progress.txt
python scripts/evaluate.py --weights $d/best/weights_online.torch --seeds 500000-500099 --rules training --workers 2 > $d/best_training.jsonl 2>> /work/runs/$run.eval.err
python scripts/evaluate.py --weights $d/at-minute-030/weights_online.torch --seeds 500000-500099 --rules native --workers 2 > $d/minute_030_native.jsonl 2>> /work/runs/$run.eval.err
python scripts/evaluate.py --run $d --seeds 500000-500099 --rules native --workers 2 > $d/final_native.jsonl 2>> /work/runs/$run.eval.err
echo "$(date +%T) evaluated $run all rc=$?" >> /work/runs/arms2_progress.txt
