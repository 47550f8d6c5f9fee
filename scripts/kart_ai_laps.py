"""The game's own AI on SuperTuxKart's tracks: the anchor a model's lap is judged against (docs/supertuxkart.md).

    python scripts/kart_ai_laps.py                                   # every map of the config's three roles, difficulty 3
    python scripts/kart_ai_laps.py --tracks test --difficulty 3,2 --races 4
    python scripts/kart_ai_laps.py --tracks lighthouse,zengarden:reverse

On each map the AI drives our kart (the config's `supertuxkart_kart`) in one-lap time trials with the race seeds 0 .. K-1
(`--races K`), at each difficulty given (the difficulty scales every kart, so an AI lap compares with a model's at the
same difficulty only). `--tracks`: a comma list of maps, one of the config's sets (`held_out`, `test`), `training` (the
maps of its `map_cycle`) or `all` (the three). The AI's races are played in a game process of their own (its laps
after a player's race in the same game differ). Prints one JSON line per map and difficulty: the map, its role, the
AI's lap times (None: not finished within `supertuxkart_native_time_cap_ms`, or its game crashed twice: `crashed_seeds`),
their best and their spread; then a summary line. Bad input (an unknown map, an arena, a bad difficulty) exits 2
naming it, before any race.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from trackmania_rl.config.loader import ConfigError, load_config
from trackmania_rl.evaluation.against_ai import ai_lap_time_s
from trackmania_rl.games.base import GameCrashed
from trackmania_rl.games.supertuxkart.backend import named_maps

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "config_files" / "supertuxkart.py"
DIFFICULTIES = (0, 1, 2, 3)


def roles(cfg) -> dict[str, str]:
    """{map: its role} for the config's maps: "held_out", "test", "training" (the map cycle's)."""
    role = {name: "training" for name, *_ in cfg.map_cycle}
    role.update({name: "held_out" for name in cfg.supertuxkart_held_out_tracks})
    role.update({name: "test" for name in cfg.supertuxkart_test_tracks})
    return role


def maps_of(cfg, text: str) -> list[str]:
    """The map names `text` means (ValueError naming a map that cannot be raced)."""
    role = roles(cfg)
    if text == "all":
        return sorted(role, key=lambda name: (("training", "held_out", "test").index(role[name]), name))
    if text == "training":
        return sorted(name for name, r in role.items() if r == "training")
    return [spec.name for spec in named_maps(cfg, text)]


def parse_difficulties(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or any(v not in DIFFICULTIES for v in values):
        raise ValueError(f"--difficulty {text!r}: expected a comma list of 0, 1, 2, 3")
    return values


def ai_laps(game, name: str, difficulty: int, races: int) -> tuple[list[float | None], list[int]]:
    """The AI's one-lap times (s) on map `name` at `difficulty` with the race seeds 0 .. races-1 (None: not finished),
    and the seeds whose race crashed twice (their time None too: the game was rebuilt each time, the next race goes on)."""
    times, crashed = [], []
    for seed in range(races):
        lap = None
        for attempt in (1, 2):
            try:
                lap = ai_lap_time_s(game, name, seed, difficulty)
                break
            except GameCrashed as e:
                where = f"{name!r} (difficulty {difficulty}, seed {seed})"
                print(f"the AI's race on {where} crashed (try {attempt} of 2): {e}", file=sys.stderr)
        else:
            crashed.append(seed)
        times.append(lap)
    return times, crashed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(DEFAULT_CONFIG), help="a SuperTuxKart config (default config_files/supertuxkart.py)")
    parser.add_argument("--tracks", default="all", help="maps: a comma list, held_out, test, training or all (default all)")
    parser.add_argument("--difficulty", default="3", help="comma list of difficulties 0-3 (default 3, the game's best)")
    parser.add_argument("--races", type=int, default=3, help="one-lap races per map and difficulty, seeds 0 .. K-1 (default 3)")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config)
        if cfg.game_backend != "supertuxkart":
            raise ValueError(f"{args.config} is a {cfg.game_backend!r} config: the AI's laps are SuperTuxKart's")
        if args.races < 1:
            raise ValueError("--races must be >= 1")
        difficulties = parse_difficulties(args.difficulty)
        maps = maps_of(cfg, args.tracks)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from trackmania_rl.games.supertuxkart.instance import SuperTuxKartGameInstance

    role = roles(cfg)
    game = SuperTuxKartGameInstance(cfg)  # plays the AI's races only
    started = time.perf_counter()
    lines = []
    try:
        for difficulty in difficulties:
            for name in maps:
                times, crashed = ai_laps(game, name, difficulty, args.races)
                finished = [t for t in times if t is not None]
                line = {
                    "kind": "ai_laps",
                    "map": name,
                    "role": role.get(name, "none"),
                    "difficulty": difficulty,
                    "kart": cfg.supertuxkart_kart,
                    "race_seeds": list(range(args.races)),
                    "lap_times_s": times,
                    "best_s": min(finished) if finished else None,
                    "worst_s": max(finished) if finished else None,
                    "crashed_seeds": crashed,
                }
                lines.append(line)
                print(json.dumps(line), flush=True)
    finally:
        game.close()
    unfinished = [f"{line['map']}@{line['difficulty']}" for line in lines if line["best_s"] is None]
    summary = {
        "kind": "summary",
        "maps": len(maps),
        "difficulties": difficulties,
        "races_per_map": args.races,
        "never_finished": unfinished,
        "crashed": sum(len(line["crashed_seeds"]) for line in lines),
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
