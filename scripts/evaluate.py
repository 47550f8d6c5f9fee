"""Evaluate a trained network: greedy races (no exploration) on given CarRacing track seeds, or on named tracks
(SuperTuxKart) against the game's own AI.

    python scripts/evaluate.py --run save/carracing_default --seeds 0-9
    python scripts/evaluate.py --weights path/weights_online.torch --seeds 0-9,20,30-31
    python scripts/evaluate.py --weights w.torch --config my_config.py --seeds 5 --rules training --max-race-seconds 30
    python scripts/evaluate.py --weights w.torch --seeds 500000-500099 --workers 16   # 16 races at a time

Races end by CarRacing-v3's own episode rules (--rules native, the default): exactly when an episode of Gymnasium's
registered CarRacing-v3 ends, its TimeLimit included (every road tile touched: "finished"; off the playfield:
"left_playfield"; 1000 physics steps = 20 s: "time_limit"), the rules published CarRacing scores use. --rules
training ends them as training does: the finish line after one lap ("finished"), the config's overall cut-off
("overall", --max-race-seconds overrides it) and no-progress cut-off ("no_progress"), or off the playfield.

Prints one JSON object per race as it ends (in the order they end with --workers; kind "race": seed, rules, finished,
race_time_s (null if not finished), native_score, progress_fraction (furthest progress along the lap), tile_coverage, end_reason,
n_actions, game_time_s) and a final one (kind "summary": rules, races, finished, finished_fraction,
mean_native_score, std_native_score, median_native_score, worst_native_score, races_below_bar (below the config's
tail_score_bar, score_bar), mean_tile_coverage, every_tile_fraction, mean_race_time_s over the finished races (null if
none), mean_progress_fraction, seeds). Races are MapSpec("eval", seed, is_explo=False, fill_buffer=False)
played on the CPU.

    python scripts/evaluate.py --weights models/carracing_default/weights.torch --seeds test --workers 2

--seeds test (or validation) plays the config's test_seeds (validation_seeds): the sets a figure is measured on, each a
hundred tracks no run trains on, and prints before the final summary one line per set (kind "set_summary", its
"set" and "role", the summary's keys). Test sets choose nothing: compare settings and weights on the validation sets.

A SuperTuxKart model races named maps instead of seeds ("track" or "track:reverse"), each against the game's AI:

    python scripts/evaluate.py --weights save/<run>/best/weights_online.torch --tracks lighthouse,zengarden:reverse
    python scripts/evaluate.py --run save/<run>/best --tracks test --ai-races 3 --difficulty 2

--tracks (or --track) takes a comma list of maps, or 'held_out' / 'test': the config's supertuxkart_held_out_tracks /
supertuxkart_test_tracks. On each map the model plays one time trial and the game's AI drives the same kart at the same
difficulty (the model's supertuxkart_difficulty, 3 by default; --difficulty N for another) for --ai-races one-lap races
(default 1) with the race seeds 0, 1, ...: the AI varies from race to race below difficulty 3. Each race's line adds
map, track, reverse, difficulty, ai_lap_time_s (the AI's best lap), ai_lap_times_s (each) and lap_time_ratio (the
model's lap_time_s over the AI's best: below 1 is faster); the summary adds maps, faster_than_ai (and its maps),
compared_with_ai, ai_finished and the mean, median and worst lap_time_ratio. A map that cannot be raced (an arena, an
unknown name, a reverse the track has not) is refused before any race, exit 2; so are --seeds for a model of a game
whose maps are named, and --tracks for one whose maps are seeds.

The settings: --config FILE if given (a Python config, executed because you named it, or a settings.json),
else the settings.json beside the weights (the values the run trained with, read as data), else
config_files/config.py. A config_copy.py found beside the weights is never executed: it is refused with a
message. Bad arguments (missing files, weights that do not fit the config, a
malformed seed list, more than 100,000 seeds, --threads outside 1..CPU cores, a --max-race-seconds that is
not finite and positive...) print an error naming the option and exit 2.
"""

import argparse
import json
import sys

from trackmania_rl.config.schema import SUPERTUXKART_DIFFICULTIES
from trackmania_rl.evaluation import evaluate as evaluation
from trackmania_rl.evaluation.against_ai import compare_with_ai, race_against_ai
from trackmania_rl.games.base import RULES_NATIVE, GameCrashed
from trackmania_rl.rollouts.greedy import evaluate_seeds, summarise

MAX_AI_RACES = 100


def ai_races_count(text: str) -> int:
    """--ai-races: 1 to MAX_AI_RACES."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (1 to {MAX_AI_RACES})") from None
    if not 1 <= value <= MAX_AI_RACES:
        raise argparse.ArgumentTypeError(f"{value}: must be between 1 and {MAX_AI_RACES}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    evaluation.add_policy_arguments(parser)
    maps = parser.add_mutually_exclusive_group(required=True)
    maps.add_argument(
        "--seeds",
        help="track seeds: 'A-B' inclusive ranges and comma lists, e.g. 0-9,20,30-31; or 'validation' / 'test': the config's "
        "validation_seeds / test_seeds, each set summed up on its own",
    )
    maps.add_argument(
        "--tracks",
        "--track",
        dest="tracks",
        help="named maps of a game that names them (SuperTuxKart): a comma list such as lighthouse,zengarden:reverse, or "
        "'held_out' / 'test': the config's supertuxkart_held_out_tracks / supertuxkart_test_tracks; each raced against the game's AI",
    )
    parser.add_argument(
        "--ai-races",
        type=ai_races_count,
        default=None,
        help=f"with --tracks: the game's AI races each map this many times, race seeds 0, 1, ... (default 1, at most {MAX_AI_RACES})",
    )
    parser.add_argument(
        "--difficulty",
        type=int,
        choices=SUPERTUXKART_DIFFICULTIES,
        default=None,
        help="SuperTuxKart: the races' difficulty, the model's and the AI's (default: the model's supertuxkart_difficulty)",
    )
    parser.add_argument(
        "--workers",
        type=evaluation.cores_count,
        default=1,
        help="races played side by side by this many processes, each with its own game and one torch thread (default 1, at most "
        "the CPU cores)",
    )
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    # argparse exits 2 on unknown or missing options and on numbers out of range (--threads 1..CPU cores,
    # --max-race-seconds finite and > 0); --seeds is counted (at most 100,000) before any range is expanded
    args = parser.parse_args(argv)
    try:
        if args.seeds is not None:
            if args.ai_races is not None:
                raise evaluation.EvaluationError("--ai-races races the game's AI on named maps: give it with --tracks")
            if args.seeds not in evaluation.SEED_SETS:
                evaluation.parse_seeds(args.seeds)  # a bad list is refused before the policy loads
        policy = evaluation.open_policy_from_args(args)
        if args.tracks is not None:  # every map checked before any race
            maps = evaluation.named_eval_maps(policy.cfg, args.tracks)
        else:
            evaluation.refuse_seeds_for_named_maps(policy.cfg)
            sets = evaluation.seed_sets(args.seeds, policy.cfg)
    except evaluation.EvaluationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.tracks is not None:
        return evaluate_tracks(args, policy, maps)
    paths = policy.paths
    cfg = policy.cfg
    seeds = [seed for _, set_seeds in sets for seed in set_seeds]
    game_name = f"{cfg.frame_renderer} frames" if cfg.game_backend == "carracing" else f"{cfg.game_backend} {cfg.gymnasium_env_id}"
    print(f"evaluating {evaluation.describe_source(paths)} on {len(seeds)} seed(s), {args.rules} rules, {game_name}", file=sys.stderr)

    game = evaluation.make_eval_game(policy, args.rules) if args.workers == 1 else None
    races = evaluate_seeds(game, policy, seeds) if game is not None else evaluation.evaluate_in_processes(args, seeds, args.workers)
    records = []
    try:
        for record in races:
            records.append(record)
            print(json.dumps(record), flush=True)
    except GameCrashed as e:
        print(f"error: the game crashed twice on the same race: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"interrupted after {len(records)} race(s)", file=sys.stderr)
        if not records:
            return 130
    finally:
        if game is not None:
            game.close()
    by_seed = sorted(records, key=lambda record: record["seed"])
    if args.seeds in evaluation.SEED_SETS:
        for name, set_seeds in sets:
            members = set(set_seeds)
            in_set = [record for record in by_seed if record["seed"] in members]
            if in_set:
                print(
                    json.dumps({**summarise(in_set, cfg.tail_score_bar), "kind": "set_summary", "set": name, "role": args.seeds}),
                    flush=True,
                )
    summary = summarise(by_seed, cfg.tail_score_bar)
    summary.update(
        sets=[name for name, _ in sets],
        weights=str(paths.weights),
        config=str(paths.config),
        frame_renderer=cfg.frame_renderer,
        game=cfg.game_backend,
        # the training rules' overall cut-off; the native rules have none but the game's time limit
        max_race_seconds=policy.cfg.cutoff_rollout_if_race_not_finished_within_duration_ms / 1000 if args.rules == "training" else None,
    )
    print(json.dumps(summary), flush=True)
    return 0 if len(records) == len(seeds) else 130


def evaluate_tracks(args, policy, maps) -> int:
    """The model and the game's AI on each named map: a line per map as it ends, then the summary."""
    cfg, ai_races = policy.cfg, args.ai_races or 1
    print(
        f"evaluating {evaluation.describe_source(policy.paths)} on {len(maps)} map(s) against the game's AI ({ai_races} race(s) "
        f"each), {args.rules} rules, {cfg.game_backend} difficulty {cfg.supertuxkart_difficulty}",
        file=sys.stderr,
    )
    games = []  # the model's game and the AI's (evaluation/against_ai.py: the AI races in a game of its own)
    if args.workers == 1:
        games = [evaluation.make_eval_game(policy, args.rules), evaluation.make_eval_game(policy, RULES_NATIVE)]
        races = (race_against_ai(*games, policy, race_map, ai_races) for race_map in maps)
    else:
        races = evaluation.evaluate_in_processes(args, maps, args.workers, ai_races)
    records = []
    try:
        for record in races:
            records.append(record)
            print(json.dumps(record), flush=True)
    except GameCrashed as e:
        print(f"error: the game crashed twice on the same race: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"interrupted after {len(records)} race(s)", file=sys.stderr)
        if not records:
            return 130
    finally:
        for game in games:
            game.close()
    order = {race_map.name: i for i, race_map in enumerate(maps)}
    records.sort(key=lambda record: order[record["map"]])
    summary = summarise(records, cfg.tail_score_bar)
    summary.update(
        compare_with_ai(records),
        tracks=args.tracks,
        difficulty=cfg.supertuxkart_difficulty,
        ai_races=ai_races,
        weights=str(policy.paths.weights),
        config=str(policy.paths.config),
        game=cfg.game_backend,
        max_race_seconds=cfg.cutoff_rollout_if_race_not_finished_within_duration_ms / 1000 if args.rules == "training" else None,
    )
    print(json.dumps(summary), flush=True)
    return 0 if len(records) == len(maps) else 130


if __name__ == "__main__":
    sys.exit(main())
