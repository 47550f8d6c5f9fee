"""Evaluate a trained network: greedy races (no exploration) on given CarRacing track seeds.

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

from trackmania_rl.evaluation import evaluate as evaluation
from trackmania_rl.games.base import GameCrashed
from trackmania_rl.rollouts.greedy import evaluate_seeds, summarise


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    evaluation.add_policy_arguments(parser)
    parser.add_argument(
        "--seeds",
        required=True,
        help="track seeds: 'A-B' inclusive ranges and comma lists, e.g. 0-9,20,30-31; or 'validation' / 'test': the config's "
        "validation_seeds / test_seeds, each set summed up on its own",
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
        if args.seeds not in evaluation.SEED_SETS:
            evaluation.parse_seeds(args.seeds)  # a bad list is refused before the policy loads
        policy = evaluation.open_policy_from_args(args)
        sets = evaluation.seed_sets(args.seeds, policy.cfg)
    except evaluation.EvaluationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
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


if __name__ == "__main__":
    sys.exit(main())
