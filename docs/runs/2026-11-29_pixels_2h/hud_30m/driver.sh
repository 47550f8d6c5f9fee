#!/usr/bin/env bash
cd /work/run_hud
PYTHONPATH=/work/run_hud /work/venv/bin/python scripts/train.py --config config_files/carracing_pixels_hud.py --run-name pixels_hud_30m_seed0 --fresh --max-minutes 30 --seed 0 --no-status-line --save-dir /work/run_hud/save --tensorboard-dir /work/run_hud/tensorboard > /work/run_hud/train.log 2>&1
PYTHONPATH=/work/run_hud /work/venv/bin/python scripts/evaluate.py --run save/pixels_hud_30m_seed0 --seeds 500000-500099 --rules native --workers 2 > /work/run_hud/final_500000-500099_native.jsonl 2> /work/run_hud/final_eval.err
echo done > /work/run_hud/eval_done
