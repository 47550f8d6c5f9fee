"""Enduro train step (bf16, batch 32, one thread): the frame size / stack / encoder arms' cost. Alternated rounds."""

import statistics

import numpy as np
import torch

from trackmania_rl.benchmarks.learner import make_trainer, on_device, timed
from trackmania_rl.benchmarks.recorded_races import record_races
from trackmania_rl.config.loader import REPO_ROOT, load_config
from trackmania_rl.device import cpu_model
from trackmania_rl.games import float_layout_for
from trackmania_rl.replay.buffers import make_buffer
from trackmania_rl.replay.experience import rollout_to_experience

torch.set_num_threads(1)
base = load_config(REPO_ROOT / "config_files" / "enduro.py").replace(cutoff_rollout_if_race_not_finished_within_duration_ms=20_000)
variants = {
    "84x84 stack 4 nature (before)": {},
    "84x84 stack 2 nature": dict(frame_stack=2),
    "84x84 stack 4 impala": dict(network_encoder="impala", conv_layers=[(16, 3, 1), (32, 3, 1), (32, 3, 1)]),
}
print("cpu:", cpu_model(), flush=True)
arms = {}
for name, change in variants.items():
    cfg = base.replace(**change)
    layout = float_layout_for(cfg)
    races, aps = record_races(cfg, cfg.game_backend, 2, frames_played=1_000_000)
    buf = make_buffer(cfg, layout, 20_000, batch_size=32, prioritized=False, rng=np.random.default_rng(1))
    for r, _, _ in races:
        buf.extend(rollout_to_experience(r, cfg, layout, gamma=0.999))
    tr = make_trainer(cfg, layout, len(cfg.inputs), torch.device("cpu"))
    tr.precision = torch.bfloat16
    arms[name] = (tr, on_device(buf, cfg, layout, torch.device("cpu"), seed=7, batch_size=32), aps)
times = {k: [] for k in arms}
for rnd in range(10):
    for k, (tr, b, _) in arms.items():
        s = timed(lambda tr=tr, b=b: tr.train_on_batch(b, True))
        if rnd >= 2:
            times[k].append(s)
for k, v in times.items():
    m = statistics.median(v)
    print(
        f"{k}: train step {1000 * m:.1f} ms (runs {[round(1000 * x, 1) for x in v]}), {32 / m:.0f} transitions/s, "
        f"{32 / m / 4 * 4 * 3600 / 1e6:.2f} M frames an hour at the replay ratio 4; collector {arms[k][2]:.0f} actions/s",
        flush=True,
    )
