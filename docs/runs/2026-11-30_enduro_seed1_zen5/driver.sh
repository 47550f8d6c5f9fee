#!/bin/bash
cd /work/run200k
export PYTHONPATH=/work/run200k
date -u > /work/run200k/started.txt
/work/venv/bin/python scripts/train.py --config config_files/enduro_keep4.py --run-name enduro_1h_seed1 --fresh --max-minutes 60 --seed 1 --save-dir /work/run200k/save --tensorboard-dir /work/run200k/tb --no-status-line > /work/run200k/train.log 2>&1
echo "rc $?" >> /work/run200k/train.log
date -u > /work/run200k/ended.txt
/work/venv/bin/python scripts/evaluate.py --run save/enduro_1h_seed1 --seeds 500000-500009 --rules native --workers 2 2>/dev/null | grep -v "^A.L.E\|Powered" > /work/run200k/evaluate_final_500000-500009_native.jsonl
date -u > /work/run200k/evaluated.txt
