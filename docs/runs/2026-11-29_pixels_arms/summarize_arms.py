"""One line per arm of issue 48 played in one session: frames and batches at the end, the held-out curve, and its final
weights on the two sets of 100 unseen tracks by CarRacing-v3's own rules (mean ± std, median, every tile, lap, races
below 800). Usage: python summarize_arms.py RUN_DIR [RUN_DIR ...], each holding <name>.train.log and the evaluations
<name>_final_<seeds>_native.jsonl."""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

CHECKPOINT = re.compile(r"checkpoint saved to .*: (\d+) frames, (\d+) batches")
HELD_OUT = re.compile(r"held-out evaluation at minute ([\d.]+): mean native score ([-\d.]+)")
SEED_SETS = ("500000-500099", "200000-200099")


def evaluation(path: Path) -> dict | None:
    if not path.exists():
        return None
    races = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    races = [race for race in races if race.get("kind") == "race"]
    if not races:
        return None
    scores = [race["native_score"] for race in races]
    laps = [race["lap_time_s"] for race in races if race.get("lap_time_s") is not None]
    return {
        "races": len(scores),
        "mean": round(statistics.mean(scores), 1),
        "std": round(statistics.pstdev(scores), 1),
        "median": round(statistics.median(scores), 1),
        "every_tile": round(sum(race["every_tile"] for race in races) / len(races), 2),
        "lap_s": round(statistics.mean(laps), 2) if laps else None,
        "below_800": sum(score < 800 for score in scores),
    }


def arm(run_dir: Path, name: str) -> dict:
    log = (run_dir / f"{name}.train.log").read_text()
    checkpoints = CHECKPOINT.findall(log)
    frames, batches = (int(x) for x in checkpoints[-1]) if checkpoints else (None, None)
    held_out = [(float(minute), float(score)) for minute, score in HELD_OUT.findall(log)]
    first_900 = next((minute for minute, score in held_out if score >= 900), None)
    figures = {"arm": name, "frames": frames, "batches": batches, "held_out": held_out, "first_held_out_900_minute": first_900}
    for seeds in SEED_SETS:
        figures[seeds] = evaluation(run_dir / f"{name}_final_{seeds}_native.jsonl")
    return figures


def main() -> None:
    for run_dir in map(Path, sys.argv[1:]):
        for log in sorted(run_dir.glob("*.train.log")):
            print(json.dumps(arm(run_dir, log.name.removesuffix(".train.log"))))


if __name__ == "__main__":
    main()
