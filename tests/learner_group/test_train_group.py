"""scripts/train.py --learners 2 on this machine: two ranks (local processes, gloo on loopback) with a local collector
each train, every checkpoint holds both ranks' shards and equal weight digests, and the run resumes with one learner
and with two; SIGTERM saves once and exits 0; a rank killed or hung stops the run with a final checkpoint and exit 1
naming it; a source configuration that leaves a rank with nothing to learn from is refused with exit 2."""

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.faults.helpers import Trainer, run_train, train_command
from tests.helpers import write_tiny_config
from trackmania_rl.learner import checkpoint as ckpt
from trackmania_rl.serialization import safe_torch_load

pytestmark = pytest.mark.slow

SAVED = r"checkpoint saved to (\S+): (\d+) frames, (\d+) batches"


def _config(tmp_path, extra: str = "") -> Path:
    config = write_tiny_config(tmp_path, save_frequency_s=4)
    config.write_text(
        config.read_text() + "cutoff_rollout_if_race_not_finished_within_duration_ms = 1_600\nheld_out_eval_period_s = 0\n" + extra
    )
    return config


def _saves(trainer: Trainer) -> list[tuple[Path, int, int]]:
    return [(Path(folder.rstrip(":")), int(frames), int(batches)) for folder, frames, batches in re.findall(SAVED, trainer.log())]


def _wait_for_save(trainer: Trainer, more_batches_than: int, timeout_s: float = 180) -> tuple[Path, int, int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        saves = [save for save in _saves(trainer) if save[2] > more_batches_than]
        if saves:
            return saves[-1]
        assert trainer.process.poll() is None, trainer.log()[-4000:]
        time.sleep(0.5)
    raise AssertionError(f"no checkpoint with more than {more_batches_than} batches within {timeout_s} s:\n{trainer.log()[-4000:]}")


def _stop(trainer: Trainer, signum=signal.SIGTERM) -> tuple[Path, int, int]:
    """Stop with `signum`: exit 0 and exactly one checkpoint saved after it. That checkpoint."""
    saved_before = len(_saves(trainer))
    trainer.signal(signum)
    assert trainer.finish(120) == 0, trainer.log()[-4000:]
    after = _saves(trainer)[saved_before:]
    assert len(after) == 1, trainer.log()[-4000:]
    return after[0]


def _stats(folder: Path) -> dict:
    return json.loads((folder / ckpt.STATS).read_text())


def _rank_pid(trainer: Trainer, rank: int) -> int:
    return int(trainer.wait_for(rf"\[rank {rank}\] pid (\d+):", 180).group(1))


def test_two_ranks_train_identically_save_every_shard_and_resume_with_one_and_with_two(tmp_path):
    _config(tmp_path)
    group = train_command(tmp_path, "group", "--learners", "2", "--collectors", "2")
    trainer = Trainer(group, cwd=tmp_path)
    try:
        _wait_for_save(trainer, 0)
        folder, frames, batches = _stop(trainer)
    finally:
        trainer.kill()
    stats = _stats(folder)
    assert stats["learners"] == 2 and stats["batches_done"] == batches > 0 and stats["frames_played"] == frames
    digests = stats["rank_weight_digests"]
    assert len(digests) == 2 and digests[0] == digests[1] == ckpt.weights_digest(safe_torch_load(folder / ckpt.WEIGHTS_ONLINE))
    sizes = [rank["buffer_size"] for rank in stats["ranks"]]
    assert all(size > 0 for size in sizes) and stats["races"] == sum(rank["races"] for rank in stats["ranks"])
    assert all((folder / name).is_file() for name in ("buffer", "buffer_test", "buffer.rank1", "buffer_test.rank1"))

    # one learner resumes the group's run: both shards in its buffer
    trainer = Trainer(train_command(tmp_path, "group", "--collectors", "1"), cwd=tmp_path)
    try:
        resumed = trainer.wait_for(r"resumed from (\S+): (\d+) frames, (\d+) batches, buffer (\d+) \+", 120)
        assert (Path(resumed.group(1)), int(resumed.group(3)), int(resumed.group(4))) == (folder, batches, sum(sizes))
        _wait_for_save(trainer, batches)
        folder, frames, batches = _stop(trainer, signal.SIGINT)
    finally:
        trainer.kill()
    stats = _stats(folder)
    assert stats["learners"] == 1 and len(stats["rank_weight_digests"]) == 1

    # two learners resume the one learner's run: rank 1 starts from its weights, with an empty shard
    trainer = Trainer(group, cwd=tmp_path)
    try:
        weights = ckpt.weights_digest(safe_torch_load(folder / ckpt.WEIGHTS_ONLINE))
        started = trainer.wait_for(r"every rank started; each holds the weights of digest (\w+)", 180)
        assert started.group(1) == weights
        assert re.search(rf"\[rank 1\] pid \d+: 1 local collector\(s\), buffer 0 \+ test 0 transitions, {batches} batches", trainer.log())
        _wait_for_save(trainer, batches)
        folder, _, _ = _stop(trainer)
    finally:
        trainer.kill()
    stats = _stats(folder)
    assert stats["learners"] == 2 and len(set(stats["rank_weight_digests"])) == 1


def test_a_killed_rank_stops_the_run_with_a_final_checkpoint_and_exit_1_naming_it(tmp_path):
    _config(tmp_path)
    trainer = Trainer(train_command(tmp_path, "killed", "--learners", "2", "--collectors", "2"), cwd=tmp_path)
    try:
        pid = _rank_pid(trainer, 1)
        previous, _, batches = _wait_for_save(trainer, 0)
        os.kill(pid, signal.SIGKILL)
        assert trainer.finish(120) == 1, trainer.log()[-4000:]
    finally:
        trainer.kill()
    log = trainer.log()
    assert re.search(rf"learner group: rank 1 died \(its process \(pid {pid}\) ended with exit code -9\)", log), log[-4000:]
    final, _, final_batches = _saves(trainer)[-1]
    assert final != previous and final_batches >= batches
    stats = _stats(final)
    assert stats["learners"] == 2 and stats["ranks"][1] == {"rank": 1, "shard": "of the previous checkpoint"}
    # rank 1's shard of the previous checkpoint is kept: the run resumes with its data
    shards = dict(ckpt.shard_files(final, ckpt.BUFFER))
    assert shards[1].read_bytes() == (previous / "buffer.rank1").read_bytes()


def test_a_hung_rank_is_named_killed_and_the_run_stops_with_exit_1(tmp_path):
    _config(tmp_path, "learner_group_timeout_s = 8\n")
    trainer = Trainer(train_command(tmp_path, "hung", "--learners", "2", "--collectors", "2"), cwd=tmp_path)
    try:
        pid = _rank_pid(trainer, 1)
        _wait_for_save(trainer, 0)
        os.kill(pid, signal.SIGSTOP)
        assert trainer.finish(120) == 1, trainer.log()[-4000:]
    finally:
        trainer.kill()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert re.search(rf"learner group: .*rank 1 \(pid {pid}\) gave no sign of life for \d+ s", trainer.log())


def test_a_rank_with_nothing_to_learn_from_is_refused_before_anything_starts(tmp_path):
    _config(tmp_path)
    result = run_train(tmp_path, *train_command(tmp_path, "refused", "--learners", "2", "--collectors", "1")[2:], timeout_s=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--learners 2 with 1 local collector(s) leaves rank(s) 1 with nothing to learn from" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "save" / "refused" / "checkpoints").exists() and "[rank 1]" not in result.stdout
