#!/usr/bin/env bash
# A run's learning curve from the weights it kept each minute (keep_weights_at_minutes), measured after the run so
# that the run itself is not paused for it (docs/results.md, "One GPU box"):
#
#     bash scripts/evaluate_minutes.sh RUN_DIR [WORKERS] [TEST_MINUTE]
#
# - RUN_DIR/by_minute/held_out.jsonl: each kept minute's weights on the held-out tracks 100-109, one line per minute in
#   the format of the learner's own held-out evaluation and by its rules (the weights' settings, held_out_rules: the
#   native rules since 2026-11-28, the training rules before), or by those of HELD_OUT_RULES=native|training; a curve
#   by the native rules goes to by_minute/held_out_native.jsonl (`python scripts/plot_held_out.py RUN_DIR/by_minute
#   [--file held_out_native.jsonl]` plots it);
# - RUN_DIR/minute_MMM_native.jsonl and _training.jsonl: the TEST_MINUTE weights (5 by default) on the 100 test
#   tracks 500000-500099 by both rules (one line per race, then the summary).
# WORKERS races at a time (default: this machine's cores). The weights' own settings.json is used (evaluate.py).
set -euo pipefail
if [[ ${1:-} == -h || ${1:-} == --help ]]; then  # the comment block above is the help
    sed -n '2,/^[^#]/p' "$0" | sed -e '/^[^#]/d' -e 's/^# \{0,1\}//'
    exit 0
fi
run=${1:?usage: bash scripts/evaluate_minutes.sh RUN_DIR [WORKERS] [TEST_MINUTE]}
workers=${2:-$(nproc)}
test_minute=$(printf %03d "${3:-5}")
cd "$(dirname "$0")/.."
mkdir -p "$run/by_minute"
kept=$(compgen -G "$run/at-minute-*/settings.json" | head -n 1 || true)
if [ -z "${HELD_OUT_RULES:-}" ] && [ -n "$kept" ]; then  # the run's own rules: data, read as JSON
    HELD_OUT_RULES=$(python -c 'import json, sys; print(json.load(open(sys.argv[1])).get("held_out_rules", "training"))' "$kept")
fi
held_out_rules=${HELD_OUT_RULES:-training}
case $held_out_rules in
    training) curve="$run/by_minute/held_out.jsonl" ;;
    native) curve="$run/by_minute/held_out_native.jsonl" ;;
    *) echo "HELD_OUT_RULES=$held_out_rules: native or training" >&2; exit 2 ;;
esac
: > "$curve"
for dir in "$run"/at-minute-*/; do
    name=$(basename "$dir")
    # the folder's name is data (a received run may name it anything): a number, handed over as an argument
    if [[ ! $name =~ ^at-minute-[0-9]+(\.[0-9]+)?$ ]]; then
        echo "skipped $dir: not a kept-weights folder name (at-minute-MMM)" >&2
        continue
    fi
    python scripts/evaluate.py --weights "$dir/weights_online.torch" --seeds 100-109 --rules "$held_out_rules" --workers "$workers" \
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
