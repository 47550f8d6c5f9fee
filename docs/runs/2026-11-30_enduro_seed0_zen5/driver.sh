#!/bin/bash
cd /work/run0seed
export PYTHONPATH=/work/run0seed
date -u > /work/run0seed/started.txt
/work/venv/bin/python scripts/train.py --config config_files/enduro_keep4.py --run-name enduro_1h_seed0 --fresh --max-minutes 60 --seed 0 --save-dir /work/run0seed/save --tensorboard-dir /work/run0seed/tb --no-status-line > /work/run0seed/train.log 2>&1
echo "rc $?" >> /work/run0seed/train.log
date -u > /work/run0seed/ended.txt
/work/venv/bin/python scripts/evaluate.py --run save/enduro_1h_seed0 --seeds 500000-500009 --rules native --workers 2 2>/dev/null | grep -v "^A.L.E\|Powered" > /work/run0seed/evaluate_final_500000-500009_native.jsonl
date -u > /work/run0seed/evaluated.txt
