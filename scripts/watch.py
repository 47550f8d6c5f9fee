"""Render one greedy race to a video: game view | network input frame | Q-values per action.

    python scripts/watch.py --run save/carracing_default --seed 3 --out race.mp4
    python scripts/watch.py --weights w.torch --seed 3 --out race.gif --height 240 --rules training --max-race-seconds 20
    python scripts/watch.py --run save/<run>/best --track zengarden:reverse --out lap.mp4   # a SuperTuxKart model

One video frame per decision, played back in real game time by default (1000 / ms_per_action frames
per second). The left panel is the game's full view (CarRacing's RGB render, 600 x 400, with its HUD; SuperTuxKart's
road from above, 400 x 400, the kart in red and the zone centers ahead in yellow), the middle one
the frame the network saw (grey or colour, upscaled), the right one a bar per action of the network's Q-values,
the chosen (greedy) action highlighted (SuperTuxKart's actions name their drift, nitro and rescue). A game whose
maps have names (SuperTuxKart) races --track NAME (a track, or it with ":reverse") instead of --seed. GIF always
works; MP4 needs the imageio-ffmpeg package.
Prints the race as one JSON object (as scripts/evaluate.py does) plus the video's path, frame count
and size. The config and the rules that end the race (--rules native, the default, or training) are chosen as
in scripts/evaluate.py. Bad arguments print `error: ...`, exit 2: --height in [64, 2160], --fps finite in
(0, 240], --max-race-seconds finite and positive and only with --rules training.
Frames go to the file as they come (memory does not grow with the race). The network decides through
the same acting program and Inferer as the collectors (trackmania_rl/rollouts/greedy.py, GreedyPolicy).
"""

import argparse
import json
import math
import sys

from trackmania_rl.evaluation import evaluate as evaluation
from trackmania_rl.evaluation import video as race_video
from trackmania_rl.games.base import GameCrashed
from trackmania_rl.rollouts.greedy import play_race

DEFAULT_HEIGHT = {".gif": 240, ".mp4": 400}
MAX_FPS = 240.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    evaluation.add_policy_arguments(parser)
    race_map = parser.add_mutually_exclusive_group(required=True)
    race_map.add_argument("--seed", type=int, help="the track seed (integer >= 0)")
    race_map.add_argument("--track", help='a named map of a game that names them (SuperTuxKart): "lighthouse", "zengarden:reverse"')
    parser.add_argument("--out", required=True, help="output video: a .gif or .mp4 file name")
    parser.add_argument("--height", type=int, default=None, help="video height in pixels (default 240 for GIF, 400 for MP4)")
    parser.add_argument("--fps", type=float, default=None, help="frames per second (default: real time, 1000 / ms_per_action)")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.seed is not None and args.seed < 0:
        parser.error(f"--seed {args.seed}: track seeds are integers >= 0")
    if args.threads < 1:
        parser.error(f"--threads {args.threads}: must be at least 1")
    if args.fps is not None and not (math.isfinite(args.fps) and 0 < args.fps <= MAX_FPS):
        parser.error(f"--fps {args.fps}: must be a finite number in (0, {MAX_FPS}]")
    if args.max_race_seconds is not None and not (math.isfinite(args.max_race_seconds) and args.max_race_seconds > 0):
        parser.error(f"--max-race-seconds {args.max_race_seconds}: must be a finite positive number of seconds")
    try:
        out = race_video.check_output_path(args.out)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    height = args.height if args.height is not None else DEFAULT_HEIGHT[out.suffix.lower()]
    if not race_video.MIN_HEIGHT <= height <= race_video.MAX_HEIGHT:
        parser.error(f"--height {height}: must be in [{race_video.MIN_HEIGHT}, {race_video.MAX_HEIGHT}] pixels")
    try:
        policy = evaluation.open_policy_from_args(args)
        if args.track is not None:  # checked raceable before the race
            maps = evaluation.named_eval_maps(policy.cfg, args.track, "--track", "--seed")
            if len(maps) != 1:
                raise evaluation.EvaluationError(f"--track {args.track}: one map to watch, got {len(maps)}")
            race_map, where = maps[0], f"map {maps[0].name}"
        else:
            evaluation.refuse_seeds_for_named_maps(policy.cfg, "--seed", "--track")
            race_map, where = args.seed, f"seed {args.seed}"
    except evaluation.EvaluationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cfg = policy.cfg
    fps = args.fps if args.fps is not None else 1000 / cfg.ms_per_action
    print(f"watching {evaluation.describe_source(policy.paths)} on {where} -> {out}", file=sys.stderr)

    composer = race_video.FrameComposer(cfg, height)
    game = evaluation.make_eval_game(policy, args.rules)
    try:
        with race_video.VideoWriter(out, fps) as writer:

            def observer(step, frame, state_float, decision):
                action, _, _, q_values = decision
                view = race_video.render_game_view(cfg, game)
                writer.write(composer.compose(view, frame, q_values, action, step * cfg.ms_per_action / 1000, step))

            record = play_race(game, policy, race_map, observer=observer)
            frames = writer.frames_written
    except GameCrashed as e:
        print(f"error: the game crashed during the race: {e}", file=sys.stderr)
        return 1
    finally:
        game.close()
    layout = composer.layout
    record.update(out=str(out), frames=frames, width=layout.width, height=layout.height, fps=fps)
    print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
