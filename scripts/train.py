"""Train an IQN agent: collector processes play races, the learner (this process) learns from them.

    python scripts/train.py                      # resumes save/<run_name>/ if it exists
    python scripts/train.py --fresh              # start over (the previous run is moved aside, not deleted)
    python scripts/train.py --max-minutes 60     # train for an hour, save, exit 0
Watch it with: tensorboard --logdir tensorboard
"""

import argparse
import sys
from pathlib import Path

from trackmania_rl.config.loader import ConfigError
from trackmania_rl.learner.checkpoint import CheckpointError
from trackmania_rl.learner.train_loop import TrainOptions, run_training


def parse_args(argv=None) -> TrainOptions:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-name", default="carracing_default", help="folder name under save/ and tensorboard/")
    parser.add_argument("--fresh", action="store_true", help="start over instead of resuming an existing run")
    parser.add_argument("--max-minutes", type=float, default=None, help="train this long, save and exit 0")
    parser.add_argument("--config", default="config_files/config.py", help="run settings to start from")
    parser.add_argument("--config-copy", default="config_files/config_copy.py", help="the live copy the processes reload")
    parser.add_argument("--save-dir", default=None, help="overrides user_config.save_dir")
    parser.add_argument("--tensorboard-dir", default=None, help="overrides user_config.tensorboard_dir")
    parser.add_argument("--collectors", type=int, default=None, help="overrides collectors_count")
    parser.add_argument("--no-status-line", action="store_true")
    a = parser.parse_args(argv)
    if a.max_minutes is not None and a.max_minutes <= 0:
        parser.error("--max-minutes must be positive")
    if a.collectors is not None and a.collectors < 1:
        parser.error("--collectors must be at least 1")
    return TrainOptions(
        run_name=a.run_name,
        fresh=a.fresh,
        max_minutes=a.max_minutes,
        config=Path(a.config),
        config_copy=Path(a.config_copy),
        save_dir=a.save_dir,
        tensorboard_dir=a.tensorboard_dir,
        collectors=a.collectors,
        status_line=not a.no_status_line,
    )


def main(argv=None) -> int:
    options = parse_args(argv)
    try:
        return run_training(options)
    except (ConfigError, CheckpointError) as e:  # bad settings or an unusable checkpoint: a clear message, nothing lost
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
