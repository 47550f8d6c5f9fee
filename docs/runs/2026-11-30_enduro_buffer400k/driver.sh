#!/bin/bash
cd /work/run400k
export PYTHONPATH=/work/run400k
date -u > /work/run400k/started.txt
/work/venv/bin/python scripts/train.py --config config_files/enduro_buffer400k.py --run-name enduro400k_1h_seed1 --fresh --max-minutes 60 --seed 1 --save-dir /work/run400k/save --tensorboard-dir /work/run400k/tb --no-status-line > /work/run400k/train.log 2>&1
echo "rc $?" >> /work/run400k/train.log
date -u > /work/run400k/ended.txt
