"""Greedy evaluation of a trained network (scripts/evaluate.py, scripts/watch.py, tests).

- `parse_seeds("0-9,20,30-31")`: track seeds from "A-B" inclusive ranges and comma lists.
- `resolve_checkpoint(weights=..., run=..., config=...)`: which weights file and which config file to use.
- `load_policy(paths)`: the network (eval mode, CPU) behind a greedy `Inferer` (rollouts/greedy.py `GreedyPolicy`).
- `make_eval_game(policy, rules)`: the game to play it in, its races ended by CarRacing-v3's own episode rules
  ("native", the default of the scripts' --rules) or by the training cut-offs ("training").
- `eval_maps(cfg, seeds=..., tracks=...)`: the maps to race: track seeds, or a game's named maps (SuperTuxKart's
  tracks), each refused (EvaluationError naming it) before any race when the model's game does not race it.
The races themselves are played and summed up by rollouts/greedy.py (`play_race`, `evaluate_seeds`,
`summarise`), which the held-out evaluation during training uses too.

Every problem with what the user asked for (a missing file, weights that do not fit the config, a bad
seed list...) raises `EvaluationError` with a message naming it; the scripts print it and exit 2.
Nothing is unpickled: weights load with `torch.load(weights_only=True)` (agents/iqn.py `load_network`).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from trackmania_rl.agents.iqn import NotAStateDict, StateDictMismatch, WeightsFileUnreadable, load_network, make_network
from trackmania_rl.config.game_backends import FRAME_RENDERERS, SUPERTUXKART
from trackmania_rl.config.loader import CONFIG_DIR, ConfigError, load_config
from trackmania_rl.config.schema import SUPERTUXKART_DIFFICULTIES
from trackmania_rl.config.values import read_settings
from trackmania_rl.evaluation.against_ai import race_against_ai
from trackmania_rl.games import float_layout_for, make_game_instance
from trackmania_rl.games.backend import DEFAULT_GAME_BACKEND, game_backend
from trackmania_rl.games.base import RACE_RULES, RULES_NATIVE, RULES_TRAINING, MapSpec
from trackmania_rl.learner.checkpoint import CHECKPOINT, CHECKPOINTS, CONFIG_COPY, SETTINGS, WEIGHTS_ONLINE, find_checkpoint
from trackmania_rl.rollouts.greedy import GreedyPolicy, evaluate_seeds

DEFAULT_CONFIG = CONFIG_DIR / "config.py"
# the game evaluated on: configs are loaded for it, and the layout and game instance come from its
# backend (games/backend.py)
GAME_BACKEND = DEFAULT_GAME_BACKEND


class EvaluationError(ValueError):
    """What the user asked for cannot be evaluated; the message says why (the scripts exit 2)."""


# --------------------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------------------
MAX_SEEDS = 100_000  # seeds one --seeds may list (counted from the ranges, before any is expanded)
_MAX_SEED_DIGITS = 18


def cores_count(text: str) -> int:
    """--threads, --workers: 1 to the number of CPU cores."""
    cores = os.cpu_count() or 1
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (1 to {cores})") from None
    if not 1 <= value <= cores:
        raise argparse.ArgumentTypeError(f"{value}: must be between 1 and {cores} (the CPU cores of this machine)")
    return value


def _race_seconds(text: str) -> float:
    """--max-race-seconds: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text}: must be a finite number of seconds greater than 0")
    return value


def add_policy_arguments(parser) -> None:
    """The options evaluate.py and watch.py share: which network, which config, the rules that end a race, race
    length, threads. Numbers are checked by argparse (exit 2 with the option named)."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--weights", help="a weights file (state_dict, e.g. save/<run>/best/weights_online.torch)")
    source.add_argument("--run", help="a run folder (save/<run>: its newest complete checkpoint) or a checkpoint folder")
    parser.add_argument(
        "--config",
        default=None,
        help="a settings.json, or a Python config file (executed) "
        "(default: the settings.json beside the weights, else config_files/config.py)",
    )
    parser.add_argument(
        "--rules",
        choices=RACE_RULES,
        default=RULES_NATIVE,
        help="how a race ends: 'native' (default): exactly when an episode of Gymnasium's registered CarRacing-v3 ends "
        "(every road tile touched, off the playfield, or its time limit of 1000 physics steps = 20 s), the rules "
        "published scores use; 'training': the trainer's own end (the finish line after one lap, the config's "
        "overall cut-off, 60 s by default, and its no-progress cut-off, 2 s without a new zone)",
    )
    parser.add_argument(
        "--max-race-seconds",
        type=_race_seconds,
        default=None,
        help="with --rules training: override the overall race cutoff (game seconds, finite, > 0)",
    )
    parser.add_argument(
        "--frame-renderer",
        choices=FRAME_RENDERERS,
        default=None,
        help="how the network's frames are drawn: 'fast' (straight at the frame's size) or 'pygame' (CarRacing's own "
        "drawing, smoothscaled); default: the model's own (its settings' frame_renderer)",
    )
    parser.add_argument("--threads", type=cores_count, default=1, help=f"torch CPU threads (default 1, at most {os.cpu_count() or 1})")


_SEED_ITEM = re.compile(r"^(\d+)(?:-(\d+))?$")


def parse_seeds(text: str) -> list[int]:
    """Track seeds from a comma list of seeds and inclusive ranges: "0-9,20,30-31" -> [0..9, 20, 30, 31].
    Order is kept. EvaluationError for anything else (empty items, descending ranges, negative or
    non-integer seeds, a seed listed twice, more than MAX_SEEDS seeds). The seeds are counted from the
    ranges before any range is expanded: "0-999999999" is refused at once."""
    if not isinstance(text, str) or not text.strip():
        raise EvaluationError("--seeds is empty: give seeds such as '0-9', '3' or '0-9,20,30-31'")
    ranges: list[tuple[str, int, int]] = []
    count = 0
    for item in text.split(","):
        item = item.strip()
        match = _SEED_ITEM.match(item)
        if match is None:
            shown = item if len(item) <= 40 else item[:40] + "..."
            raise EvaluationError(
                f"--seeds: {shown!r} is not a seed or an A-B range of seeds (seeds are integers >= 0; write e.g. '0-9,20,30-31')"
            )
        if any(len(group) > _MAX_SEED_DIGITS for group in match.groups() if group is not None):
            raise EvaluationError(f"--seeds: a seed in {item[:40]!r}... has more than {_MAX_SEED_DIGITS} digits")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise EvaluationError(f"--seeds: the range {item!r} goes down ({first} > {last}); write '{last}-{first}'")
        count += last - first + 1
        if count > MAX_SEEDS:
            raise EvaluationError(f"--seeds lists more than {MAX_SEEDS:,} seeds (at least {count:,}): evaluate fewer at a time")
        ranges.append((item, first, last))
    seeds: list[int] = []
    seen: set[int] = set()
    for _item, first, last in ranges:
        for seed in range(first, last + 1):
            if seed in seen:
                raise EvaluationError(f"--seeds: seed {seed} is listed more than once")
            seen.add(seed)
            seeds.append(seed)
    return seeds


SEED_SETS = ("validation", "test")  # --seeds validation|test: the config's validation_seeds or test_seeds


def set_name(seeds) -> str:
    """A set of seeds as --seeds would write it: 'A-B' for consecutive seeds, else the comma list."""
    seeds = list(seeds)
    if seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])
    return ",".join(map(str, seeds))


def seed_sets(text: str, cfg) -> list[tuple[str, list[int]]]:
    """--seeds as named sets of seeds: "validation" or "test" gives the config's `validation_seeds` or `test_seeds`
    (one set each, named 'A-B'); anything else is one set, parse_seeds(text), named by it. EvaluationError as
    parse_seeds, or for sets that share a seed."""
    if text not in SEED_SETS:
        return [(text, parse_seeds(text))]
    sets = [(set_name(seeds), [int(s) for s in seeds]) for seeds in getattr(cfg, f"{text}_seeds")]
    every = [s for _, seeds in sets for s in seeds]
    if len(every) > MAX_SEEDS:
        raise EvaluationError(f"--seeds {text}: its sets hold more than {MAX_SEEDS:,} seeds: evaluate them one at a time")
    if len(set(every)) != len(every):
        raise EvaluationError(f"--seeds {text}: two of the config's {text} sets share a seed")
    return sets


@dataclass(frozen=True)
class CheckpointPaths:
    weights: Path
    config: Path  # a settings.json (JSON values, read as data) or, only when the user passed it, a Python file
    config_is_default: bool  # no config was given or found next to the weights: config_files/config.py


def _config_next_to(folder: Path) -> Path | None:
    """The settings.json beside the weights, or None. A config_copy.py alone (an older run or model) is refused:
    a Python file found beside weights is never executed (a model folder is data, DESIGN §2, §7)."""
    settings = folder / SETTINGS
    if settings.is_file():
        return settings
    if (folder / CONFIG_COPY).is_file():
        raise EvaluationError(
            f"{folder} holds {CONFIG_COPY} (an older run's config, a Python file) but no {SETTINGS}: a Python file found "
            f"beside weights is not executed. If you trust it, pass it explicitly with --config {folder / CONFIG_COPY}; "
            f"or pass another config with --config"
        )
    return None


def resolve_checkpoint(
    weights: str | Path | None = None, run: str | Path | None = None, config: str | Path | None = None
) -> CheckpointPaths:
    """The weights file and config file to evaluate.

    Exactly one of `weights` (a weights_online.torch-style state_dict file) and `run` (a run folder
    save/<run>, whose newest complete checkpoint is used (save/<run>/checkpoints/<number>/, else an older
    run's save/<run>/checkpoint/), or a checkpoint or model folder itself, e.g. save/<run>/best). The config
    is `config` if given (a Python file is executed: the user asked for it), else the settings.json beside
    the weights (the values the run trained with, read as data), else config_files/config.py. Only a
    config_copy.py beside the weights (an older run) is refused: it is not executed unless passed as `config`."""
    if (weights is None) == (run is None):
        raise EvaluationError("give exactly one of --weights PATH and --run FOLDER")
    if weights is not None:
        weights_path = Path(weights)
        if not weights_path.exists():
            raise EvaluationError(f"--weights {weights_path}: no such file")
        if weights_path.is_dir():
            raise EvaluationError(f"--weights {weights_path} is a folder: give the weights file, or use --run for a run folder")
    else:
        run_dir = Path(run)
        if not run_dir.exists():
            raise EvaluationError(f"--run {run_dir}: no such folder")
        if not run_dir.is_dir():
            raise EvaluationError(f"--run {run_dir} is not a folder: give a run folder (save/<run>), or use --weights for a file")
        if (run_dir / WEIGHTS_ONLINE).is_file():  # a checkpoint folder
            weights_path = run_dir / WEIGHTS_ONLINE
        else:
            folder = find_checkpoint(run_dir)
            if folder is None:
                raise EvaluationError(
                    f"--run {run_dir}: no complete checkpoint in it (expected {run_dir / CHECKPOINTS}/<number>/{WEIGHTS_ONLINE}, "
                    f"or {run_dir / CHECKPOINT / WEIGHTS_ONLINE} for an older run, with its COMPLETE marker)"
                )
            weights_path = folder / WEIGHTS_ONLINE
            if not weights_path.is_file():
                raise EvaluationError(f"--run {run_dir}: checkpoint {folder} has no {WEIGHTS_ONLINE}")
    if config is not None:
        config_path = Path(config)
        if not config_path.is_file():
            raise EvaluationError(f"--config {config_path}: no such file")
        return CheckpointPaths(weights_path, config_path, False)
    found = _config_next_to(weights_path.parent)
    if found is not None:
        return CheckpointPaths(weights_path, found, False)
    return CheckpointPaths(weights_path, DEFAULT_CONFIG, True)


def load_eval_config(
    config_path: str | Path, max_race_seconds: float | None = None, frame_renderer: str | None = None, difficulty: int | None = None
):
    """The config to evaluate with (built for GAME_BACKEND), with the overall race cutoff, the frame renderer and
    SuperTuxKart's difficulty overridden if asked (a model's settings name the renderer its frames came from; older
    ones: "pygame").
    A .json file is read as settings values (config/values.py, nothing executed); any other file is a Python
    config file, executed (only ever one the user named with --config, or config_files/config.py)."""
    try:
        if Path(config_path).suffix.lower() == ".json":
            cfg = read_settings(config_path, game_backend=GAME_BACKEND)
        else:
            cfg = load_config(config_path, game_backend=GAME_BACKEND)
    except ConfigError as e:
        raise EvaluationError(f"config {config_path} is unusable: {e}") from None
    if max_race_seconds is not None:
        if (
            isinstance(max_race_seconds, bool)
            or not isinstance(max_race_seconds, (int, float))
            or not math.isfinite(max_race_seconds)
            or max_race_seconds <= 0
        ):
            raise EvaluationError(f"--max-race-seconds {max_race_seconds!r}: must be a positive number of seconds")
        cutoff_ms = int(round(max_race_seconds * 1000))
        if cutoff_ms < cfg.ms_per_action:
            raise EvaluationError(
                f"--max-race-seconds {max_race_seconds}: shorter than one action ({cfg.ms_per_action} ms), no race could be played"
            )
        cfg = cfg.replace(cutoff_rollout_if_race_not_finished_within_duration_ms=cutoff_ms)
    if frame_renderer is not None:
        if frame_renderer not in FRAME_RENDERERS:
            raise EvaluationError(f"--frame-renderer {frame_renderer!r}: expected one of {', '.join(FRAME_RENDERERS)}")
        cfg = cfg.replace(frame_renderer=frame_renderer)
    if difficulty is not None:
        if cfg.game_backend != SUPERTUXKART:
            raise EvaluationError(f"--difficulty is SuperTuxKart's race difficulty; this model plays {cfg.game_backend}")
        if difficulty not in SUPERTUXKART_DIFFICULTIES:
            raise EvaluationError(f"--difficulty {difficulty!r}: expected one of {', '.join(map(str, SUPERTUXKART_DIFFICULTIES))}")
        cfg = cfg.replace(supertuxkart_difficulty=difficulty)
    return cfg


# --------------------------------------------------------------------------------------------------
# The policy
# --------------------------------------------------------------------------------------------------
def load_state_dict_checked(network: torch.nn.Module, weights_path: str | Path, config_path: str | Path | None = None) -> None:
    """Load a saved state_dict into `network` (agents/iqn.py `load_network`); EvaluationError naming
    the mismatching entries if the weights were made for another architecture (another config)."""
    weights_path = Path(weights_path)
    try:
        load_network(network, weights_path)
    except FileNotFoundError:
        raise EvaluationError(f"weights file {weights_path}: no such file") from None
    except WeightsFileUnreadable as e:
        raise EvaluationError(str(e)) from None
    except NotAStateDict:
        raise EvaluationError(
            f"weights file {weights_path} is not a state_dict (a dict of named tensors, as the learner saves {WEIGHTS_ONLINE})"
        ) from None
    except StateDictMismatch as e:
        config_note = f" {config_path}" if config_path is not None else ""
        raise EvaluationError(
            f"weights file {weights_path} does not match the network of config{config_note} ({e.problems}); "
            f"pass the config the weights were trained with (--config, e.g. the {SETTINGS} of the run's checkpoint)"
        ) from None


def load_policy(paths: CheckpointPaths, cfg=None, max_race_seconds: float | None = None) -> GreedyPolicy:
    """The greedy policy of `paths` (cfg: already loaded config, else read from paths.config)."""
    if cfg is None:
        cfg = load_eval_config(paths.config, max_race_seconds)
    layout = float_layout_for(cfg)
    network = make_network(cfg, layout, len(cfg.inputs), "cpu")
    load_state_dict_checked(network, paths.weights, paths.config)
    return GreedyPolicy(cfg, network, layout, paths)


def open_policy(
    weights=None,
    run=None,
    config=None,
    max_race_seconds: float | None = None,
    frame_renderer: str | None = None,
    difficulty: int | None = None,
) -> GreedyPolicy:
    """resolve_checkpoint + load_eval_config + load_policy, the scripts' one call."""
    paths = resolve_checkpoint(weights=weights, run=run, config=config)
    cfg = load_eval_config(paths.config, max_race_seconds, frame_renderer, difficulty)
    return load_policy(paths, cfg)


def policy_options(args) -> dict:
    """`open_policy`'s arguments from the options of `add_policy_arguments` (and a script's own --difficulty)."""
    return {
        "weights": args.weights,
        "run": args.run,
        "config": args.config,
        "max_race_seconds": args.max_race_seconds,
        "frame_renderer": args.frame_renderer,
        "difficulty": getattr(args, "difficulty", None),
    }


def open_policy_from_args(args) -> GreedyPolicy:
    """`open_policy` from the options of `add_policy_arguments`, then torch's thread count from --threads.
    EvaluationError for --max-race-seconds under the native rules (their time limit is the game's)."""
    if args.max_race_seconds is not None and args.rules != RULES_TRAINING:
        raise EvaluationError(
            f"--max-race-seconds sets the training rules' overall cut-off: add --rules training (the {args.rules} rules "
            "end a race by CarRacing-v3's own time limit)"
        )
    policy = open_policy(**policy_options(args))
    torch.set_num_threads(args.threads)
    return policy


def evaluate_in_processes(args, maps: list[int] | list[MapSpec], workers: int, ai_races: int = 0) -> Iterator[dict]:
    """The race records of `maps` (track seeds, or named maps raced against the game's AI `ai_races` times each:
    evaluation/against_ai.py) as they end, played by `workers` spawned processes, each opening the policy of `args`
    (the options of `add_policy_arguments`) with its own game and one torch thread. GameCrashed when a race crashed
    twice; the processes end with the iterator."""
    options = policy_options(args)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(min(workers, len(maps)), initializer=_start_worker, initargs=(options, args.rules, ai_races)) as pool:
        yield from pool.imap_unordered(_worker_race, maps)


_worker: dict = {}  # a worker process's policy and game


def _start_worker(options: dict, rules: str, ai_races: int = 0) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it ends the pool
    torch.set_num_threads(1)
    policy = open_policy(**options)
    _worker.update(policy=policy, game=make_eval_game(policy, rules), ai_races=ai_races)
    if ai_races:  # the AI's races in a game of their own (evaluation/against_ai.py says why)
        _worker["ai_game"] = make_eval_game(policy, RULES_NATIVE)


def _worker_race(race_map: int | MapSpec) -> dict:
    if isinstance(race_map, MapSpec):
        return race_against_ai(_worker["game"], _worker["ai_game"], _worker["policy"], race_map, _worker["ai_races"])
    return next(evaluate_seeds(_worker["game"], _worker["policy"], [race_map]))


def named_eval_maps(cfg, text: str, option: str = "--tracks", seeds_option: str = "--seeds") -> list[MapSpec]:
    """The named maps `text` gives for the model's game (its backend's `named_maps`: a comma list, or the config's
    "held_out" / "test" maps), each checked raceable before any race; EvaluationError naming the problem, or saying that
    the model's game names its maps by seed. `option`, `seeds_option`: the script's names for the two."""
    named = game_backend(cfg.game_backend).named_maps
    if named is None:
        raise EvaluationError(
            f"{option} names the maps of a game whose maps have names (SuperTuxKart's tracks); this model plays {cfg.game_backend}, "
            f"whose maps are track seeds: use {seeds_option}"
        )
    try:
        return named(cfg, text)
    except ValueError as e:
        raise EvaluationError(f"{option} {text}: {e}") from None


def refuse_seeds_for_named_maps(cfg, option: str = "--seeds", tracks_option: str = "--tracks") -> None:
    """EvaluationError when the model's game names its maps (a seed cannot say which track to race)."""
    if game_backend(cfg.game_backend).named_maps is not None:
        raise EvaluationError(
            f"{option}: this model plays {cfg.game_backend}, whose maps are named tracks: use {tracks_option} with a track's name "
            f"(e.g. {tracks_option} lighthouse, or zengarden:reverse)"
        )


def describe_source(paths: CheckpointPaths) -> str:
    """'<weights> with config <config>', saying when the config is the repository default."""
    note = (
        " (no config given or found beside the weights: the repository default; its frame renderer may not be the one"
        " these weights learned on: --frame-renderer fast|pygame)"
        if paths.config_is_default
        else ""
    )
    return f"{paths.weights} with config {paths.config}{note}"


def make_eval_game(policy: GreedyPolicy, rules: str = RULES_NATIVE):
    """A game instance for the policy's config whose races end by `rules` (games/base.py RACE_RULES)."""
    return make_game_instance(policy.cfg, rules=rules)
