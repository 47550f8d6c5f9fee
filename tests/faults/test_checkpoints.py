"""Damaged checkpoints at resume: a missing marker, an unreadable file, a damaged buffer, an older run's layout.

The newest checkpoint that loads is used and named; the ones that do not are moved to checkpoints.bad/ (never
deleted) and named; with none usable the start is refused with everything left in place. A corrupt file is
reported as corrupt (naming it), never as a config mismatch, and without torch's advice to unpickle."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from tests.learner.test_learner import META, _learner, _race
from trackmania_rl.learner.checkpoint import (
    BAD_CHECKPOINTS,
    BUFFER,
    BUFFER_TEST,
    CHECKPOINT,
    CHECKPOINTS,
    COMPLETE_MARKER,
    OPTIMIZER,
    STATS,
    WEIGHTS_ONLINE,
    WEIGHTS_TARGET,
    CheckpointError,
)


def _run_with_checkpoints(tmp_path, count=2):
    """A run folder with `count` checkpoints (60 more frames each); returns (learner, [folders])."""
    learner, _ = _learner(tmp_path)
    learner.cfg = learner.cfg.replace(checkpoints_kept=count)
    folders = []
    for seed in range(count):
        learner.ingest(*_race(learner, 60, seed=seed), META)
        folders.append(learner.save())
    return learner, folders


def _damage(path, how):
    if how == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(bytes(range(200)))
    elif how == "deleted":
        path.unlink()
    elif how == "pickled object":

        class Evil:
            def __reduce__(self):
                return (os.system, ("echo pwned",))

        torch.save({"x": Evil()}, path)


def _snapshot(folder):
    return sorted((str(p.relative_to(folder)), p.stat().st_size) for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    "name, how",
    [
        (WEIGHTS_ONLINE, "truncated"),
        (WEIGHTS_TARGET, "garbage"),
        (OPTIMIZER, "empty"),
        (WEIGHTS_ONLINE, "pickled object"),
        (STATS, "truncated"),
        (WEIGHTS_ONLINE, "deleted"),
        (BUFFER, "truncated"),
    ],
)
def test_a_corrupt_newest_checkpoint_is_moved_aside_and_the_previous_one_used(tmp_path, name, how):
    _, (older, newest) = _run_with_checkpoints(tmp_path)
    _damage(newest / name, how)
    resumed, messages = _learner(tmp_path)
    assert resumed.stats.frames_played == 60  # the older checkpoint's counters
    assert any(m.startswith(f"resumed from {older}") for m in messages)
    (moved,) = (tmp_path / "run" / BAD_CHECKPOINTS).iterdir()
    assert moved.name.startswith(newest.name + "-") and not newest.exists()
    (note,) = [m for m in messages if "cannot be used" in m]
    assert str(newest) in note and str(moved) in note and name in note
    assert "config" not in note.split(":", 1)[1] and "weights_only" not in note and "will likely succeed" not in note


def test_a_checkpoint_without_its_marker_is_moved_aside(tmp_path):
    _, (older, newest) = _run_with_checkpoints(tmp_path)
    (newest / COMPLETE_MARKER).unlink()
    resumed, messages = _learner(tmp_path)
    assert resumed.stats.frames_played == 60
    assert any("incomplete (no COMPLETE marker)" in m and str(newest) in m for m in messages)
    assert len(list((tmp_path / "run" / BAD_CHECKPOINTS).iterdir())) == 1


def test_with_no_usable_checkpoint_the_start_is_refused_and_nothing_moves(tmp_path):
    _, (older, newest) = _run_with_checkpoints(tmp_path)
    _damage(newest / WEIGHTS_ONLINE, "truncated")
    (older / COMPLETE_MARKER).unlink()
    before = _snapshot(tmp_path / "run")
    with pytest.raises(CheckpointError) as error:
        _learner(tmp_path)
    message = str(error.value)
    assert str(newest / WEIGHTS_ONLINE) in message and "corrupt" in message and str(older) in message
    assert "Nothing was moved or deleted" in message and "--fresh" in message
    assert "does not fit the current config" not in message and "weights_only" not in message
    assert _snapshot(tmp_path / "run") == before and not (tmp_path / "run" / BAD_CHECKPOINTS).exists()


def test_a_damaged_buffer_names_the_file_and_the_run_goes_on_once_it_is_moved_away(tmp_path):
    learner, (only,) = _run_with_checkpoints(tmp_path, count=1)
    state = torch.load(only / BUFFER, weights_only=True)
    state["storage"]["content"]["action"][0] = 1000  # an action the network does not have
    torch.save(state, only / BUFFER)
    with pytest.raises(CheckpointError) as error:
        _learner(tmp_path)
    message = str(error.value)
    assert f"buffer file {only / BUFFER} is damaged" in message and "`action`" in message
    assert "resumes with empty buffers once they are moved away" in message
    assert (only / BUFFER).exists()  # left in place
    # what the message says to do: move the buffer files away, start again
    for name in (BUFFER, BUFFER_TEST):
        shutil.move(only / name, tmp_path / name)
    resumed, messages = _learner(tmp_path)
    assert resumed.stats.frames_played == 60 and len(resumed.buffer) == 0
    assert any("no buffer files in it: the buffers start empty" in m for m in messages)


def test_a_checkpoint_of_another_config_is_a_mismatch_not_corruption(tmp_path):
    _run_with_checkpoints(tmp_path, count=1)
    from tests.learner.test_learner import _config_file
    from trackmania_rl.config.live import LiveConfig
    from trackmania_rl.games import float_layout_for
    from trackmania_rl.learner.learner import Learner

    path = _config_file(tmp_path)
    path.write_text(path.read_text() + "\ndense_hidden_dimension = 48\n")
    live = LiveConfig(path, log=lambda m: None)
    before = _snapshot(tmp_path / "run")
    with pytest.raises(CheckpointError, match="does not fit the current config") as error:
        Learner(live, float_layout_for(live.current), torch.device("cpu"), tmp_path / "run", log=lambda m: None)
    assert "settings.json" in str(error.value) and "corrupt" not in str(error.value)
    assert _snapshot(tmp_path / "run") == before


def test_an_older_runs_checkpoint_folder_is_still_resumed(tmp_path):
    _, (only,) = _run_with_checkpoints(tmp_path, count=1)
    run = tmp_path / "run"
    os.replace(only, run / CHECKPOINT)  # the single-folder layout of older runs
    shutil.rmtree(run / CHECKPOINTS)
    resumed, messages = _learner(tmp_path)
    assert resumed.stats.frames_played == 60 and any(m.startswith(f"resumed from {run / CHECKPOINT}") for m in messages)
    resumed.cfg = resumed.cfg.replace(checkpoints_kept=1)
    new = resumed.save()
    assert new == run / CHECKPOINTS / "000001" and not (run / CHECKPOINT).exists()
    assert json.loads((new / STATS).read_text())["frames_played"] == 60
