"""Plot a run's learning curve from its TensorBoard logs: native score of eval races on trained and blind
tracks (and explo races), against wall time and against frames played.

    python scripts/plot_learning_curve.py tensorboard/<run_name> --out docs/learning_curve.png
"""

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

SERIES = {
    "eval, trained tracks": "race/eval_trained/native_score",
    "eval, blind tracks": "race/eval_blind/native_score",
    "explo, trained tracks": "race/explo_trained/native_score",
}


def rolling_mean(values: np.ndarray, window: int) -> np.ndarray:
    if len(values) < window:
        return values
    kernel = np.ones(window) / window
    head = np.array([values[: i + 1].mean() for i in range(window - 1)])
    return np.concatenate([head, np.convolve(values, kernel, mode="valid")])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logdir", type=Path, help="tensorboard/<run_name> (all event files under it are read)")
    parser.add_argument("--out", type=Path, default=Path("learning_curve.png"))
    parser.add_argument("--window", type=int, default=10, help="races in the rolling mean")
    args = parser.parse_args(argv)
    if not args.logdir.is_dir():
        print(f"error: {args.logdir} is not a folder of TensorBoard logs", file=sys.stderr)
        return 2
    accumulator = EventAccumulator(str(args.logdir), size_guidance={"scalars": 0})
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
    if not tags & set(SERIES.values()):
        print(f"error: {args.logdir} has no race/*/native_score scalars (is it a training run's log folder?)", file=sys.stderr)
        return 2
    start = min(e.wall_time for tag in tags for e in accumulator.Scalars(tag)[:1])
    figure, (by_time, by_frames) = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
    for label, tag in SERIES.items():
        if tag not in tags:
            continue
        events = accumulator.Scalars(tag)
        minutes = np.array([(e.wall_time - start) / 60 for e in events])
        frames = np.array([e.step for e in events])
        scores = np.array([e.value for e in events])
        smooth = rolling_mean(scores, args.window)
        for axis, x in ((by_time, minutes), (by_frames, frames)):
            line = axis.plot(x, smooth, label=f"{label} (mean of {args.window})")[0]
            axis.scatter(x, scores, s=4, alpha=0.25, color=line.get_color())
    for axis, xlabel in ((by_time, "wall time (minutes)"), (by_frames, "frames played (actions)")):
        axis.axhline(900, color="grey", linestyle="--", linewidth=0.8)
        axis.set_xlabel(xlabel)
        axis.grid(alpha=0.3)
    by_time.set_ylabel("CarRacing native score")
    by_time.legend(loc="lower right", fontsize=8)
    figure.suptitle(f"Learning curve: {args.logdir.name}")
    figure.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
