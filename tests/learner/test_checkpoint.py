"""Checkpoint folders (learner/checkpoint.py) and settings as JSON values (config/values.py)."""

import json
import os

import pytest
import torch

from trackmania_rl.config.loader import default_config
from trackmania_rl.config.schema import SETTINGS, ConfigError
from trackmania_rl.config.values import config_from_values, config_to_values, read_settings, settings_json
from trackmania_rl.learner.checkpoint import (
    CHECKPOINT,
    CHECKPOINTS,
    COMPLETE_MARKER,
    PREVIOUS,
    STAGING,
    CheckpointCorrupt,
    CheckpointError,
    CheckpointSaveError,
    checkpoint_candidates,
    find_checkpoint,
    json_writer,
    load_json,
    load_torch,
    move_aside,
    save_checkpoint,
    torch_writer,
)


def _stats(n):
    return {"stats.json": json_writer({"frames": n})}


def test_round_trip(tmp_path):
    weights = {"w": torch.arange(6.0).reshape(2, 3)}
    folder = save_checkpoint(tmp_path, {"weights.torch": torch_writer(weights), "stats.json": json_writer({"frames": 12})})
    assert folder == tmp_path / CHECKPOINTS / "000001" and (folder / COMPLETE_MARKER).is_file()
    assert find_checkpoint(tmp_path) == folder
    assert torch.equal(load_torch(folder, "weights.torch")["w"], weights["w"])
    assert load_json(folder, "stats.json") == {"frames": 12}


def test_the_newest_k_complete_checkpoints_are_kept(tmp_path):
    for n in range(1, 6):
        save_checkpoint(tmp_path, _stats(n), keep=2)
    assert sorted(p.name for p in (tmp_path / CHECKPOINTS).iterdir()) == ["000004", "000005"]
    assert load_json(find_checkpoint(tmp_path), "stats.json") == {"frames": 5}
    save_checkpoint(tmp_path, _stats(6), keep=3)
    assert sorted(p.name for p in (tmp_path / CHECKPOINTS).iterdir()) == ["000004", "000005", "000006"]
    save_checkpoint(tmp_path, _stats(7), keep=1)
    assert [p.name for p in (tmp_path / CHECKPOINTS).iterdir()] == ["000007"]


def test_failed_save_keeps_the_previous_checkpoint_and_leaves_nothing(tmp_path):
    save_checkpoint(tmp_path, _stats(1))

    def broken_writer(path):
        path.write_text("half written")
        raise OSError(5, "Input/output error")

    with pytest.raises(CheckpointSaveError) as error:
        save_checkpoint(tmp_path, {**_stats(2), "more": broken_writer})
    assert isinstance(error.value, OSError) and "more" in str(error.value) and "free on that file system" in str(error.value)
    assert [p.name for p in (tmp_path / CHECKPOINTS).iterdir()] == ["000001"]
    assert load_json(find_checkpoint(tmp_path), "stats.json") == {"frames": 1}


def test_a_programming_error_in_a_writer_is_not_disguised_as_an_io_error(tmp_path):
    def buggy(path):
        raise TypeError("bug")

    with pytest.raises(TypeError):
        save_checkpoint(tmp_path, {"x": buggy})
    assert list((tmp_path / CHECKPOINTS).iterdir()) == []


def test_a_save_killed_half_way_leaves_only_staging_which_the_next_save_removes(tmp_path):
    save_checkpoint(tmp_path, _stats(1))
    staging = tmp_path / CHECKPOINTS / "000002.partial"
    staging.mkdir()
    (staging / "stats.json").write_text("{")
    assert find_checkpoint(tmp_path) == tmp_path / CHECKPOINTS / "000001"
    assert staging not in checkpoint_candidates(tmp_path)
    save_checkpoint(tmp_path, _stats(3))
    assert not staging.exists()


def test_older_runs_single_folder_layout_is_read_as_the_oldest_candidate(tmp_path):
    old = tmp_path / CHECKPOINT
    old.mkdir()
    json_writer({"frames": 1})(old / "stats.json")
    (old / COMPLETE_MARKER).write_text("ok\n")
    (tmp_path / STAGING).mkdir()  # an old save killed half-way: never a candidate
    assert find_checkpoint(tmp_path) == old
    # killed between the old layout's renames: checkpoint.previous is still complete
    os.replace(old, tmp_path / PREVIOUS)
    assert find_checkpoint(tmp_path) == tmp_path / PREVIOUS
    os.replace(tmp_path / PREVIOUS, old)
    new = save_checkpoint(tmp_path, _stats(2), keep=2)
    assert checkpoint_candidates(tmp_path) == [new, old] and find_checkpoint(tmp_path) == new
    save_checkpoint(tmp_path, _stats(3), keep=2)
    assert not old.exists()  # pruned once 2 newer checkpoints exist


def test_move_aside_keeps_the_folder_under_checkpoints_bad(tmp_path):
    folder = save_checkpoint(tmp_path, _stats(1))
    moved = move_aside(tmp_path, folder)
    assert moved.parent == tmp_path / "checkpoints.bad" and moved.name.startswith("000001-")
    assert load_json(moved, "stats.json") == {"frames": 1} and not folder.exists()


def test_untrusted_pickle_is_refused_without_torch_advice(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    torch.save({"x": Evil()}, tmp_path / "evil.torch")
    with pytest.raises(CheckpointCorrupt, match="evil.torch") as error:
        load_torch(tmp_path, "evil.torch")
    assert "weights_only" not in str(error.value) and "will likely succeed" not in str(error.value)


@pytest.mark.parametrize("content", [b"", b"garbage" * 10, "truncated"])
def test_corrupt_torch_files_are_reported_as_corrupt(tmp_path, content):
    if content == "truncated":
        torch.save({"w": torch.zeros(1000)}, tmp_path / "w.torch")
        content = (tmp_path / "w.torch").read_bytes()[:500]
    (tmp_path / "w.torch").write_bytes(content)
    with pytest.raises(CheckpointCorrupt) as error:
        load_torch(tmp_path, "w.torch")
    message = str(error.value)
    assert str(tmp_path / "w.torch") in message and "corrupt" in message
    assert "weights_only" not in message and "config" not in message


def test_missing_and_corrupt_json_are_named(tmp_path):
    with pytest.raises(CheckpointError, match="nothing.json"):
        load_json(tmp_path, "nothing.json")
    (tmp_path / "bad.json").write_text('{"frames": ')
    with pytest.raises(CheckpointCorrupt, match="bad.json is corrupt"):
        load_json(tmp_path, "bad.json")


# ------------------------------------------------------------------------------------------------
# settings as JSON values
# ------------------------------------------------------------------------------------------------
def test_config_values_round_trip_through_json():
    cfg = default_config(map_cycle=[("train", range(10, 100, 3), True, True), ("blind", 7, False, False)])
    values = config_to_values(cfg)
    assert set(values) == set(SETTINGS)
    text = json.dumps(values, allow_nan=False)  # JSON-able, no NaN
    assert values["map_cycle"][0] == ["train", {"range": [10, 100, 3]}, True, True]
    back = config_from_values(json.loads(text), "carracing")
    assert back.settings() == cfg.settings()  # ranges back as ranges, entries as tuples
    assert back.map_cycle[0][1] == range(10, 100, 3) and isinstance(back.conv_layers[0], tuple)


def test_settings_file_round_trip_and_older_files_get_later_settings(tmp_path):
    cfg = default_config()
    path = tmp_path / "settings.json"
    path.write_text(settings_json(cfg))
    assert read_settings(path).settings() == cfg.settings()
    values = config_to_values(cfg)
    del values["checkpoints_kept"]  # written before the setting existed
    assert config_from_values(values).checkpoints_kept == 2


@pytest.mark.parametrize(
    "change, named",
    [
        ({"n_steps": "3"}, "`n_steps`"),
        ({"batch_size": None}, "`batch_size`"),
        ({"map_cycle": [["train", {"range": [1, 5, 0]}, True, True]]}, "`map_cycle`"),
        ({"map_cycle": [["train", {"start": 1}, True, True]]}, "`map_cycle`"),
        ({"checkpoints_kept": 0}, "`checkpoints_kept`"),
        ({"no_such_setting": 1}, "no_such_setting"),
    ],
)
def test_bad_json_values_name_the_setting(change, named):
    values = {**config_to_values(default_config()), **change}
    with pytest.raises(ConfigError, match=named):
        config_from_values(values, "carracing")


def test_a_settings_file_that_is_not_json_is_named(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text("n_steps = 3\n")
    with pytest.raises(ConfigError, match="settings.json is not valid JSON"):
        read_settings(path)
    with pytest.raises(ConfigError, match="does not exist"):
        read_settings(tmp_path / "none.json")
