"""Enduro train step, bf16: frame size x threads x batch. Alternated rounds; medians."""

import statistics

import numpy as np
import torch

from trackmania_rl.benchmarks.learner import make_trainer, on_device, timed
from trackmania_rl.benchmarks.recorded_races import record_races
from trackmania_rl.config.loader import REPO_ROOT, load_config
from trackmania_rl.games import float_layout_for
from trackmania_rl.replay.buffers import make_buffer
from trackmania_rl.replay.experience import rollout_to_experience

torch.set_num_threads(1)
base = load_config(REPO_ROOT / "config_files" / "enduro.py").replace(cutoff_rollout_if_race_not_finished_within_duration_ms=20_000)
arms = {}
for size in (84, 64):
    cfg = base.replace(H_downsized=size, W_downsized=size)
    layout = float_layout_for(cfg)
    races, aps = record_races(cfg, cfg.game_backend, 3, frames_played=1_000_000)
    print(f"size {size}: collector {aps:.0f} actions/s", flush=True)
    buf = make_buffer(cfg, layout, 20_000, batch_size=32, prioritized=False, rng=np.random.default_rng(1))
    for r, _, _ in races:
        buf.extend(rollout_to_experience(r, cfg, layout, gamma=0.999))
    for batch in (32, 64):
        c = cfg.replace(batch_size=batch)
        tr = make_trainer(c, layout, len(c.inputs), torch.device("cpu"))
        tr.precision = torch.bfloat16
        arms[(size, batch)] = (tr, on_device(buf, c, layout, torch.device("cpu"), seed=7, batch_size=batch))
times = {(k, th): [] for k in arms for th in (1, 2)}
for rnd in range(12):
    for k, th in times:
        torch.set_num_threads(th)
        tr, b = arms[k]
        s = timed(lambda tr=tr, b=b: tr.train_on_batch(b, True))
        if rnd >= 2:
            times[(k, th)].append(s)
for (k, th), v in times.items():
    m = statistics.median(v)
    print(f"size {k[0]} batch {k[1]} threads {th}: {1000 * m:.1f} ms, {k[1] / m:.0f} transitions/s", flush=True)
