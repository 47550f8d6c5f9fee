"""Plot Enduro training returns of our runs against Google Dopamine's published baselines: return against emulator
frames (left, with Dopamine's IQN and DQN means over seeds and their range over seeds as a band) and against
wall-clock minutes (right), each episode a faint point and the mean of the last --window episodes a line.

    python scripts/plot_enduro.py --run save/<run>:IQN-ours [--run DIR[:LABEL] ...] --out docs/enduro.png

Each run folder holds episodes.jsonl (one line per ended episode, written by the learner) and, optionally,
held_out.jsonl or held_out_during_training.jsonl (greedy evaluations), plotted as markers when its lines carry frames_played and
mean_native_score (or mean).
"""

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

DOPAMINE_JSON = Path(__file__).resolve().parent.parent / "docs" / "runs" / "dopamine_enduro" / "dopamine_enduro.json"
DOPAMINE_AGENTS = ("IQN", "DQN")
DOPAMINE_COLORS = {"IQN": "tab:purple", "DQN": "tab:brown"}
HUMAN_SCORE = 860.5  # human reference used for Enduro normalisation since Wang et al. (2016)
NATURE_DQN_HUMAN_SCORE = 309.6  # "professional human games tester" score in Mnih et al. (2015)


def read_jsonl(path: Path) -> list[dict]:
    """Lines of a JSON-lines file, skipping any that do not parse (the last one may be half written by a live run)."""
    records = []
    with open(path) as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def trailing_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last `window` values at each point (fewer at the start), so the line never looks ahead."""
    sums = np.cumsum(np.insert(values, 0, 0.0))
    counts = np.minimum(np.arange(1, len(values) + 1), window)
    ends = np.arange(1, len(values) + 1)
    return (sums[ends] - sums[ends - counts]) / counts


def parse_run(spec: str) -> tuple[Path, str]:
    folder, _, label = spec.partition(":")
    return Path(folder), label or Path(folder).name


def plot_run(by_frames, by_minutes, folder: Path, label: str, args) -> float | None:
    """The run's episodes on both panels; returns the last episode's frames (millions), None when nothing was plotted."""
    episodes_file = folder / "episodes.jsonl"
    if not episodes_file.is_file():
        print(f"warning: {episodes_file} not found, run skipped", file=sys.stderr)
        return None
    keys = ("frames_played", "wall_time", "training_seconds", "episode_return")
    episodes = [e for e in read_jsonl(episodes_file) if all(k in e for k in keys)]
    if args.kind:
        episodes = [e for e in episodes if str(e.get("kind", "")).startswith(tuple(args.kind))]
    if not episodes:
        print(f"warning: {episodes_file} has no usable episodes, run skipped", file=sys.stderr)
        return None
    episodes.sort(key=lambda e: e["wall_time"])
    # The run started when its first episode ended minus the training time it had taken by then.
    start = episodes[0]["wall_time"] - episodes[0]["training_seconds"]
    frames = np.array([e["frames_played"] for e in episodes], dtype=float) * args.frame_skip / 1e6
    minutes = (np.array([e["wall_time"] for e in episodes]) - start) / 60
    returns = np.array([e["episode_return"] for e in episodes], dtype=float)
    smooth = trailing_mean(returns, args.window)
    line = by_frames.plot(frames, smooth, label=f"{label} (mean of last {args.window} episodes)")[0]
    by_minutes.plot(minutes, smooth, color=line.get_color(), label=line.get_label())
    for axis, x in ((by_frames, frames), (by_minutes, minutes)):
        axis.scatter(x, returns, s=5, alpha=0.2, color=line.get_color(), linewidths=0)
    # a run folder's own held_out.jsonl, or its copy in a record under docs/runs
    held_out = next((p for p in (folder / "held_out.jsonl", folder / "held_out_during_training.jsonl") if p.exists()), None)
    if held_out is not None:
        plot_held_out(by_frames, by_minutes, held_out, label, line.get_color(), args.frame_skip)
    return float(frames.max())


def plot_held_out(by_frames, by_minutes, path: Path, label: str, color, frame_skip: int) -> None:
    """Greedy evaluations, if the run has any in a shape we recognise; anything else is left out without a word."""
    if not path.is_file():
        return
    points = []
    for record in read_jsonl(path):
        score = record.get("mean_native_score", record.get("mean"))
        if isinstance(record.get("frames_played"), int | float) and isinstance(score, int | float):
            points.append((record["frames_played"] * frame_skip / 1e6, record.get("minute"), score))
    if not points:
        return
    style = {"marker": "D", "s": 28, "color": color, "edgecolors": "black", "linewidths": 0.5, "zorder": 3}
    by_frames.scatter([p[0] for p in points], [p[2] for p in points], label=f"{label}, greedy evaluation", **style)
    timed = [p for p in points if isinstance(p[1], int | float)]  # `minute` is since the run's start
    if timed:
        by_minutes.scatter([p[1] for p in timed], [p[2] for p in timed], label=f"{label}, greedy evaluation", **style)


def plot_dopamine(axis, path: Path, max_frames: float | None) -> None:
    """Dopamine's per-iteration mean over seeds as a line, with the range over seeds as a band."""
    if not path.is_file():
        print(f"warning: {path} not found, Dopamine baselines left out", file=sys.stderr)
        return
    data = json.loads(path.read_text())
    per_iteration = data.get("frames_per_iteration", 1_000_000) / 1e6
    for name in DOPAMINE_AGENTS:
        agent = data["agents"].get(name)
        if agent is None:
            continue
        mean = np.array(agent["mean"])
        seeds = np.array(agent["per_seed"])
        # Iteration i averages the training episodes of frames [i, i + 1) million, so its point sits mid-range.
        x = (np.arange(len(mean)) + 0.5) * per_iteration
        keep = x <= max_frames + per_iteration if max_frames else np.ones(len(x), dtype=bool)
        label = f"Dopamine {name} (GPU, {len(seeds)} seeds)"
        # Fixed colours keep the colour cycle, and so the runs' colours, the same whichever agents are in the file.
        style = {"color": DOPAMINE_COLORS.get(name, "grey"), "marker": "o", "markersize": 3, "linewidth": 1.2}
        axis.plot(x[keep], mean[keep], label=label, **style)
        axis.fill_between(x[keep], seeds.min(0)[keep], seeds.max(0)[keep], color=style["color"], alpha=0.12, linewidth=0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="append", default=[], metavar="DIR[:LABEL]", help="run folder with episodes.jsonl (repeatable)")
    parser.add_argument("--out", type=Path, default=Path("enduro.png"), help="PNG to write")
    parser.add_argument("--max-frames", type=float, help="x limit of the frames panel, in millions of emulator frames")
    parser.add_argument("--window", type=int, default=10, help="episodes in the running mean")
    parser.add_argument("--frame-skip", type=int, default=4, help="emulator frames per action played")
    parser.add_argument("--kind", action="append", help="only episodes whose kind starts with this (repeatable; default all)")
    parser.add_argument("--dopamine", type=Path, default=DOPAMINE_JSON, help="baseline curves (docs/runs/dopamine_enduro)")
    args = parser.parse_args(argv)

    figure, (by_frames, by_minutes) = plt.subplots(1, 2, figsize=(14, 5), sharey=True)
    run_frames = [f for f in (plot_run(by_frames, by_minutes, *parse_run(spec), args) for spec in args.run) if f is not None]
    if args.run and not run_frames:
        print("error: none of the runs had episodes to plot", file=sys.stderr)
        return 2
    # Without --max-frames, frame the runs (Dopamine's 200 M frames would squash them), or all of Dopamine if no run.
    max_frames = args.max_frames or (max(1.0, 1.1 * max(run_frames)) if run_frames else None)
    plot_dopamine(by_frames, args.dopamine, max_frames)
    for axis in (by_frames, by_minutes):
        axis.axhline(HUMAN_SCORE, color="black", linestyle="--", linewidth=0.9, label=f"human ({HUMAN_SCORE})")
        axis.axhline(
            NATURE_DQN_HUMAN_SCORE, color="grey", linestyle="--", linewidth=0.9, label=f"Nature DQN human ({NATURE_DQN_HUMAN_SCORE})"
        )
        axis.grid(alpha=0.3)
        axis.legend(loc="upper left", fontsize=7)
    by_frames.set_xlim(0, max_frames)
    by_minutes.set_xlim(left=0)
    by_frames.set_xlabel(f"emulator frames (millions; {args.frame_skip} per action)")
    by_minutes.set_xlabel("wall-clock time since the run's start (minutes)")
    by_frames.set_ylabel("Enduro training episode return (unclipped)")
    by_frames.set_title("Return against frames (Dopamine: sticky actions 0.25, training returns)", fontsize=10)
    by_minutes.set_title("Return against wall-clock time", fontsize=10)
    figure.suptitle("Atari Enduro: training return")
    figure.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
