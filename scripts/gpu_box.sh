#!/usr/bin/env bash
# The figures of one GPU box (issue 28; docs/performance.md and docs/results.md, "One GPU box"), in one go:
#
#     bash scripts/gpu_box.sh OUT [MINUTES]        # MINUTES of training, 5 by default
#
# 1. the CUDA tests (the captured-graph step against the eager one, its probe, the training thread);
# 2. the default training command on all the machine's cores (collectors_count "auto", the device "auto") for
#    MINUTES and 12 s (so that the minute-MINUTES weights are kept before the stop), its online weights kept at every
#    minute (the one setting added to config_files/config.py: bookkeeping, not learning). OUT/run.tar.gz holds the
#    run's log, its TensorBoard events and its last checkpoint's stats.json (logs/), and save/gpu_box: held_out.jsonl
#    and the kept weights (data only: not its buffers, nor its live config, token or lock); over 15 MiB (a 10-minute
#    run) it comes as parts run.tar.gz.00, .01, ...;
# 3. `benchmark.py learner --device cuda --quick` (graph and eager step, overhead ratios, the step by batch size)
#    and `benchmark.py absorb --device cuda --quick` (how many collectors' races the learner takes and learns from);
# 4. unless SKIP_EVALUATION=1: scripts/evaluate_minutes.sh on the kept weights (the held-out curve by minute, the
#    minute-5 weights on the 100 test tracks). Evaluation needs no GPU: a short device lease skips it and runs it
#    after unpacking run.tar.gz anywhere, with the same script.
# Every step has a time limit and the script goes on after a failed one (its output says which); OUT also gets
# nvidia-smi's and torch's versions and the tests' output.
# A device call lasts at most 10 minutes: WAIT_S=N makes the script wait at most N s for the run and exit 3 if it is
# still going (it goes on, detached, in GPU_BOX_WORK, /tmp/gpu_box_run by default); the same command again, while the
# machine is still held, waits for it and does steps 2-4. E.g. a 10-minute run: `WAIT_S=540 bash scripts/gpu_box.sh
# OUT 10`, then at once the same command again.
# A machine without package registries: put the wheels it lacks (torchrl, tensordict, gymnasium, Box2D and their
# small dependencies) in ./.whl first (`bash scripts/device_wheels.sh` fetches them: docs/gpu-box.md); they are
# installed into /tmp/site, beside the machine's own torch.
# SKIP_TESTS=1 skips step 1, STOP_ON_TEST_FAILURE=1 stops there (exit 4) if a test fails; BENCHMARKS names the suites of step 3 ("absorb learner" by default); CONFIG_LINES is
# appended to the run's config (an arm of a comparison, e.g. CONFIG_LINES='batch_size = 256'; the default run has none);
# TRAIN_ARGS is added to train.py's command line (e.g. TRAIN_ARGS='--learners 4' for issue 29's runs, with
# CUDA_VISIBLE_DEVICES= DEVICE=cpu for a CPU-only box; docs/cluster.md).
# DEVICE=cpu runs the benchmarks on the CPU (a check of this script on a machine without a GPU, not a figure).
# CONFIG=FILE trains another config file than config_files/config.py, e.g. CONFIG=config_files/enduro.py (issue 50
# point 5; step 3's suites measure CarRacing's learner whatever the run's config). Step 4 measures CarRacing's tracks
# only: for a run of another game it is skipped, and its curve is its episodes.jsonl, in run.tar.gz (plot_enduro.py).
set -uo pipefail
if [[ ${1:-} == -h || ${1:-} == --help ]]; then  # the comment block above is the help
    sed -n '2,/^[^#]/p' "$0" | sed -e '/^[^#]/d' -e 's/^# \{0,1\}//'
    exit 0
fi
out=$(realpath -m "${1:?usage: bash scripts/gpu_box.sh OUT [MINUTES]}")
minutes=${2:-5}
device=${DEVICE:-cuda}
config=$(realpath -m "${CONFIG:-$(dirname "$0")/../config_files/config.py}")  # a relative path is the caller's
if [ ! -f "$config" ]; then
    echo "CONFIG=${CONFIG:-}: no such config file ($config)" >&2
    exit 2
fi
cd "$(dirname "$0")/.."
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# the run lives in $work, which outlasts this command: a run longer than one device call (10 minutes) is started
# detached (its own session) by a first call and collected by the next call with the same arguments
work=${GPU_BOX_WORK:-/tmp/gpu_box_run}
if compgen -G ".whl/*.whl" >/dev/null; then
    # not while a run started here goes on: its games read these packages, and a reinstall removes each package's
    # folder before moving the new one in (the 2026-11-27 H100 run dropped 20 races so: docs/runs/2026-11-27_gpu_box_h100)
    if [ ! -f "$work/started" ] || [ ! -d /tmp/site ]; then
        python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || {
            rc=$?  # said at once, in steps.txt too: otherwise it shows only as import errors in every later step
            echo "$(date +%T) installing .whl/*.whl into /tmp/site failed (pip exit $rc): the steps below may not import them" \
                | tee -a "$out/steps.txt" >&2
        }
    fi
    [ -d /tmp/site ] && export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
[ -f "$work/started" ] || rm -rf "$work/logs"  # a new run: the last one's logs go (its folder is moved aside by --fresh)
mkdir -p "$work/logs"
step() { echo "$(date +%T) $*" | tee -a "$out/steps.txt" >> "$work/logs/steps.txt"; }

if [ ! -f "$work/started" ]; then
    step versions
    { nvidia-smi || true; nproc; python -c "import torch, torchrl; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available(), 'torchrl', torchrl.__version__)"; } \
        > "$work/logs/versions.txt" 2>&1
    if [ "${SKIP_TESTS:-0}" != 1 ]; then
        step tests
        timeout 120 python -m pytest -q -p no:cacheprovider tests/agents/test_graphed_step.py tests/agents/test_step_results.py tests/agents/test_packed_tensors.py tests/learner/test_training_thread.py \
            > "$work/logs/tests.txt" 2>&1 || {
            echo "TESTS FAILED OR TIMED OUT: $?" >> "$work/logs/tests.txt"
            if [ "${STOP_ON_TEST_FAILURE:-0}" = 1 ]; then
                cp "$work"/logs/versions.txt "$work"/logs/tests.txt "$out"/
                step "tests failed: stopped before training (STOP_ON_TEST_FAILURE=1)"
                exit 4
            fi
        }
    fi
    step "training $minutes minutes ($config)"
    # its whole text (config_files/enduro.py names a base: a copy of it would name a file beside it), then the lines below
    python -c 'import sys; from trackmania_rl.config.whole_copy import whole_config_text as w; sys.stdout.write(w(sys.argv[1]))' \
        "$config" > "$work/config.py" || { step "config $config: refused"; exit 2; }
    echo "keep_weights_at_minutes = list(range(1, $minutes + 1))" >> "$work/config.py"
    if [ -n "${CONFIG_LINES:-}" ]; then printf '%s\n' "$CONFIG_LINES" >> "$work/config.py"; fi
    setsid nohup bash -c "timeout $((minutes * 60 + 120)) python scripts/train.py --run-name gpu_box --fresh \
        --max-minutes $(python -c "print($minutes + 0.2)") --config '$work/config.py' --save-dir '$work/save' \
        --tensorboard-dir '$work/logs/tensorboard' --no-status-line ${TRAIN_ARGS:-} > '$work/logs/train.log' 2>&1; echo \$? > '$work/exit_code'" \
        > /dev/null 2>&1 < /dev/null &
    touch "$work/started"
fi
deadline=$((SECONDS + ${WAIT_S:-100000}))
while [ ! -f "$work/exit_code" ] && [ $SECONDS -lt $deadline ]; do sleep 2; done
cp "$work"/logs/versions.txt "$work"/logs/tests.txt "$out"/ 2>/dev/null
if [ ! -f "$work/exit_code" ]; then
    step "training still running (WAIT_S=${WAIT_S:-} reached): run the same command again to collect it"
    exit 3
fi
step "training ended: exit $(cat "$work/exit_code")"
pack() {  # the checkpoints stay (buffers: GBs); their last stats.json (frames, batches, learners, wall seconds) goes along
    last=$(ls -d "$work"/save/gpu_box/checkpoints/*/ 2>/dev/null | tail -n 1)
    if [ -n "$last" ]; then cp "$last/stats.json" "$work/logs/last_checkpoint_stats.json"; fi
    rm -f "$out"/run.tar.gz*
    tar czf "$out/run.tar.gz" -C "$work" --exclude checkpoints --exclude best --exclude config_live.py \
        --exclude .config_live.last_good.py --exclude http_token --exclude .lock save/gpu_box logs
    # a device call brings back files of at most 16 MiB: a longer run's kept weights (1.7 MB a minute) come in parts,
    # joined by `cat run.tar.gz.* > run.tar.gz`
    if [ "$(stat -c %s "$out/run.tar.gz")" -gt $((15 * 1024 * 1024)) ]; then
        split -b 15m -d "$out/run.tar.gz" "$out/run.tar.gz." && rm "$out/run.tar.gz"
    fi
}
pack
step "training packed: $(du -ch "$out"/run.tar.gz* | tail -n 1 | cut -f1)"

for suite in ${BENCHMARKS-absorb learner}; do
    step "benchmark $suite"
    timeout 240 python scripts/benchmark.py "$suite" --device "$device" --quick > "$out/${suite}_$device.jsonl" 2>> "$out/benchmarks.err" \
        || echo "$suite benchmark failed: $?" >> "$out/benchmarks.err"
done

kept=$(compgen -G "$work/save/gpu_box/at-minute-*/settings.json" | head -n 1 || true)
game=$([ -n "$kept" ] && python -c 'import json, sys; print(json.load(open(sys.argv[1])).get("game_backend") or "carracing")' "$kept")
if [ "${SKIP_EVALUATION:-0}" != 1 ] && [ -n "$game" ] && [ "$game" != carracing ]; then
    step "evaluation skipped: the run's game is $game (its curve: save/gpu_box/episodes.jsonl in run.tar.gz)"
elif [ "${SKIP_EVALUATION:-0}" != 1 ]; then
    step evaluation
    bash scripts/evaluate_minutes.sh "$work/save/gpu_box" "$(nproc)" 5 > "$work/logs/evaluation.log" 2>&1 || true
    pack
fi
step done
rm -f "$work/started" "$work/exit_code"  # collected: the same command starts a new run
echo "done: $out"
