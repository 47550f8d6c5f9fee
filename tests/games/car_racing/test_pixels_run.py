"""A pixels-only CarRacing run end to end, as a user runs it: `scripts/train.py --config config_files/carracing_pixels.py`
(a small network, the frames and floats the config's) with a real collector process, held-out races and best/, a
resume, then evaluate.py and watch.py on the best weights (the ONNX export: tests/agents/test_onnx_export_pixels.py)."""

import json
import subprocess
import sys

import pytest

from tests.faults.helpers import REPO_ROOT, Trainer, train_command
from trackmania_rl.learner.checkpoint import find_checkpoint

pytestmark = pytest.mark.slow

SMALL = """
# --- small and short, for a test: the frames and floats are the config's
conv_layers = [(8, 4, 2), (8, 4, 2)]
dense_hidden_dimension = 32
float_hidden_dim = 16
iqn_embedding_dimension = 16
memory_size_schedule = [(0, (20_000, 300))]
held_out_seeds = [100]
held_out_eval_period_s = 10
save_frequency_s = 1_000
"""


def _run(command, **kwargs):
    return subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, **kwargs)


def test_a_pixels_only_run_trains_keeps_its_best_resumes_and_its_weights_play_and_show(tmp_path):
    # a file naming the shipped one as its base, as a user's own variant would: the run's live config is written whole
    (tmp_path / "config.py").write_text(f"base = {str(REPO_ROOT / 'config_files' / 'carracing_pixels.py')!r}\n" + SMALL)
    run = Trainer(train_command(tmp_path, "pixels", "--max-minutes", "0.6", "--collectors", "1"), cwd=tmp_path)
    try:
        run.wait_for(r"game carracing", 60)
        assert run.finish(240) == 0, run.log()[-4000:]
    finally:
        run.kill()
    log = run.log()
    run_dir = tmp_path / "save" / "pixels"
    stats = json.loads((find_checkpoint(run_dir) / "stats.json").read_text())
    assert stats["races"] > 0 and stats["batches_done"] > 0, log[-3000:]
    settings = json.loads((run_dir / "best" / "settings.json").read_text())
    assert settings["float_inputs"] == "own_actions" and settings["frame_stack"] == 4
    held_out = [json.loads(line) for line in (run_dir / "held_out.jsonl").read_text().splitlines()]
    assert held_out and held_out[0]["rules"] == "native" and held_out[0]["seeds"] == [100]

    resumed = Trainer(train_command(tmp_path, "pixels", "--max-minutes", "0.15", "--collectors", "1"), cwd=tmp_path)
    try:
        match = resumed.wait_for(r"resumed from .*: (\d+) frames, (\d+) batches", 120)
        assert (int(match.group(1)), int(match.group(2))) == (stats["frames_played"], stats["batches_done"])
        assert resumed.finish(240) == 0, resumed.log()[-4000:]
    finally:
        resumed.kill()

    # the best weights race by CarRacing's own rules, seeing what they were trained on
    weights = run_dir / "best" / "weights_online.torch"
    evaluated = _run(["scripts/evaluate.py", "--weights", str(weights), "--seeds", "500000-500001"])
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    lines = [json.loads(line) for line in evaluated.stdout.splitlines()]
    races, summary = lines[:-1], lines[-1]
    assert [r["seed"] for r in races] == [500000, 500001] and summary["rules"] == "native"
    assert summary["mean_native_score"] == pytest.approx(sum(r["native_score"] for r in races) / 2)

    video = tmp_path / "pixels.gif"
    watched = _run(["scripts/watch.py", "--weights", str(weights), "--seed", "500002", "--out", str(video)]
                   + ["--rules", "training", "--max-race-seconds", "2", "--height", "160"])  # fmt: skip
    assert watched.returncode == 0, watched.stderr[-3000:]
    assert video.stat().st_size > 0
