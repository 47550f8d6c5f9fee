#!/usr/bin/env bash
# every kept weights of the 2-hour pixels run on the validation tracks 200000-200099 (to choose) and the test tracks
# 500000-500099 (to report), CarRacing-v3's own rules
set -u
cd /work/run_pixels
out=/work/arms/pixels_eval; mkdir -p $out
run=save/pixels_30m_seed0
for name in at-minute-030 at-minute-060 at-minute-090 at-minute-120 best; do
  [ -f $run/$name/weights_online.torch ] || { echo "no $name" >&2; continue; }
  for set in 200000-200099 500000-500099; do
    PYTHONPATH=/work/run_pixels /work/venv/bin/python scripts/evaluate.py --weights $run/$name/weights_online.torch --config $run/$name/settings.json --seeds $set --rules native --workers 2 > $out/${name}_${set}_native.jsonl 2> $out/${name}_${set}.err
  done
done
for set in 200000-200099 500000-500099; do
  PYTHONPATH=/work/run_pixels /work/venv/bin/python scripts/evaluate.py --run $run --seeds $set --rules native --workers 2 > $out/final_${set}_native.jsonl 2> $out/final_${set}.err
done
echo done > $out/done
