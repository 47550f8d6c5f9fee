#!/usr/bin/env bash
# seed 1 of the Enduro recipe, started as soon as seed 0's hour ends (the same code: this folder, PYTHONPATH)
while kill -0 2061 2>/dev/null; do sleep 5; done
cd /work/run_enduro
PYTHONPATH=/work/run_enduro /work/venv/bin/python scripts/train.py --config config_files/enduro.py --run-name enduro_1h_seed1 --fresh --max-minutes 60 --seed 1 --no-status-line --save-dir /work/run_enduro/save --tensorboard-dir /work/run_enduro/tensorboard > /work/run_enduro/train_seed1.log 2>&1
