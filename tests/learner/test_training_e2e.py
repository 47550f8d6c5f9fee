"""End to end: `scripts/train.py` with real collector processes on CarRacing, a tiny network, about a minute.

One run checks: rollouts arrive, batches train, the shared network's version rises and collectors act with
newer versions, live config edits (an invalid one refused, a valid one applied), a killed collector is
replaced, and a checkpoint is written. The live config is the run's own save/<run>/config_live.py. A second run
resumes it (keeping that live file, edits included) and continues counters and buffer.
"""

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.faults.helpers import Trainer, process_exists, train_command
from tests.helpers import write_tiny_config
from trackmania_rl.learner.checkpoint import find_checkpoint

CONFIG_LIVE = Path("save") / "e2e" / "config_live.py"  # the run's own live config, under tmp_path


def start_train(tmp_path: Path, minutes: float, collectors: int) -> Trainer:
    return Trainer(train_command(tmp_path, "e2e", "--max-minutes", str(minutes), "--collectors", str(collectors)), cwd=tmp_path)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    # keep the modification time moving even within one clock tick
    path.write_text(text.replace(old, new))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))


def _stats(tmp_path: Path, run_name: str) -> dict:
    folder = find_checkpoint(tmp_path / "save" / run_name)
    assert folder is not None, "no complete checkpoint"
    return json.loads((folder / "stats.json").read_text())


@pytest.mark.slow
def test_train_end_to_end_then_resume(tmp_path):
    config = write_tiny_config(tmp_path)
    # held-out evaluations every 25 s of training on two short tracks; weights kept at half a minute
    config.write_text(config.read_text() + "held_out_seeds = [100, 101]\nheld_out_eval_period_s = 25\nkeep_weights_at_minutes = [0.5]\n")
    run = start_train(tmp_path, minutes=1.2, collectors=2)
    config_live = tmp_path / CONFIG_LIVE
    try:
        run.wait_for(r"live config of this run: .*config_live.py \(copied from", 60)
        first_pid = int(run.wait_for(r"collector 0 started \(pid (\d+)\)", 60).group(1))
        run.wait_for(r"collector 1 started", 60)

        # live config: an edit that fails validation is refused, the run keeps going
        run.wait_for(r"\[collector 0\] ready", 60)
        run.wait_for(r"\[collector 1\] ready", 60)
        _edit(config_live, "tau_epsilon_boltzmann = 0.01", "tau_epsilon_boltzmann = -5")
        run.wait_for(r"config edit refused.*tau_epsilon_boltzmann", 60)
        # a valid edit is applied; a restart-only one is reported and held back
        _edit(config_live, "tau_epsilon_boltzmann = -5", "tau_epsilon_boltzmann = 0.02")
        run.wait_for(r"\[learner\] config reloaded: tau_epsilon_boltzmann changed", 60)
        run.wait_for(r"\[collector 1\] config reloaded: tau_epsilon_boltzmann changed", 60)
        _edit(config_live, "# --- tiny settings", "n_steps = 2\n# --- tiny settings")
        run.wait_for(r"\[learner\] config setting `n_steps` = 2 needs a restart", 60)

        # kill a collector mid-run: it is replaced and the run goes on
        time.sleep(8)
        os.kill(first_pid, signal.SIGKILL)
        # the replacement's start line follows the restart line (the log may hold only the first for a moment)
        restarted = run.wait_for(r"collector 0 died with exit code -9: restarting it[\s\S]*collector 0 started \(pid (\d+)\)", 60)
        assert int(restarted.group(1)) != first_pid
        assert len(re.findall(r"collector 0 started \(pid (\d+)\)", run.log())) == 2
        assert run.finish(180) == 0, run.log()[-4000:]
    finally:
        run.kill()
    log1 = run.log()
    assert "Traceback" not in log1.split("collector 0 died")[0], log1
    stats1 = _stats(tmp_path, "e2e")
    assert stats1["races"] > 0 and stats1["memories_generated"] > 0
    assert stats1["batches_done"] > 0
    assert stats1["policy_version"] > 1
    assert stats1["newest_policy_version_acted"] > 1  # collectors acted with published weights
    assert stats1["collector_restarts"] == 1
    restarted_summary = re.search(r"collector 0: (\d+) rollouts since its last start, restarted 1 time", log1)
    assert restarted_summary and int(restarted_summary.group(1)) >= 1, log1[-3000:]
    saved = re.findall(r"checkpoint saved to .*: (\d+) frames, (\d+) batches, buffer (\d+) \+ test (\d+) transitions", log1)
    assert saved, log1[-3000:]
    frames1, batches1, buffer1, test1 = map(int, saved[-1])
    assert frames1 == stats1["frames_played"] and buffer1 > 0
    assert list((tmp_path / "tensorboard" / "e2e").glob("events.out.tfevents.*"))
    assert re.search(r"training precision (float32|bfloat16): auto, probe of the train step .* float32 [\d.]+ ms, bfloat16", log1)
    held_out = [json.loads(line) for line in (tmp_path / "save" / "e2e" / "held_out.jsonl").read_text().splitlines()]
    assert len(held_out) >= 2 and [h["seeds"] for h in held_out] == [[100, 101]] * len(held_out)
    assert stats1["held_out_evaluations"] == len(held_out) and "held-out evaluation at minute" in log1
    best = json.loads((tmp_path / "save" / "e2e" / "best" / "best.json").read_text())
    for h in held_out:  # the selection score weighs the races below the bar (issue 64)
        below = sum(score < h["score_bar"] for score in h["native_scores"])
        assert h["races_below_bar"] == below
        expected = h["mean_native_score"] - h["tail_penalty"] * 100.0 * below / h["races"]
        assert h["selection_score"] == pytest.approx(expected)
    assert best["score"] == max(h["selection_score"] for h in held_out) == stats1["held_out_best_score"]
    assert (tmp_path / "save" / "e2e" / "at-minute-0.5" / "weights_online.torch").is_file()
    # no collector outlived the run
    for pid in map(int, re.findall(r"started \(pid (\d+)\)", log1)):
        assert not process_exists(pid), f"collector pid {pid} outlived the run"

    # resume: counters, weights and buffers continue; Ctrl-C stops it cleanly with a final save
    # the run's live file keeps its edits for the resume; the restart-only n_steps edit is undone (the saved
    # buffer was built with the old n_steps: resuming with the new one is refused, a user would use --fresh)
    _edit(config_live, "n_steps = 2\n# --- tiny settings", "# --- tiny settings")
    live_text = config_live.read_text()
    assert "tau_epsilon_boltzmann = 0.02" in live_text
    run2 = start_train(tmp_path, minutes=5, collectors=1)
    try:
        run2.wait_for(r"live config of this run: .*config_live.py \(kept from the previous session", 60)
        resumed = run2.wait_for(r"resumed from .*: (\d+) frames, (\d+) batches, buffer (\d+) \+ test (\d+) transitions", 90)
        assert tuple(map(int, resumed.groups())) == (frames1, batches1, buffer1, test1)
        run2.wait_for(r"\[collector 0\] ready", 60)
        time.sleep(15)
        run2.process.send_signal(signal.SIGINT)
        assert run2.finish(120) == 0, run2.log()[-4000:]
    finally:
        run2.kill()
    log2 = run2.log()
    assert config_live.read_text() == live_text  # the run's own live file, edits included, was kept
    assert "interrupted: stopping collectors and saving" in log2
    for pid in map(int, re.findall(r"started \(pid (\d+)\)", log2)):
        assert not process_exists(pid), f"collector pid {pid} outlived the interrupted run"
    stats2 = _stats(tmp_path, "e2e")
    assert stats2["frames_played"] > stats1["frames_played"]
    assert stats2["races"] > stats1["races"]
    assert stats2["policy_version"] > stats1["policy_version"]
    assert stats2["collector_restarts"] == 1

    # a learner killed outright (SIGKILL: no chance to clean up) takes its collectors with it, and the
    # run's last checkpoint is intact
    run3 = start_train(tmp_path, minutes=5, collectors=1)
    try:
        run3.wait_for(r"resumed from", 90)
        pid = int(run3.wait_for(r"collector 0 started \(pid (\d+)\)", 60).group(1))
        run3.wait_for(r"\[collector 0\] ready", 60)
        run3.process.kill()
        run3.finish(30)
        deadline = time.time() + 15
        while process_exists(pid) and time.time() < deadline:
            time.sleep(0.2)
        assert not process_exists(pid), "a collector outlived its killed learner"
    finally:
        run3.kill()
    assert _stats(tmp_path, "e2e") == stats2
