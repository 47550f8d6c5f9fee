#!/usr/bin/env bash
# plays the arms listed in /work/arms/queue ("run_name config code_dir" per line), one after another, 30 min each,
# then evaluates each one's final weights on both sets of 100 unseen tracks by CarRacing-v3's own rules
set -u
q=/work/arms/queue; done_list=/work/arms/queue.done; touch $done_list
while true; do
  line=$(grep -vxF -f $done_list $q | head -1)
  [ -z "$line" ] && break
  read -r name cfg dir <<< "$line"
  cd $dir
  echo "$(date -u +%FT%TZ) start $name" >> /work/arms/queue.log
  PYTHONPATH=$dir /work/venv/bin/python scripts/train.py --config $cfg --run-name $name --fresh --max-minutes 30 --seed 0 --no-status-line --save-dir $dir/save --tensorboard-dir $dir/tensorboard > $dir/$name.train.log 2>&1
  for set in 500000-500099 200000-200099; do
    PYTHONPATH=$dir /work/venv/bin/python scripts/evaluate.py --run save/$name --seeds $set --rules native --workers 2 > $dir/${name}_final_${set}_native.jsonl 2> $dir/${name}_final_${set}.err
  done
  echo "$(date -u +%FT%TZ) done $name" >> /work/arms/queue.log
  echo "$line" >> $done_list
done
