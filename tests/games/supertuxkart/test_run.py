"""A SuperTuxKart run end to end, as a user runs it: `scripts/train.py --config` a file naming config_files/supertuxkart.py
as its base (a small network, short races), with a real collector and its game, held-out laps on named tracks and
best/, checkpoints and a resume; and a config whose tracks break the roles refused at start."""

import json
import subprocess

import pytest

from tests.faults.helpers import Trainer, train_command
from tests.games.supertuxkart.conftest import write_kart_config
from trackmania_rl.learner.checkpoint import find_checkpoint

pytestmark = [pytest.mark.supertuxkart, pytest.mark.slow]

# one short training track; the held-out evaluation every 10 s on one map, its races capped at 20 s of game time
SHORT = """
map_cycle = [("olivermath", 0, True, True), ("zengarden", 0, True, True)]
cutoff_rollout_if_race_not_finished_within_duration_ms = 20_000
memory_size_schedule = [(0, (20_000, 300))]
supertuxkart_held_out_tracks = ["minigolf:reverse"]
supertuxkart_native_time_cap_ms = 20_000
held_out_eval_period_s = 10
save_frequency_s = 1_000
"""


def test_a_kart_run_trains_chooses_its_best_on_held_out_tracks_and_resumes(tmp_path):
    write_kart_config(tmp_path, SHORT)
    run = Trainer(train_command(tmp_path, "kart", "--max-minutes", "0.6", "--collectors", "1"), cwd=tmp_path)
    try:
        run.wait_for(r"game supertuxkart", 300)
        assert run.finish(600) == 0, run.log()[-4000:]
    finally:
        run.kill()
    log = run.log()
    run_dir = tmp_path / "save" / "kart"
    stats = json.loads((find_checkpoint(run_dir) / "stats.json").read_text())
    assert stats["races"] > 0 and stats["batches_done"] > 0, log[-3000:]
    # the held-out evaluation raced the named map, by the native rules, and says so with its lap time
    held_out = [json.loads(line) for line in (run_dir / "held_out.jsonl").read_text().splitlines()]
    assert held_out, log[-3000:]
    for entry in held_out:
        assert entry["rules"] == "native" and entry["maps"] == ["minigolf:reverse"] and entry["races"] == 1
        assert len(entry["lap_times_s"]) == 1 and entry["score_bar"] is None and entry["races_below_bar"] is None
    assert "held-out maps (tracks) by the native rules" in log
    # best/: the evaluation with the highest mean (no tail bar), its maps named
    best = json.loads((run_dir / "best" / "best.json").read_text())
    assert best["score"] == max(entry["selection_score"] for entry in held_out) == max(e["mean_native_score"] for e in held_out)
    assert best["maps"] == ["minigolf:reverse"] and "held-out maps (tracks) minigolf:reverse" in best["metric"]
    settings = json.loads((run_dir / "best" / "settings.json").read_text())
    assert settings["game_backend"] == "supertuxkart" and settings["supertuxkart_held_out_tracks"] == ["minigolf:reverse"]

    resumed = Trainer(train_command(tmp_path, "kart", "--max-minutes", "0.15", "--collectors", "1"), cwd=tmp_path)
    try:
        match = resumed.wait_for(r"resumed from .*: (\d+) frames, (\d+) batches", 300)
        assert (int(match.group(1)), int(match.group(2))) == (stats["frames_played"], stats["batches_done"])
        assert resumed.finish(600) == 0, resumed.log()[-4000:]
    finally:
        resumed.kill()
    again = json.loads((find_checkpoint(run_dir) / "stats.json").read_text())  # the resumed run's own checkpoint
    assert again["frames_played"] >= stats["frames_played"] and again["batches_done"] >= stats["batches_done"]
    # best/ is carried over: replaced only by a better evaluation, never chosen again from nothing
    best_after = json.loads((run_dir / "best" / "best.json").read_text())
    assert again["held_out_best_score"] == best_after["score"] >= best["score"]


def test_a_track_in_two_roles_is_refused_at_start_naming_it(tmp_path):
    config = write_kart_config(tmp_path, 'supertuxkart_test_tracks = ["xr591", "hacienda:reverse"]\n')
    save = tmp_path / "save"
    result = subprocess.run(
        train_command(tmp_path, "refused", "--max-minutes", "1"), capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "supertuxkart_test_tracks holds 'hacienda:reverse', and supertuxkart_held_out_tracks holds track 'hacienda'" in result.stderr
    assert str(config) in result.stderr and not (save / "refused" / "checkpoints").exists()
