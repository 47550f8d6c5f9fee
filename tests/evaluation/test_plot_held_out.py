"""scripts/plot_held_out.py: per run, the best held-out score and the first minute at the threshold; a plot."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "plot_held_out.py"


def _run_folder(path: Path, scores: list[tuple[float, float]]) -> Path:
    path.mkdir(parents=True)
    lines = [json.dumps({"minute": m, "mean_native_score": s, "std_native_score": 10.0, "seeds": [100]}) for m, s in scores]
    (path / "held_out.jsonl").write_text("\n".join(lines) + "\n")
    return path


def test_reports_each_run_and_writes_the_plot(tmp_path):
    a = _run_folder(tmp_path / "a", [(5.0, 400.0), (10.0, 905.0), (15.0, 880.0), (20.0, 930.0)])
    b = _run_folder(tmp_path / "b", [(5.0, 300.0), (10.0, 850.0)])
    out = tmp_path / "plot.png"
    result = subprocess.run([sys.executable, str(SCRIPT), str(a), str(b), "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert (first["best_mean_native_score"], first["best_minute"], first["first_minute_at_threshold"]) == (930.0, 20.0, 10.0)
    assert (second["best_mean_native_score"], second["first_minute_at_threshold"]) == (850.0, None)
    assert out.stat().st_size > 10_000


def test_a_damaged_log_is_named(tmp_path):
    run = _run_folder(tmp_path / "a", [(5.0, 400.0)])
    with open(run / "held_out.jsonl", "a") as f:
        f.write('{"minute": 10}\n')
    result = subprocess.run([sys.executable, str(SCRIPT), str(run), "--out", str(tmp_path / "p.png")], capture_output=True, text=True)
    assert result.returncode == 2 and "held_out.jsonl line 2 is not a held-out evaluation" in result.stderr


def test_labels_must_name_every_run(tmp_path):
    a, b = _run_folder(tmp_path / "a", [(5.0, 400.0)]), _run_folder(tmp_path / "b", [(5.0, 300.0)])
    command = [sys.executable, str(SCRIPT), str(a), str(b), "--out", str(tmp_path / "p.png"), "--labels"]
    refused = subprocess.run([*command, "only one"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "1 label(s) for 2 run(s)" in refused.stderr
    accepted = subprocess.run([*command, "2 cores", "GPU box"], capture_output=True, text=True, timeout=120)
    assert accepted.returncode == 0, accepted.stderr


def test_evaluations_by_other_rules_are_curves_of_their_own_and_another_file_can_be_read(tmp_path):
    """A run whose held_out_rules changed mid-run: the scores of the two rules do not compare, each is summed up apart."""
    run = tmp_path / "run"
    run.mkdir()
    rows = [(5.0, 880.0, "training"), (10.0, 920.0, "training"), (15.0, 890.0, "native"), (20.0, 910.0, "native")]
    lines = [json.dumps({"minute": m, "mean_native_score": s, "rules": r, "seeds": [100]}) for m, s, r in rows]
    (run / "held_out_native.jsonl").write_text("\n".join(lines) + "\n")
    command = [sys.executable, str(SCRIPT), str(run), "--file", "held_out_native.jsonl", "--out", str(tmp_path / "p.png")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    curves = {c["rules"]: c for c in map(json.loads, result.stdout.splitlines())}
    assert (curves["training"]["best_mean_native_score"], curves["training"]["first_minute_at_threshold"]) == (920.0, 10.0)
    assert (curves["native"]["best_mean_native_score"], curves["native"]["first_minute_at_threshold"]) == (910.0, 20.0)
