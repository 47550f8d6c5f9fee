"""scripts/kart_ai_laps.py, the AI's anchor laps, on the real game: one short track at two difficulties, and the input
it refuses before any race."""

import json
import subprocess
import sys

import pytest

from trackmania_rl.config.loader import REPO_ROOT

pytestmark = pytest.mark.supertuxkart


def _run(*args):
    command = [sys.executable, str(REPO_ROOT / "scripts" / "kart_ai_laps.py"), *map(str, args)]
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)


def test_the_ais_laps_at_two_difficulties_the_lower_one_slower(kart_root):
    result = _run("--tracks", "olivermath", "--difficulty", "3,1", "--races", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    laps, summary = lines[:-1], lines[-1]
    assert [(line["map"], line["role"], line["difficulty"], line["race_seeds"]) for line in laps] == [
        ("olivermath", "training", 3, [0, 1]),
        ("olivermath", "training", 1, [0, 1]),
    ]
    for line in laps:  # a lap of olivermath: ~18 s at difficulty 3, ~24 s at 1 (the kart is slower there too)
        assert all(t is not None and 10 < t < 60 for t in line["lap_times_s"]), line
        assert line["best_s"] == min(line["lap_times_s"]) and line["worst_s"] == max(line["lap_times_s"])
    assert laps[1]["best_s"] > laps[0]["best_s"] * 1.1
    assert all(line["crashed_seeds"] == [] for line in laps)
    assert summary["kind"] == "summary" and summary["maps"] == 1 and summary["never_finished"] == [] and summary["crashed"] == 0


@pytest.mark.parametrize(
    "args, why",
    [
        (["--tracks", "stadium"], "'stadium'"),
        (["--tracks", "olivermath", "--difficulty", "5"], "--difficulty '5'"),
        (["--tracks", "olivermath", "--races", "0"], "--races must be >= 1"),
        (["--config", str(REPO_ROOT / "config_files" / "config.py")], "'carracing' config"),
    ],
)
def test_bad_input_is_refused_naming_it_before_any_race(kart_root, args, why):
    result = _run(*args)
    assert result.returncode == 2 and why in result.stderr and result.stdout == "", result.stderr[-2000:]
