#!/usr/bin/env bash
# The figures of one GPU box (issue 28; docs/performance.md, "One GPU box"), in one go:
#
#     bash scripts/gpu_box.sh OUT [MINUTES]        # MINUTES of training, 10 by default
#
# 1. the CUDA tests (the captured-graph step against the eager one, the training thread, the network on CUDA);
# 2. `benchmark.py learner --device cuda` (graph and eager step, overhead ratios) and `benchmark.py absorb
#    --device cuda` (how many collectors' races the learner takes and learns from), both --quick;
# 3. the default training command for MINUTES on all the machine's cores (collectors_count "auto"), its online
#    weights kept at every minute (the one setting added to config_files/config.py: bookkeeping, not learning);
# 4. those weights on the held-out tracks 100-109 by the training rules, as the learner's own held-out evaluation
#    plays them (OUT/held_out.jsonl, readable by scripts/plot_held_out.py), and the minute-5 weights on the 100
#    test tracks 500000-500099 by both rules, one race per core at a time.
# OUT also gets the start-up log of the run (train.log: the precision and CUDA-graph probes, the collector count),
# nvidia-smi's and torch's versions. The run's folders (checkpoints with their buffers) stay in a temporary folder.
# A machine without package registries: put the wheels it lacks (e.g. torchrl, tensordict) in ./wheels first.
# DEVICE=cpu runs the benchmarks on the CPU (a check of this script on a machine without a GPU, not a figure); the run
# takes its device from config_files/user_config.py ("auto": the GPU when there is one).
set -euo pipefail
out=$(realpath -m "${1:?usage: bash scripts/gpu_box.sh OUT [MINUTES]}")
minutes=${2:-10}
device=${DEVICE:-cuda}
cd "$(dirname "$0")/.."
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ -d wheels ] && compgen -G "wheels/*.whl" >/dev/null; then
    python -m pip install -q --no-index --find-links wheels wheels/*.whl
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
workers=$(nproc)

{ nvidia-smi || true; python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"; } \
    > "$out/versions.txt" 2>&1
python -m pytest -q tests/agents/test_graphed_step.py tests/agents/test_iqn.py tests/learner/test_training_thread.py \
    > "$out/tests.txt" 2>&1 || echo "TESTS FAILED" >> "$out/tests.txt"
python scripts/benchmark.py learner --device "$device" --quick > "$out/learner_$device.jsonl" 2> "$out/learner_$device.err" || true
python scripts/benchmark.py absorb --device "$device" --quick > "$out/absorb_$device.jsonl" 2> "$out/absorb_$device.err" || true

config="$work/config.py"
cp config_files/config.py "$config"
echo "keep_weights_at_minutes = list(range(1, $minutes + 1))" >> "$config"
python scripts/train.py --run-name gpu_box --fresh --max-minutes "$minutes" --config "$config" \
    --save-dir "$work/save" --tensorboard-dir "$work/tb" --no-status-line > "$out/train.log" 2>&1 || echo "TRAINING FAILED: $?" >> "$out/train.log"
cp "$work/save/gpu_box/held_out.jsonl" "$out/held_out_during_training.jsonl" 2>/dev/null || true

: > "$out/held_out.jsonl"
for minute in $(seq 1 "$minutes"); do
    weights="$work/save/gpu_box/at-minute-$(printf %03d "$minute")/weights_online.torch"
    [ -f "$weights" ] || continue
    python scripts/evaluate.py --weights "$weights" --seeds 100-109 --rules training --workers "$workers" 2>/dev/null | tail -n 1 \
        | python -c "import json, sys; s = json.loads(sys.stdin.read()); s['minute'] = $minute; print(json.dumps(s))" >> "$out/held_out.jsonl"
done
five="$work/save/gpu_box/at-minute-005/weights_online.torch"
if [ -f "$five" ]; then
    for rules in native training; do
        python scripts/evaluate.py --weights "$five" --seeds 500000-500099 --rules "$rules" --workers "$workers" \
            > "$out/minute_005_$rules.jsonl" 2>/dev/null || true
    done
fi
echo "done: $out"
