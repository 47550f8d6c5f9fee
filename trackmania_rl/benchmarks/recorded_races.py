"""Real races recorded for the benchmarks that replay them (absorb, http): played by this project's RacePlayer, the
loop every collector runs, on the built-in game, with fixed weights (fresh ones, or a model's)."""

from __future__ import annotations

import time
from pathlib import Path

from trackmania_rl.agents.iqn import load_network, make_network
from trackmania_rl.games import float_layout_for
from trackmania_rl.rollouts.race import RacePlayer

SHIPPED_WEIGHTS = Path(__file__).resolve().parents[2] / "models" / "carracing_default" / "weights.torch"


class FixedWeights:
    """Weights that never change (RacePlayer's weight source): the player loads them once, as policy version 0."""

    def __init__(self, network):
        self.network = network

    def fetch_into(self, load_fn, have_version: int) -> int:
        if have_version != 0:
            load_fn(self.network)
        return 0


def record_races(cfg, game_backend: str, count: int, weights_path: Path | None = None, frames_played: int = 0) -> tuple[list, float]:
    """`count` races (envelopes) and the player's actions per second of play. The races follow the map cycle and
    exploration of `cfg` at `frames_played` (the learner's count, which sets epsilon); `weights_path` None plays with
    fresh weights (short races: the no-progress cut-off ends most of them early)."""
    network = make_network(cfg, float_layout_for(cfg), len(cfg.inputs))
    if weights_path is not None:
        load_network(network, weights_path)
    player = RacePlayer(cfg, game_backend, FixedWeights(network), 0, 1, "recorded", log=lambda m: None)
    races, actions, seconds = [], 0, 0.0
    try:
        while len(races) < count:
            start = time.perf_counter()
            envelope = player.play(frames_played)
            if envelope is None:
                continue
            if races or count == 1:  # the first race pays for the JIT compilation: not counted in the rate
                seconds += time.perf_counter() - start
                actions += len(envelope.rollout_results["actions"])
            races.append(tuple(envelope))
    finally:
        player.close()
    return races, actions / max(seconds, 1e-9)
