"""A model against the game's own AI on named maps (scripts/evaluate.py --tracks: SuperTuxKart's tracks).

On each map the model plays one greedy race (rollouts/greedy.py play_race) and the game's AI drives the same kart at the
same difficulty for `ai_races` one-lap races with the race seeds 0, 1, ... (the AI varies from race to race below
difficulty 3; our kart's time trial does not). The AI races in a game of its own: in a game where a player's race came
just before, the AI's next lap changed (olivermath at difficulty 3: 19.8 s instead of 17.6 s), while after AI races
alone, on any track, it is the same every time. Both lap times are from a standing start: the model's first lap, the AI's
one-lap race. The record gets the AI's times and the best of them, and the ratio of the model's lap time to that best
(below 1: the model is faster); `compare_with_ai` sums the ratios up.
"""

from __future__ import annotations

import sys

import numpy as np

from trackmania_rl.games.base import GameCrashed, MapSpec
from trackmania_rl.rollouts.greedy import GreedyPolicy, play_race


def ai_lap_time_s(game, map_name: str, seed: int, difficulty: int | None = None) -> float | None:
    """The game's AI's one-lap time (s) on `map_name` with race seed `seed` (None: not finished within the native time
    cap), at `difficulty` (default the game's config's)."""
    race = game.ai_race(MapSpec(map_name, seed, is_explo=False, fill_buffer=False), difficulty, laps=1)
    return race["race_time_ms"] / 1000 if race["finished"] else None


def ai_lap_times_s(game, map_spec: MapSpec, ai_races: int) -> list[float | None]:
    """The game's AI's one-lap times (s; None: not finished within the native time cap), race seeds 0 .. ai_races - 1,
    at the game's difficulty (its config's)."""
    return [ai_lap_time_s(game, map_spec.name, seed) for seed in range(ai_races)]


def with_ai_times(record: dict, times: list[float | None]) -> dict:
    """The model's race record with the AI's lap times on its map: each (`ai_lap_times_s`), the best (`ai_lap_time_s`;
    None if the AI never finished) and the model's lap time over the best (`lap_time_ratio`; None unless both have one)."""
    finished = [t for t in times if t is not None]
    best = min(finished) if finished else None
    ratio = record["lap_time_s"] / best if best is not None and record.get("lap_time_s") is not None else None
    return {**record, "ai_lap_time_s": best, "ai_lap_times_s": times, "lap_time_ratio": ratio}


def race_against_ai(game, ai_game, policy: GreedyPolicy, map_spec: MapSpec, ai_races: int, retries: int = 1) -> dict:
    """The model's race on `map_spec` in `game` and the AI's in `ai_game` (a game instance of the same config that plays
    the AI's races only), as one record (with_ai_times). A race whose game crashed is played again (the game rebuilds
    itself) up to `retries` times, then GameCrashed propagates."""
    for attempt in range(retries + 1):
        try:
            return with_ai_times(play_race(game, policy, map_spec), ai_lap_times_s(ai_game, map_spec, ai_races))
        except GameCrashed as e:
            if attempt == retries:
                raise
            print(f"race on map {map_spec.name!r} crashed, playing it again: {e}", file=sys.stderr)
    raise AssertionError("unreachable")


def compare_with_ai(records: list[dict]) -> dict:
    """How the model fared against the AI over `records` (with_ai_times'): the maps where its lap was faster than the
    AI's best (`faster_than_ai`, `faster_than_ai_maps`), on how many maps both finished a lap (`compared_with_ai`), and
    the mean, median and worst of their lap-time ratios (None when none compared)."""
    ratios = [r["lap_time_ratio"] for r in records if r.get("lap_time_ratio") is not None]
    faster = [r["map"] for r in records if r.get("lap_time_ratio") is not None and r["lap_time_ratio"] < 1.0]
    return {
        "faster_than_ai": len(faster),
        "faster_than_ai_maps": faster,
        "compared_with_ai": len(ratios),
        "ai_finished": sum(r.get("ai_lap_time_s") is not None for r in records),
        "mean_lap_time_ratio": float(np.mean(ratios)) if ratios else None,
        "median_lap_time_ratio": float(np.median(ratios)) if ratios else None,
        "worst_lap_time_ratio": float(max(ratios)) if ratios else None,
    }
