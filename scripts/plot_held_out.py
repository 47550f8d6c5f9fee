"""Plot the held-out evaluations of one or more runs against training minutes, and print for each run its best
score and the first minute it reached a threshold (docs/results.md's learning curves).

    python scripts/plot_held_out.py save/run_seed1 save/run_seed2 --out docs/held_out.png [--threshold 900] [--labels A B]

Reads save/<run>/held_out.jsonl (one line per evaluation, written by the learner: learner/held_out.py), or another
file of the same lines in each folder (`--file held_out_native.jsonl`: scripts/evaluate_minutes.sh's curve by the
native rules). Evaluations played by different rules (`"rules"`, a run whose `held_out_rules` was changed) do not
compare: each rules' are a curve of their own, labelled with them. Prints one JSON object per curve: run, rules,
evaluations, best_mean_native_score, best_minute, first_minute_at_threshold.
"""

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from trackmania_rl.learner.held_out import HELD_OUT_LOG


def read_evaluations(run_dir: Path, name: str = HELD_OUT_LOG) -> list[dict]:
    """The run's evaluations, in order; ValueError naming the file and line for anything unreadable."""
    path = run_dir / name
    evaluations = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        try:
            entry = json.loads(line)
            evaluations.append({"minute": float(entry["minute"]), "score": float(entry["mean_native_score"]), **entry})
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path} line {number} is not a held-out evaluation: {e}") from None
    return evaluations


def summary(run_dir: Path, evaluations: list[dict], threshold: float) -> dict:
    best = max(evaluations, key=lambda e: e["score"])
    reached = [e["minute"] for e in evaluations if e["score"] >= threshold]
    return {
        "run": str(run_dir),
        "rules": evaluations[0].get("rules", "training"),
        "evaluations": len(evaluations),
        "best_mean_native_score": best["score"],
        "best_minute": best["minute"],
        "first_minute_at_threshold": reached[0] if reached else None,
        "threshold": threshold,
    }


def plot_curve(axis, run_dir: Path, evaluations: list[dict], label: str, threshold: float) -> None:
    """One curve (evaluations by one rules): its summary printed, its means drawn with ± their spread over tracks."""
    print(json.dumps(summary(run_dir, evaluations, threshold)))
    minutes = [e["minute"] for e in evaluations]
    means = [e["score"] for e in evaluations]
    spread = [e.get("std_native_score") or 0.0 for e in evaluations]
    low = [m - s for m, s in zip(means, spread, strict=True)]
    high = [m + s for m, s in zip(means, spread, strict=True)]
    line = axis.plot(minutes, means, marker="o", markersize=3, label=label)[0]
    axis.fill_between(minutes, low, high, color=line.get_color(), alpha=0.12)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, nargs="+", help="run folders (save/<run_name>)")
    parser.add_argument("--out", type=Path, default=Path("held_out.png"))
    parser.add_argument("--threshold", type=float, default=900.0, help="score whose first crossing is reported (and drawn)")
    parser.add_argument("--labels", nargs="+", help="one legend label per run (default: the folders' names)")
    parser.add_argument("--file", default=HELD_OUT_LOG, help=f"the evaluations' file in each run folder (default {HELD_OUT_LOG})")
    args = parser.parse_args(argv)
    if args.labels is not None and len(args.labels) != len(args.runs):
        parser.error(f"--labels: {len(args.labels)} label(s) for {len(args.runs)} run(s)")
    labels = args.labels or [run_dir.name for run_dir in args.runs]
    figure, axis = plt.subplots(figsize=(8, 4.5))
    for run_dir, label in zip(args.runs, labels, strict=True):
        try:
            evaluations = read_evaluations(run_dir, args.file)
        except (OSError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        if not evaluations:
            print(f"error: {run_dir / args.file} holds no evaluation yet", file=sys.stderr)
            return 2
        by_rules: dict[str, list[dict]] = {}
        for evaluation in evaluations:
            by_rules.setdefault(evaluation.get("rules", "training"), []).append(evaluation)
        for rules, curve in by_rules.items():
            plot_curve(axis, run_dir, curve, label if len(by_rules) == 1 else f"{label} ({rules} rules)", args.threshold)
    axis.axhline(args.threshold, color="grey", linestyle="--", linewidth=0.8)
    axis.set_xlabel("training time (minutes)")
    axis.set_ylabel("held-out mean native score (± std over tracks)")
    axis.grid(alpha=0.3)
    axis.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.out, dpi=110)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
