"""Enduro figures (config_files/enduro.py; the atari extra), measured on this machine:

- `enduro.collector_actions_per_s`: races played by the loop every collector runs (RacePlayer) with the config's
  network (fresh weights, exploration as at 1 M actions: the network decides nearly every action), and the stages of
  an action in microseconds (`enduro.collector_us_per_action`: the emulator `env_step`, the preprocessing `frame`, the
  decision `exploration_policy`, and the rest);
- `enduro.train_step_ms_float32` / `_bfloat16`: the learner's full train step (sample, mini-race transform, step) at the
  config's batch size on one thread, alternated, on a buffer of real Enduro races; `enduro.learner_batches_per_s` in
  the precision `training_precision = "auto"` would pick, and what it feeds at the config's replay ratio
  (`enduro.learner_actions_per_s`: actions stored per second the learner can keep up with).
"""

from __future__ import annotations

import statistics

import numpy as np
import torch

from trackmania_rl.agents.precision import MIN_SPEEDUP
from trackmania_rl.benchmarks.learner import make_trainer, on_device, timed
from trackmania_rl.benchmarks.recorded_races import record_races
from trackmania_rl.config.loader import REPO_ROOT, frame_shape, load_config
from trackmania_rl.games import float_layout_for
from trackmania_rl.replay.buffers import make_buffer
from trackmania_rl.replay.experience import rollout_to_experience

ENDURO_CONFIG = REPO_ROOT / "config_files" / "enduro.py"
CPU = torch.device("cpu")
STAGES = ("env_step", "frame", "exploration_policy", "floats", "update_network", "reset", "bookkeeping")
LATE_IN_TRAINING = 1_000_000  # actions played: epsilon at its floor, the network decides


def run(args):
    quick = bool(getattr(args, "quick", False))
    torch.set_num_threads(1)
    cfg = load_config(ENDURO_CONFIG).replace(cutoff_rollout_if_race_not_finished_within_duration_ms=20_000)
    layout = float_layout_for(cfg)
    n_actions = len(cfg.inputs)
    common = {"config": "config_files/enduro.py", "frame": list(frame_shape(cfg)), "threads": 1}

    races, actions_per_s = record_races(cfg, cfg.game_backend, 3 if quick else 8, frames_played=LATE_IN_TRAINING)
    counted = races[1:] or races  # the first race pays for the JIT compilation
    stage_us = {stage: round(statistics.median(stats[f"instrumentation__{stage}"] for _, stats, _ in counted) / 1e3, 1) for stage in STAGES}
    yield {"figure": "enduro.collector_actions_per_s", "value": round(actions_per_s, 1), "unit": "actions/s", **common}
    yield {"figure": "enduro.collector_us_per_action", "value": stage_us, "unit": "us", "races": len(counted), **common}

    buffer = make_buffer(cfg, layout, 20_000, batch_size=cfg.batch_size, prioritized=False, rng=np.random.default_rng(1))
    for rollout_results, _, _ in races:
        buffer.extend(rollout_to_experience(rollout_results, cfg, layout, gamma=0.999))
    batches = on_device(buffer, cfg, layout, CPU, seed=7, batch_size=cfg.batch_size)
    trainer = make_trainer(cfg, layout, n_actions, CPU)
    times = {torch.float32: [], torch.bfloat16: []}
    reps = 5 if quick else 20
    for round_index in range(2 + reps):
        for dtype, measured in times.items():
            trainer.precision = dtype
            seconds = timed(lambda: trainer.train_on_batch(batches, True))
            if round_index >= 2:  # warm-up
                measured.append(seconds)
    fp32, bf16 = statistics.median(times[torch.float32]), statistics.median(times[torch.bfloat16])
    common_learner = {**common, "batch_size": cfg.batch_size, "reps": reps}
    yield {"figure": "enduro.train_step_ms_float32", "value": round(1000 * fp32, 2), "unit": "ms", **common_learner}
    yield {"figure": "enduro.train_step_ms_bfloat16", "value": round(1000 * bf16, 2), "unit": "ms", **common_learner}
    step_s, dtype = (bf16, "bfloat16") if fp32 / bf16 >= MIN_SPEEDUP else (fp32, "float32")
    yield {"figure": "enduro.learner_batches_per_s", "value": round(1 / step_s, 1), "unit": "batches/s", "dtype": dtype, **common_learner}
    ratio = cfg.number_times_single_memory_is_used_before_discard
    yield {
        "figure": "enduro.learner_actions_per_s",
        "value": round(cfg.batch_size / step_s / ratio, 1),
        "unit": "actions/s",
        "replay_ratio": ratio,
        "dtype": dtype,
        **common_learner,
    }
