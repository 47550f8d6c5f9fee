#!/usr/bin/env bash
# after the 2-hour run and its evaluations: the other kept weights evaluated, then benchmark.py ray three times on
# the quiet cores (issue 49 point 2)
set -u
d=/work/bench49; r=/work/run_48_2h; name=pixels48_2h_seed0
until grep -q " done" $r/driver.log 2>/dev/null; do sleep 20; done
cd $r
for w in at-minute-030 at-minute-090; do for set in 500000-500099 200000-200099; do
  PYTHONPATH=$r /work/venv/bin/python scripts/evaluate.py --weights save/$name/$w/weights_online.torch --config save/$name/$w/settings.json --seeds $set --rules native --workers 2 > $r/evaluations/${w}_${set}_native.jsonl 2> $r/evaluations/${w}_${set}.err
done; done
for set in 500000-500099 200000-200099; do
  PYTHONPATH=$r /work/venv/bin/python scripts/evaluate.py --run save/$name --seeds $set --rules native --workers 2 > $r/evaluations/final_${set}_native.jsonl 2> $r/evaluations/final_${set}.err
done
echo "$(date -u +%FT%TZ) evaluations of 030, 090, final done" >> $r/driver.log
