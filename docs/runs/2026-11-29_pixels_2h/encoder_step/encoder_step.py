"""Train-step time of the pixels-only CarRacing config with each image encoder (linesight, impala), float32 and
bfloat16 alternated, one thread, batch 128, on real races of the built-in game. Prints JSON lines."""

import json
import statistics
import sys

import numpy as np
import torch

from trackmania_rl.benchmarks.learner import make_trainer, on_device, timed
from trackmania_rl.benchmarks.recorded_races import record_races
from trackmania_rl.config.loader import REPO_ROOT, frame_shape, load_config
from trackmania_rl.games import float_layout_for
from trackmania_rl.replay.buffers import make_buffer
from trackmania_rl.replay.experience import rollout_to_experience

torch.set_num_threads(1)
base = load_config(REPO_ROOT / "config_files" / "carracing_pixels.py")
races, aps = record_races(base, base.game_backend, 3, frames_played=1_000_000)
reps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
for encoder in ("linesight", "impala"):
    cfg = base.replace(network_encoder=encoder)
    layout = float_layout_for(cfg)
    buffer = make_buffer(cfg, layout, 20_000, batch_size=cfg.batch_size, prioritized=False, rng=np.random.default_rng(1))
    for r, _, _ in races:
        buffer.extend(rollout_to_experience(r, cfg, layout, gamma=0.999))
    batches = on_device(buffer, cfg, layout, torch.device("cpu"), seed=7, batch_size=cfg.batch_size)
    trainer = make_trainer(cfg, layout, len(cfg.inputs), torch.device("cpu"))
    params = sum(p.numel() for p in trainer.online.parameters())
    times = {torch.float32: [], torch.bfloat16: []}
    for i in range(2 + reps):
        for dtype, m in times.items():
            trainer.precision = dtype
            s = timed(lambda trainer=trainer, batches=batches: trainer.train_on_batch(batches, True))
            if i >= 2:
                m.append(s)
    for dtype, m in times.items():
        figure = {"encoder": encoder, "dtype": str(dtype).split(".")[1], "frame": list(frame_shape(cfg)), "batch_size": cfg.batch_size}
        figure |= {"median_ms": round(1000 * statistics.median(m), 1), "runs_ms": [round(1000 * x, 1) for x in m], "params": params}
        print(json.dumps(figure), flush=True)
