"""Which held-out evaluation of a run each rule of choosing `best/` picks, from the run's held_out.jsonl.

    python scripts/select_best.py save/<run>
    python scripts/select_best.py save/<run> --first 10 --penalty 0 --penalty 10 --bar 800

A run whose config keeps every evaluation's weights (`held_out_keep_weights`) has them in save/<run>/held-out/; each
line of held_out.jsonl since 2026-12-02 holds every race's score (`native_scores`, in the order of its `seeds`). The
rules compared: the plain mean of the first K held-out tracks (`--first K`: 10 is how best/ was chosen before
2026-12-02, on tracks 100-109), and the mean of all of them minus P points per percent of races below the bar
(`--penalty P`, repeated; 0 is the plain mean). Prints one JSON line per rule (kind "pick": the rule, the minute it
picks, its score, the folder of its weights if kept) and one line per evaluation (kind "evaluation": minute, mean,
races below the bar, each rule's score). Compare the picks on the validation tracks
(`python scripts/evaluate.py --run <folder> --seeds validation`), never on the test tracks: choosing a rule is a
choice. Bad input (no such run, no scores in its records, a bad number) exits 2 naming it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trackmania_rl.learner.held_out import HELD_OUT_LOG, HELD_OUT_WEIGHTS


def rule_scores(entry: dict, first: list[int], penalties: list[float], bar: float) -> dict[str, float]:
    """Each rule's score of one evaluation (its races' scores in `native_scores`)."""
    scores = entry["native_scores"]
    rules = {}
    for k in first:
        if len(scores) >= k:
            rules[f"mean of the first {k}"] = sum(scores[:k]) / k
    below = sum(score < bar for score in scores)
    for penalty in penalties:
        mean = sum(scores) / len(scores)
        rules[f"mean of {len(scores)} - {penalty:g} per % below {bar:g}"] = mean - penalty * 100.0 * below / len(scores)
    return rules


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run folder (save/<run>) with its held_out.jsonl")
    parser.add_argument("--first", type=int, action="append", help="the plain mean of the first K held-out tracks (default: 10)")
    parser.add_argument("--penalty", type=float, action="append", help="points per percent of races below --bar (default: 0 and 10)")
    parser.add_argument("--bar", type=float, default=800.0, help="a race below this is lost (default 800)")
    args = parser.parse_args(argv)
    first = args.first or [10]
    penalties = args.penalty or [0.0, 10.0]
    if any(k < 1 for k in first) or any(p < 0 for p in penalties):
        print("error: --first must be >= 1 and --penalty >= 0", file=sys.stderr)
        return 2
    run = Path(args.run)
    log = run / HELD_OUT_LOG
    if not log.is_file():
        print(f"error: {log}: no such file (a run folder holds its held-out evaluations there)", file=sys.stderr)
        return 2
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    entries = [e for e in entries if e.get("native_scores")]
    if not entries:
        print(f"error: {log} has no evaluation with every race's score (native_scores: runs from 2026-12-02 on)", file=sys.stderr)
        return 2
    best: dict[str, tuple[float, dict]] = {}
    for entry in entries:
        scores = rule_scores(entry, first, penalties, args.bar)
        print(json.dumps({"kind": "evaluation", "minute": entry["minute"], "mean": entry["mean_native_score"],
                          "races": entry["races"], "below_bar": sum(s < args.bar for s in entry["native_scores"]),
                          "scores": scores}))  # fmt: skip
        for rule, score in scores.items():
            if rule not in best or score > best[rule][0]:  # the first of equals, as the learner keeps it
                best[rule] = (score, entry)
    for rule, (score, entry) in best.items():
        # a record of before 2026-12-02 04:40 names no folder: the one its minute gives
        folder = run / (entry.get("weights_folder") or f"{HELD_OUT_WEIGHTS}/minute-{entry['minute']:05.1f}")
        print(json.dumps({"kind": "pick", "rule": rule, "minute": entry["minute"], "score": score,
                          "weights": str(folder) if folder.is_dir() else None}))  # fmt: skip
    if not (run / HELD_OUT_WEIGHTS).is_dir():
        print(f"note: {run / HELD_OUT_WEIGHTS} does not exist: the run did not keep its evaluations' weights", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
