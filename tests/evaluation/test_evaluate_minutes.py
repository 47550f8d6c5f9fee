"""scripts/evaluate_minutes.sh: a run's kept weights on the held-out tracks, one line per minute; a folder's name is
read as a minute only when it is one, never run as code (a run may come from another machine)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "carracing_default"
SCRIPT = ["bash", str(ROOT / "scripts" / "evaluate_minutes.sh")]


def _env(**extra) -> dict:
    """The script calls `python`, as a user's activated environment has it: this interpreter's, activated or not."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", **extra}


def _kept_weights(folder: Path) -> None:
    folder.mkdir(parents=True)
    shutil.copy(MODEL / "weights.torch", folder / "weights_online.torch")
    shutil.copy(MODEL / "settings.json", folder / "settings.json")


@pytest.mark.slow
def test_each_kept_minute_is_evaluated_and_a_folder_name_is_never_run(tmp_path):
    run = tmp_path / "run"
    _kept_weights(run / "at-minute-7.5")
    marker = tmp_path / "name_was_run"
    _kept_weights(run / f"at-minute-1);open('{marker}','w');(1")  # what pasting the name into Python would run
    result = subprocess.run([*SCRIPT, str(run), "2", "99"], capture_output=True, text=True, timeout=300, env=_env())
    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    assert "not a kept-weights folder name" in result.stderr
    # by the rules the run's own held-out evaluation played (the shipped model's settings: native), to their own file
    (line,) = (run / "by_minute" / "held_out_native.jsonl").read_text().splitlines()
    summary = json.loads(line)
    assert summary["minute"] == 7.5 and summary["races"] == 10 and summary["rules"] == "native"
    assert not list(run.glob("minute_*"))  # no minute 99 kept: no test-track evaluation


@pytest.mark.slow
def test_the_curve_by_the_rules_asked_for_and_a_bad_rule_is_refused(tmp_path):
    run = tmp_path / "run"
    _kept_weights(run / "at-minute-2")
    script = [*SCRIPT, str(run), "2", "99"]
    result = subprocess.run(script, capture_output=True, text=True, timeout=300, env=_env(HELD_OUT_RULES="training"))
    assert result.returncode == 0, result.stderr
    (line,) = (run / "by_minute" / "held_out.jsonl").read_text().splitlines()  # the training rules' file, as before
    summary = json.loads(line)
    assert summary["minute"] == 2.0 and summary["rules"] == "training" and 0.0 <= summary["every_tile_fraction"] <= 1.0
    assert not (run / "by_minute" / "held_out_native.jsonl").exists()
    refused = subprocess.run(script, capture_output=True, text=True, timeout=60, env=_env(HELD_OUT_RULES="gym"))
    assert refused.returncode == 2 and "HELD_OUT_RULES=gym" in refused.stderr
