#!/usr/bin/env bash
# A run's learning curve from the weights it kept each minute (keep_weights_at_minutes), measured after the run so
# that the run itself is not paused for it (docs/results.md, "One GPU box"):
#
#     bash scripts/evaluate_minutes.sh RUN_DIR [WORKERS] [TEST_MINUTE]
#
# - RUN_DIR/by_minute/held_out.jsonl: each kept minute's weights on the held-out tracks 100-109 by the training
#   rules, as the learner's own held-out evaluation plays them, one line per minute in that evaluation's format
#   (`python scripts/plot_held_out.py RUN_DIR/by_minute` plots it);
# - RUN_DIR/minute_MMM_native.jsonl and _training.jsonl: the TEST_MINUTE weights (5 by default) on the 100 test
#   tracks 500000-500099 by both rules (one line per race, then the summary).
# WORKERS races at a time (default: this machine's cores). The weights' own settings.json is used (evaluate.py).
set -euo pipefail
run=${1:?usage: bash scripts/evaluate_minutes.sh RUN_DIR [WORKERS] [TEST_MINUTE]}
workers=${2:-$(nproc)}
test_minute=$(printf %03d "${3:-5}")
cd "$(dirname "$0")/.."
mkdir -p "$run/by_minute"
curve="$run/by_minute/held_out.jsonl"
: > "$curve"
for dir in "$run"/at-minute-*/; do
    name=$(basename "$dir")
    # the folder's name is data (a received run may name it anything): a number, handed over as an argument
    if [[ ! $name =~ ^at-minute-[0-9]+(\.[0-9]+)?$ ]]; then
        echo "skipped $dir: not a kept-weights folder name (at-minute-MMM)" >&2
        continue
    fi
    python scripts/evaluate.py --weights "$dir/weights_online.torch" --seeds 100-109 --rules training --workers "$workers" \
        | tail -n 1 | python -c 'import json, sys; s = json.loads(sys.stdin.read()); s["minute"] = float(sys.argv[1]); print(json.dumps(s))' \
            "${name#at-minute-}" >> "$curve"
done
weights="$run/at-minute-$test_minute/weights_online.torch"
if [ -f "$weights" ]; then
    for rules in native training; do
        python scripts/evaluate.py --weights "$weights" --seeds 500000-500099 --rules "$rules" --workers "$workers" \
            > "$run/minute_${test_minute}_$rules.jsonl"
    done
fi
echo "written: $curve"
