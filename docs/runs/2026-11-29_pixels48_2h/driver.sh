#!/usr/bin/env bash
# issue 48 point 3: the 48 x 48 config 2 hours, seed 0, then its kept weights on both sets of 100 unseen tracks
set -u
d=/work/run_48_2h; cd $d; name=pixels48_2h_seed0
echo "$(date -u +%FT%TZ) start" >> $d/driver.log
PYTHONPATH=$d /work/venv/bin/python scripts/train.py --config config_files/arm_size48_2h.py --run-name $name --fresh --max-minutes 120 --seed 0 --no-status-line --save-dir $d/save --tensorboard-dir $d/tensorboard > $d/train.log 2>&1
echo "$(date -u +%FT%TZ) trained rc $?" >> $d/driver.log
mkdir -p $d/evaluations
for w in 120 060; do for set in 500000-500099 200000-200099; do
  PYTHONPATH=$d /work/venv/bin/python scripts/evaluate.py --weights save/$name/at-minute-$w/weights_online.torch --config save/$name/at-minute-$w/settings.json --seeds $set --rules native --workers 2 > $d/evaluations/at-minute-${w}_${set}_native.jsonl 2> $d/evaluations/at-minute-${w}_${set}.err
  echo "$(date -u +%FT%TZ) evaluated $w $set" >> $d/driver.log
done; done
for w in best; do for set in 500000-500099 200000-200099; do
  PYTHONPATH=$d /work/venv/bin/python scripts/evaluate.py --weights save/$name/best/weights_online.torch --config save/$name/best/settings.json --seeds $set --rules native --workers 2 > $d/evaluations/best_${set}_native.jsonl 2> $d/evaluations/best_${set}.err
  echo "$(date -u +%FT%TZ) evaluated best $set" >> $d/driver.log
done; done
echo "$(date -u +%FT%TZ) done" >> $d/driver.log
