import os

import pytest
import torch

from trackmania_rl.learner.checkpoint import (
    CHECKPOINT,
    PREVIOUS,
    STAGING,
    CheckpointError,
    find_checkpoint,
    json_writer,
    load_json,
    load_torch,
    save_checkpoint,
    torch_writer,
)


def test_round_trip(tmp_path):
    weights = {"w": torch.arange(6.0).reshape(2, 3)}
    save_checkpoint(tmp_path, {"weights.torch": torch_writer(weights), "stats.json": json_writer({"frames": 12})})
    folder = find_checkpoint(tmp_path)
    assert folder == tmp_path / CHECKPOINT
    assert torch.equal(load_torch(folder, "weights.torch")["w"], weights["w"])
    assert load_json(folder, "stats.json") == {"frames": 12}


def test_failed_save_keeps_the_previous_checkpoint(tmp_path):
    save_checkpoint(tmp_path, {"stats.json": json_writer({"frames": 1})})

    def broken_writer(path):
        path.write_text("half written")
        raise OSError("disk full")

    with pytest.raises(OSError):
        save_checkpoint(tmp_path, {"stats.json": json_writer({"frames": 2}), "more": broken_writer})
    assert load_json(find_checkpoint(tmp_path), "stats.json") == {"frames": 1}


def test_kill_between_renames_falls_back_to_previous(tmp_path):
    save_checkpoint(tmp_path, {"stats.json": json_writer({"frames": 1})})
    # simulate a kill after the old checkpoint was moved aside but before the new one was renamed in
    os.replace(tmp_path / CHECKPOINT, tmp_path / PREVIOUS)
    (tmp_path / STAGING).mkdir()
    assert load_json(find_checkpoint(tmp_path), "stats.json") == {"frames": 1}


def test_untrusted_pickle_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    torch.save({"x": Evil()}, tmp_path / "evil.torch")
    with pytest.raises(CheckpointError, match="evil.torch"):
        load_torch(tmp_path, "evil.torch")


def test_missing_file_is_named(tmp_path):
    with pytest.raises(CheckpointError, match="nothing.json"):
        load_json(tmp_path, "nothing.json")
