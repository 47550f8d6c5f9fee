"""Train an IQN agent: collector processes play races, the learner (this process) learns from them.

    python scripts/train.py                      # resumes save/<run_name>/ if it exists
    python scripts/train.py --fresh              # start over (the previous run is moved aside, not deleted)
    python scripts/train.py --max-minutes 60     # train for an hour, save, exit 0
    python scripts/train.py --seed 2 --run-name seed2   # an independent run (learner, collectors, track order)
    python scripts/train.py --ray auto --ray-actors 4           # collector actors on a Ray cluster (pip install -e ".[ray]")
    python scripts/train.py --listen 127.0.0.1:8642 --collectors 0   # external game clients over HTTP (pip install -e ".[http]")
    python scripts/train.py --learners 2 --collectors 4   # 2 data-parallel learners on this machine (docs/cluster.md)
    python scripts/train.py --ray HEAD:6379 --learners 4   # 4 learners, one per node of a Ray cluster

Each run has its own live config, save/<run_name>/config_live.py: copied from --config when the run starts
(written whole, every setting in force, when that file names a `base`), kept as it is when the run resumes.
Edit it to tune the running run. One trainer at a time uses a run folder (it is locked); a second one is refused.
Exit status: 0 after a complete final save, 1 when the final save failed, 2 when the arguments, the
config or the run folder were refused (nothing was changed then).
Watch it with: tensorboard --logdir tensorboard
"""

import argparse
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

# Only the standard library before the arguments are checked: a refusal comes at once, before torch loads.
from trackmania_rl.config.schema import MAX_COLLECTORS_PER_CPU
from trackmania_rl.learner.run_folder import RUN_NAME_MAX_LENGTH, RunFolderError, StopSignals, validate_run_name

MAX_SEED = 2**31 - 1


@dataclass
class Arguments:
    run_name: str
    fresh: bool
    max_minutes: float | None
    config: Path
    save_dir: str | None
    tensorboard_dir: str | None
    collectors: int | None
    status_line: bool
    ray: str | None = None
    ray_actors: int | None = None
    listen: str | None = None
    new_token: bool = False
    seed: int | None = None
    learners: int = 1


def max_collectors() -> int:
    return MAX_COLLECTORS_PER_CPU * (os.cpu_count() or 1)


def max_local_learners() -> int:
    return os.cpu_count() or 1  # one core per rank at least


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--run-name",
        default="carracing_default",
        help=f"folder name under save/ and tensorboard/ (letters, digits, '.', '_', '-'; at most {RUN_NAME_MAX_LENGTH} characters)",
    )
    parser.add_argument("--fresh", action="store_true", help="start over: the run's previous folders are moved aside, never deleted")
    parser.add_argument("--max-minutes", type=float, default=None, help="train this long (finite, > 0), save and exit 0")
    parser.add_argument("--config", default="config_files/config.py", help="settings a new run starts from (copied to its live config)")
    parser.add_argument("--save-dir", default=None, help="overrides user_config.save_dir")
    parser.add_argument("--tensorboard-dir", default=None, help="overrides user_config.tensorboard_dir")
    parser.add_argument(
        "--collectors",
        type=int,
        default=None,
        help=f"overrides collectors_count: local collector processes (0 to {max_collectors()}; 0 needs --ray or --listen)",
    )
    parser.add_argument("--ray", default=None, metavar="auto|ADDRESS", help="overrides ray_address: collector actors on a Ray cluster")
    parser.add_argument("--ray-actors", type=int, default=None, help="overrides ray_actors: collector actors on the Ray cluster")
    parser.add_argument("--listen", default=None, metavar="HOST:PORT", help="overrides http_listen: serve external game clients")
    parser.add_argument("--new-token", action="store_true", help="replace the run's HTTP bearer token (save/<run>/http_token)")
    parser.add_argument("--seed", type=int, default=None, help=f"the run's seed (0 to {MAX_SEED}): learner, collectors, track order")
    parser.add_argument(
        "--learners",
        type=int,
        default=1,
        help=f"data-parallel learner ranks (default 1): local processes (at most {max_local_learners()} here), "
        "or one per node of the cluster of --ray ADDRESS",
    )
    parser.add_argument("--no-status-line", action="store_true")
    return parser


def parse_args(argv=None) -> Arguments:
    """The arguments, every one checked; argparse exits 2 with a message naming the option otherwise."""
    parser = build_parser()
    a = parser.parse_args(argv)
    if a.max_minutes is not None and not (math.isfinite(a.max_minutes) and a.max_minutes > 0):
        parser.error(f"--max-minutes {a.max_minutes}: must be a finite number of minutes greater than 0")
    if a.collectors is not None:
        if a.collectors < 0:
            parser.error(f"--collectors {a.collectors}: must be 0 or more")
        if a.collectors == 0 and a.ray is None and a.listen is None:
            parser.error("--collectors 0: no local collector needs another rollout source (--ray or --listen)")
        if a.collectors > max_collectors():
            parser.error(
                f"--collectors {a.collectors}: at most {max_collectors()} ({MAX_COLLECTORS_PER_CPU} per CPU core, "
                f"{os.cpu_count() or 1} core(s) here)"
            )
    if a.seed is not None and not 0 <= a.seed <= MAX_SEED:
        parser.error(f"--seed {a.seed}: must be from 0 to {MAX_SEED}")
    if a.learners < 1:
        parser.error(f"--learners {a.learners}: must be 1 or more")
    if a.learners > max_local_learners() and a.ray in (None, "auto"):
        parser.error(
            f"--learners {a.learners}: at most {max_local_learners()} local ranks on this machine (one core each); "
            "more need a Ray cluster (--ray ADDRESS: one rank per node)"
        )
    if a.ray_actors is not None and a.ray_actors < 0:
        parser.error(f"--ray-actors {a.ray_actors}: must be 0 or more")
    if a.ray is not None and not a.ray.strip():
        parser.error('--ray: give "auto" or a Ray cluster address (HOST:PORT)')
    if a.listen is not None:
        host, _, port = a.listen.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            parser.error(f"--listen {a.listen}: give HOST:PORT with a port from 1 to 65535, for example 127.0.0.1:8642")
    try:
        validate_run_name(a.run_name)
    except RunFolderError as e:
        parser.error(str(e))
    return Arguments(
        run_name=a.run_name,
        fresh=a.fresh,
        max_minutes=a.max_minutes,
        config=Path(a.config),
        save_dir=a.save_dir,
        tensorboard_dir=a.tensorboard_dir,
        collectors=a.collectors,
        status_line=not a.no_status_line,
        ray=a.ray,
        ray_actors=a.ray_actors,
        listen=a.listen,
        new_token=a.new_token,
        seed=a.seed,
        learners=a.learners,
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    # Ctrl-C or `kill` while torch and the game load: stop at once, nothing has been touched yet.
    # run_training installs its own handlers first thing (and puts these back when it returns).
    early = StopSignals().install()
    try:
        try:
            from trackmania_rl.config.loader import ConfigError
            from trackmania_rl.learner.checkpoint import CheckpointError
            from trackmania_rl.learner.train_loop import TrainOptions, run_training
            from trackmania_rl.learner_group.coordinator import learner_group_for
            from trackmania_rl.learner_group.rendezvous import LearnerGroupError

            early.start_loop()  # raises KeyboardInterrupt if a signal came during the imports
        except KeyboardInterrupt:
            print("interrupted before the run started: nothing was changed", file=sys.stderr)
            return 0
        try:
            options, group = learner_group_for(TrainOptions(**vars(args)))
            return run_training(options, group=group)
        except (ConfigError, CheckpointError, RunFolderError) as e:
            # bad settings, an unusable checkpoint, a run folder in use: a clear message, nothing lost
            print(f"error: {e}", file=sys.stderr)
            return 2
        except LearnerGroupError as e:  # a rank failed to start: rank 0 saved what it had
            print(f"error: {e}", file=sys.stderr)
            return 1
    finally:
        early.restore()


if __name__ == "__main__":
    sys.exit(main())
