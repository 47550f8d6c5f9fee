"""Greedy races of a network: what the held-out evaluation during training (learner/held_out.py) and the
evaluation scripts (evaluation/evaluate.py) both play.

- `GreedyPolicy(cfg, network, layout)`: the network in eval mode behind a greedy `Inferer`, on the CPU;
- `play_race(game, policy, map)`: one race on a map (a MapSpec, or a seed: MapSpec("eval", seed, is_explo=False,
  fill_buffer=False)), returned as a plain, JSON-ready record that names the rules the game ended it by (games/base.py
  RACE_RULES) and, for a game whose maps have names, the map (its game instance's `describe_map`);
- `evaluate_maps` (`evaluate_seeds`) plays several, `summarise` sums them up.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import torch

from trackmania_rl.agents.acting import make_inference_network
from trackmania_rl.agents.exploration import Inferer
from trackmania_rl.games.base import EVAL_MAP_NAME, GameCrashed, MapSpec, seed_map


class GreedyPolicy:
    """The network in eval mode behind a greedy Inferer: `policy(frame, state_float)` ->
    (action, True, value, q_values), deterministic for given inputs. Runs on the CPU and decides as a
    collector does, through the inference network's acting program (agents/acting.py). `paths`: where the
    weights came from, for messages (evaluation/evaluate.py CheckpointPaths), or None."""

    def __init__(self, cfg, network: torch.nn.Module, layout, paths=None):
        self.cfg = cfg
        self.layout = layout
        self.n_actions = len(cfg.inputs)
        self.network = network.eval()
        for p in self.network.parameters():
            p.requires_grad_(False)
        acting = make_inference_network(cfg, layout, self.n_actions, jit=False, device="cpu")
        acting.load_state_dict_from(self.network)
        self.inferer = Inferer(acting, cfg, self.n_actions, device="cpu", is_explo=False)
        self.inferer.set_exploration(0.0, 0.0)
        self.paths = paths

    def __call__(self, frame: np.ndarray, state_float: np.ndarray):
        return self.inferer.get_exploration_action(frame, state_float)


# observer(step, frame, state_float, decision): called after every decision, with the game at the state
# the network saw (watch.py reads the game's view from the env at that moment)
Observer = Callable[[int, np.ndarray, np.ndarray, tuple], None]


def eval_map_spec(seed: int) -> MapSpec:
    return seed_map(seed)


def race_record(seed: int, end_race_stats: dict, rules: str, map_fields: dict | None = None) -> dict:
    """One race as a JSON-ready dict; `rules`: those the game ended it by (its `rules`); `map_fields`: what the game
    says of a map that has a name (its instance's `describe_map`), after the seed."""
    finished = bool(end_race_stats["race_finished"])
    lap_time_ms = end_race_stats.get("lap_time_ms")
    coverage = end_race_stats.get("tiles_visited_fraction")
    return {
        "kind": "race",
        "seed": int(seed),
        **(map_fields or {}),
        "rules": rules,
        "finished": finished,
        "race_time_s": end_race_stats["race_time"] / 1000 if finished else None,
        "native_score": float(end_race_stats["native_score"]),
        "progress_fraction": float(end_race_stats["progress_fraction"]),
        # share of the road tiles the car touched (CarRacing's native score pays them); None for other games
        "tile_coverage": float(coverage) if coverage is not None else None,
        # every road tile touched: what ends a CarRacing-v3 episode as finished (None for other games)
        "every_tile": bool(coverage >= 1.0) if coverage is not None else None,
        # when the car first completed the lap: crossed the finish line, or (native rules) touched every tile if that came
        # first; by either rules (None: it did not)
        "lap_time_s": lap_time_ms / 1000 if lap_time_ms is not None else None,
        "end_reason": end_race_stats["end_reason"],
        "n_actions": int(end_race_stats["n_actions"]),
        "game_time_s": end_race_stats["race_time_for_ratio"] / 1000,
    }


def play_race(game, policy: GreedyPolicy, race_map: MapSpec | int, observer: Observer | None = None) -> dict:
    """One greedy race on `race_map` (a MapSpec, or a track seed): its record (see race_record). Raises GameCrashed if
    the game failed."""
    spec = race_map if isinstance(race_map, MapSpec) else seed_map(race_map)
    zone_centers = game.zone_centers_for(spec)
    if observer is None:
        acting = policy
    else:
        step = [0]

        def acting(frame, state_float):
            decision = policy(frame, state_float)
            observer(step[0], frame, state_float, decision)
            step[0] += 1
            return decision

    _, end_race_stats = game.rollout(acting, spec, zone_centers, lambda: None)
    return race_record(spec.seed, end_race_stats, game.rules, game.describe_map(spec))


def _named(race_map: MapSpec | int) -> str:
    if isinstance(race_map, MapSpec) and race_map.name != EVAL_MAP_NAME:
        return f"map {race_map.name!r}"
    return f"seed {race_map.seed if isinstance(race_map, MapSpec) else race_map}"


def evaluate_maps(game, policy: GreedyPolicy, maps: Iterable[MapSpec | int], retries: int = 1) -> Iterator[dict]:
    """Play each map (a MapSpec, or a track seed) in turn and yield its record. A race whose game crashed is replayed
    (the game rebuilds itself; races are deterministic) up to `retries` times, then GameCrashed propagates."""
    for race_map in maps:
        for attempt in range(retries + 1):
            try:
                record = play_race(game, policy, race_map)
                break
            except GameCrashed as e:
                if attempt == retries:
                    raise
                print(f"race on {_named(race_map)} crashed, replaying it: {e}", file=sys.stderr)
        yield record


evaluate_seeds = evaluate_maps  # the name of the seed games' callers


def summarise(records: list[dict], bar: float | None = None) -> dict:
    """The summary of race records: the rules they were played by, counts, finished fraction, mean, standard
    deviation, median and worst of the native score, how many races scored below `bar` (the config's
    `tail_score_bar`; None: not counted), mean progress and tile coverage, the fraction of races that touched every
    tile, the mean race time of the finished races and the mean lap time of the races that completed a lap (None when
    none did), the seeds, and the maps' names when the races were on named maps. ValueError for races played by
    different rules: their scores do not add up."""
    records = list(records)
    n = len(records)
    scores = [r["native_score"] for r in records]
    rules = {r.get("rules") for r in records}
    if len(rules) > 1:
        raise ValueError(f"races played by different rules ({sorted(map(str, rules))}) cannot be summed up together")
    finished = [r for r in records if r["finished"]]
    coverage = [r["tile_coverage"] for r in records if r.get("tile_coverage") is not None]
    every_tile = [r["every_tile"] for r in records if r.get("every_tile") is not None]
    laps = [r["lap_time_s"] for r in records if r.get("lap_time_s") is not None]
    return {
        "kind": "summary",
        "rules": rules.pop() if rules else None,
        "races": n,
        "finished": len(finished),
        "finished_fraction": len(finished) / n if n else None,
        "mean_native_score": float(np.mean(scores)) if n else None,
        "std_native_score": float(np.std(scores)) if n else None,
        "median_native_score": float(np.median(scores)) if n else None,
        "worst_native_score": float(min(scores)) if n else None,
        "score_bar": bar,
        "races_below_bar": sum(score < bar for score in scores) if bar is not None else None,
        "mean_tile_coverage": float(np.mean(coverage)) if coverage else None,
        "every_tile_fraction": float(np.mean(every_tile)) if every_tile else None,
        "mean_lap_time_s": float(np.mean(laps)) if laps else None,
        "laps": len(laps),
        "mean_race_time_s": float(np.mean([r["race_time_s"] for r in finished])) if finished else None,
        "mean_progress_fraction": float(np.mean([r["progress_fraction"] for r in records])) if n else None,
        "seeds": [r["seed"] for r in records],
        **({"maps": [r.get("map") for r in records]} if any("map" in r for r in records) else {}),
    }
