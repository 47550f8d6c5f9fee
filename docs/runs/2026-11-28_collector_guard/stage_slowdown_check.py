# Ad hoc check kept with the raw output: which part of the network's work slows the fast game's own stages?
import statistics
import time

import numpy as np

from trackmania_rl.agents.acting import acting_torch_settings
from trackmania_rl.benchmarks.game import in_turn, make_policy, play_bare
from trackmania_rl.config.loader import default_config
from trackmania_rl.games.car_racing.instance import CarRacingGameInstance

cfg = default_config().replace(frame_renderer="fast")
game = CarRacingGameInstance(cfg)
rng = np.random.default_rng(0)
actions = [int(a) for a in rng.integers(0, len(game.controls), 125)]
big_src = np.ones(2_000_000, np.float32)
big_dst = np.empty_like(big_src)
src = np.ones(1_822_580 // 4, np.float32)
dst = np.empty_like(src)  # the weights' size
with acting_torch_settings():
    policy, update, _ = make_policy(cfg, game.float_layout, len(cfg.inputs))
    policy.start_race(lambda f, s: 0)

    def spin(f, s, us=300):
        end = time.perf_counter_ns() + us * 1000
        while time.perf_counter_ns() < end:
            pass

    variants = {
        "bare": {},
        "network": dict(decide=policy, update_network=update),
        "sweep_1.8MB": dict(decide=lambda f, s: np.copyto(dst, src)),
        "spin_300us": dict(decide=spin),
        "sweep_8MB": dict(decide=lambda f, s: np.copyto(big_dst, big_src)),
        "sleep_300us": dict(decide=lambda f, s: time.sleep(300e-6)),
    }
    ns = {v: [] for v in variants}
    for rep in range(24):
        for v in in_turn(list(variants), rep):
            t = play_bare(game, rep % 4, actions, **variants[v])
            ns[v].append({s: t[s] for s in ("physics", "render")})
game.close()
for v in variants:
    pairs = [sum(a.values()) / sum(b.values()) for a, b in zip(ns[v], ns["bare"], strict=True)]
    by = {s: round(statistics.median(a[s] / b[s] for a, b in zip(ns[v], ns["bare"], strict=True)), 4) for s in ("physics", "render")}
    variant_us = round(statistics.median(sum(a.values()) for a in ns[v]) / 1e3, 1)
    print(v, "slowdown", round(statistics.median(pairs), 4), by, "bare us", variant_us)
