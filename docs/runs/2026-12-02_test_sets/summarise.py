"""Print each model's test figures per hundred from the evaluate.py records in this folder (mean, every-tile share,
races below 800, worst race), recomputed from the per-race lines."""

import json
import sys
from pathlib import Path

import numpy as np

SETS = ((600_000, 600_100), (700_000, 700_100), (800_000, 800_100))


def figures(scores, every_tile) -> str:
    return f"{np.mean(scores):.1f}, {100 * np.mean(every_tile):.0f} %, {sum(s < 800 for s in scores)}, {min(scores):.1f}"


def main(folder: Path) -> None:
    for path in sorted(folder.glob("*.jsonl")):
        races = [r for r in map(json.loads, path.read_text().splitlines()) if r["kind"] == "race"]
        cells = []
        for low, high in SETS:
            in_set = [r for r in races if low <= r["seed"] < high]
            cells.append(figures([r["native_score"] for r in in_set], [r["every_tile"] for r in in_set]))
        cells.append(figures([r["native_score"] for r in races], [r["every_tile"] for r in races]))
        print(f"| {path.stem} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
