"""An Enduro run end to end, as a user runs it: `scripts/train.py --config config_files/enduro.py` (a small network and
short races, the game unchanged) with a real collector process, held-out episodes and best/, a resume, then
evaluate.py and watch.py on the best weights."""

import json
import re
import subprocess
import sys

import pytest

pytest.importorskip("ale_py")

from tests.faults.helpers import REPO_ROOT, Trainer, train_command  # noqa: E402
from trackmania_rl.learner.checkpoint import find_checkpoint  # noqa: E402

pytestmark = [pytest.mark.atari, pytest.mark.slow]

SMALL = """
# --- small and short, for a test: the game and its frames are the config's
conv_layers = [(8, 8, 4), (8, 4, 2)]
dense_hidden_dimension = 32
float_hidden_dim = 16
iqn_embedding_dimension = 16
cutoff_rollout_if_race_not_finished_within_duration_ms = 5_000
memory_size_schedule = [(0, (20_000, 500))]
held_out_seeds = [100]
held_out_eval_period_s = 10
save_frequency_s = 1_000
"""


def _run(command, **kwargs):
    return subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, **kwargs)


def test_an_enduro_run_trains_keeps_its_best_resumes_and_its_weights_play_and_show(tmp_path):
    # a file naming the shipped one as its base, as a user's own variant would: the run's live config is written whole
    (tmp_path / "config.py").write_text(f"base = {str(REPO_ROOT / 'config_files' / 'enduro.py')!r}\n" + SMALL)
    run = Trainer(train_command(tmp_path, "enduro", "--max-minutes", "0.6", "--collectors", "1"), cwd=tmp_path)
    try:
        run.wait_for(r"game gymnasium", 60)
        assert run.finish(240) == 0, run.log()[-4000:]
    finally:
        run.kill()
    log = run.log()
    run_dir = tmp_path / "save" / "enduro"
    stats = json.loads((find_checkpoint(run_dir) / "stats.json").read_text())
    assert stats["races"] > 0 and stats["batches_done"] > 0 and stats["frames_played"] > 3_000, log[-3000:]
    # the training return: Enduro's first day ends the game (~3,300 actions), and its episode's whole return is recorded
    episodes = [json.loads(line) for line in (run_dir / "episodes.jsonl").read_text().splitlines()]
    assert episodes and all(e["end_reason"] in ("terminated", "truncated") and e["episode_actions"] > 1_000 for e in episodes)
    assert [e["frames_played"] for e in episodes] == sorted(e["frames_played"] for e in episodes)
    held_out = [json.loads(line) for line in (run_dir / "held_out.jsonl").read_text().splitlines()]
    assert held_out and held_out[0]["rules"] == "native" and held_out[0]["seeds"] == [100]
    settings = json.loads((run_dir / "best" / "settings.json").read_text())
    assert settings["game_backend"] == "gymnasium" and settings["gymnasium_env_id"] == "ALE/Enduro-v5" and settings["frame_stack"] == 4
    best_score = json.loads((run_dir / "best" / "best.json").read_text())["score"]
    assert best_score == max(h["mean_native_score"] for h in held_out)

    resumed = Trainer(train_command(tmp_path, "enduro", "--max-minutes", "0.15", "--collectors", "1"), cwd=tmp_path)
    try:
        match = resumed.wait_for(r"resumed from .*: (\d+) frames, (\d+) batches", 120)
        assert (int(match.group(1)), int(match.group(2))) == (stats["frames_played"], stats["batches_done"])
        assert resumed.finish(240) == 0, resumed.log()[-4000:]
    finally:
        resumed.kill()
    assert json.loads((find_checkpoint(run_dir) / "stats.json").read_text())["frames_played"] >= stats["frames_played"]

    # the best weights play Enduro by its own rules: one whole episode per seed, scored by the game
    weights = run_dir / "best" / "weights_online.torch"
    evaluated = _run(["scripts/evaluate.py", "--weights", str(weights), "--seeds", "500000-500001"])
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    lines = [json.loads(line) for line in evaluated.stdout.splitlines()]
    races, summary = lines[:-1], lines[-1]
    assert [r["seed"] for r in races] == [500000, 500001] and all(r["end_reason"] in ("terminated", "truncated") for r in races)
    assert summary["game"] == "gymnasium" and summary["rules"] == "native"
    assert summary["mean_native_score"] == pytest.approx(sum(r["native_score"] for r in races) / 2)
    assert "gymnasium ALE/Enduro-v5" in evaluated.stderr

    video = tmp_path / "enduro.gif"
    watched = _run(["scripts/watch.py", "--weights", str(weights), "--seed", "500002", "--out", str(video)]
                   + ["--rules", "training", "--max-race-seconds", "2", "--height", "160"])  # fmt: skip
    assert watched.returncode == 0, watched.stderr[-3000:]
    record = json.loads(watched.stdout.splitlines()[-1])
    assert video.stat().st_size > 0 and record["frames"] == record["n_actions"] == 29  # 2 s of 66.7 ms actions
    assert re.search(r"watching .* on seed 500002", watched.stderr)
