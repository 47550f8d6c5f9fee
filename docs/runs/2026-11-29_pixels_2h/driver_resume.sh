#!/usr/bin/env bash
cd /work/run_pixels
PYTHONPATH=/work/run_pixels /work/venv/bin/python scripts/train.py --run-name pixels_30m_seed0 --max-minutes 90 --seed 0 --no-status-line --save-dir /work/run_pixels/save --tensorboard-dir /work/run_pixels/tensorboard > /work/run_pixels/train_resume.log 2>&1
