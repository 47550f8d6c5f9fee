"""The learner in-process: ingesting (and refusing) rollouts, replay-ratio training, publication, growth,
save and resume. Real buffers, real networks, a real shared network; rollouts are built by hand."""

import numpy as np
import pytest
import torch
import torch.multiprocessing as torch_mp

from tests.helpers import RACE_META as META
from tests.helpers import TINY_NETWORK, make_rollout
from trackmania_rl.agents.iqn import make_network
from trackmania_rl.config.live import LiveConfig
from trackmania_rl.config.loader import CONFIG_DIR
from trackmania_rl.games import float_layout_for
from trackmania_rl.learner.learner import Learner
from trackmania_rl.rollouts.local.pool import CollectorPool
from trackmania_rl.rollouts.local.shared_network import SharedNetwork
from trackmania_rl.rollouts.local.source import LocalCollectorSource

OVERRIDES = dict(
    TINY_NETWORK,
    memory_size_schedule=[(0, (400, 50)), (300, (800, 50))],
    number_times_single_memory_is_used_before_discard=2,
    send_shared_network_every_n_batches=2,
    number_memories_trained_on_between_target_network_updates=64,
)


def _config_file(tmp_path, overrides=OVERRIDES):
    lines = [f"{k} = {v!r}" for k, v in overrides.items()]
    path = tmp_path / "config_copy.py"
    path.write_text((CONFIG_DIR / "config.py").read_text() + "\n" + "\n".join(lines) + "\n")
    return path


def _local_source(shared):
    """The local source around a shared network, with no collector process (the tests hand races to the learner)."""
    ctx = torch_mp.get_context("spawn")
    pool = CollectorPool(ctx, target=None, args=(), count=0, queue_size=1, log=lambda m: None)
    return LocalCollectorSource(pool, shared, ctx.Event(), ctx.Value("q", 0, lock=False), stall_timeout_s=lambda: 60.0)


def _learner(tmp_path, shared=None, resume=True, device="cpu", overrides=OVERRIDES):
    messages = []
    live = LiveConfig(_config_file(tmp_path, overrides), log=messages.append)
    layout = float_layout_for(live.current)
    source = _local_source(shared) if shared is not None else None
    learner = Learner(live, layout, torch.device(device), tmp_path / "run", source=source, log=messages.append, resume=resume)
    return learner, messages


def _race(learner, n_states=60, finished=False, seed=0):
    rollout = make_rollout(learner.cfg, learner.layout, n_states, finished, rng=np.random.default_rng(seed))
    end_race_stats = {
        "race_finished": finished,
        "race_time": 1000,
        "native_score": 1.0,
        "progress_fraction": 0.5,
        "race_time_for_ratio": 1000,
    }
    return rollout, end_race_stats


def test_ingest_stores_transitions_and_counts(tmp_path):
    learner, _ = _learner(tmp_path)
    info = learner.ingest(*_race(learner, 60), META)
    assert info["n_train"] + info["n_test"] == 59  # a cut-off race of 60 states: transitions for 0..58
    assert len(learner.buffer) == info["n_train"] and len(learner.buffer_test) == info["n_test"]
    assert learner.stats.frames_played == 60 and learner.stats.races == 1
    assert learner.stats.single_memories_should_have_been_used == 2 * info["n_train"]
    # a blind race counts as played but stores nothing
    learner.ingest(*_race(learner, 30), {**META, "fill_buffer": False, "map_status": "blind"})
    assert learner.stats.frames_played == 90 and len(learner.buffer) == info["n_train"]


@pytest.mark.parametrize(
    "corrupt, fragment",
    [
        (lambda r: r["state_float"][5].__setitem__(3, np.nan), "state_float[5]"),
        (lambda r: r["frames"].__setitem__(2, np.zeros((1, 8, 8), np.uint8)), "frames[2]"),
        (lambda r: r["actions"].pop(), "actions"),
        (lambda r: r["actions"].__setitem__(0, 99), "actions"),
    ],
)
def test_broken_rollout_is_refused_and_nothing_is_stored(tmp_path, corrupt, fragment):
    learner, messages = _learner(tmp_path)
    learner.ingest(*_race(learner, 40, seed=1), META)
    before = (len(learner.buffer), len(learner.buffer_test), learner.stats.frames_played)
    rollout, stats = _race(learner, 40, seed=2)
    corrupt(rollout)
    info = learner.ingest(rollout, stats, META)
    assert "rejected" in info and fragment in info["rejected"]
    assert (len(learner.buffer), len(learner.buffer_test), learner.stats.frames_played) == before
    assert learner.stats.rollouts_rejected == 1
    assert any("refused" in m and fragment in m for m in messages)


def _record_weights_after_each_batch(learner) -> list[dict]:
    """The online weights after each learning batch, appended as the learner trains."""
    after_batch = []
    launch_on_tensors = learner.trainer.launch_on_tensors

    def recording(batch, do_learn):
        result = launch_on_tensors(batch, do_learn=do_learn)
        if do_learn:
            after_batch.append({name: tensor.clone() for name, tensor in learner.online.state_dict().items()})
        return result

    learner.trainer.launch_on_tensors = recording
    return after_batch


def _same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


def test_training_follows_the_replay_ratio_and_publishes(tmp_path):
    ctx = torch_mp.get_context("spawn")
    layout_cfg = LiveConfig(_config_file(tmp_path)).current
    shared = SharedNetwork(make_network(layout_cfg, float_layout_for(layout_cfg), len(layout_cfg.inputs)), ctx)
    learner, _ = _learner(tmp_path, shared=shared)
    after_batch = _record_weights_after_each_batch(learner)
    assert shared.version == 1  # the start publishes once
    assert not learner.can_train()
    for seed in range(3):
        learner.ingest(*_race(learner, 60, seed=seed), META)
    credit = learner.stats.single_memories_should_have_been_used
    batches = learner.train(max_seconds=60)
    batch_size = learner.cfg.batch_size
    assert batches == int(credit // batch_size) >= 2 and not learner.can_train()
    assert learner.stats.single_memories_used == batches * batch_size
    # one soft update each time the memories used cross 0, 64, 128, ...
    assert learner.stats.target_network_updates == learner.stats.single_memories_used // 64 + 1
    assert shared.version == 1 + batches // 2 == learner.stats.policy_version

    def check_published(total: int) -> None:
        """Every 2 batches the source gets the online weights of that moment: after an even count they are the
        online weights, after an odd one those after the batch before (the last batch has changed them since)."""
        assert len(after_batch) == total and shared.version == 1 + total // 2
        published = shared.network.state_dict()
        assert _same_weights(published, after_batch[total - total % 2 - 1])
        assert _same_weights(published, learner.online.state_dict()) == (total % 2 == 0)

    check_published(batches)
    # one batch more: the check sees both an odd and an even batch count, whichever came first
    learner.stats.single_memories_should_have_been_used = learner.stats.single_memories_used + batch_size
    assert learner.train(max_seconds=60) == 1
    check_published(batches + 1)


def test_non_finite_gradients_are_skipped_logged_once_and_kept_out_of_the_means(tmp_path):
    learner, messages = _learner(tmp_path)
    for seed in range(3):
        learner.ingest(*_race(learner, 60, seed=seed), META)
    with torch.no_grad():  # a diverged weight: every loss and gradient from now on is NaN
        next(learner.online.parameters()).view(-1)[0] = float("nan")
    kept = {name: tensor.clone() for name, tensor in learner.online.state_dict().items()}
    batches = learner.train(max_seconds=60)
    assert batches >= 2 and learner.trainer.nonfinite_steps_skipped == batches == learner.stats.batches_done
    assert sum("non-finite gradient" in m for m in messages) == 1
    assert not learner.window["loss"] and not learner.window["grad_norm"]
    for name, tensor in learner.online.state_dict().items():  # no other weight caught the NaN
        torch.testing.assert_close(tensor, kept[name], rtol=0, atol=0, equal_nan=True)


def test_buffer_grows_with_the_schedule_keeping_content(tmp_path):
    learner, messages = _learner(tmp_path)
    for seed in range(5):
        learner.ingest(*_race(learner, 60, seed=seed), META)
    assert learner.buffer.capacity == 400
    kept = learner.buffer.storage.to_experience().frames.copy()
    assert learner.apply_config()  # 300 frames played: the schedule asks for 800
    assert learner.buffer.capacity == 400  # grown only when asked (train_loop pauses the training thread for it)
    learner.grow_buffers()
    assert learner.buffer.capacity == 800
    assert np.array_equal(learner.buffer.storage.to_experience().frames, kept)
    assert any("grows to 800" in m for m in messages)


def test_save_and_resume_continue_everything(tmp_path):
    learner, _ = _learner(tmp_path)
    for seed in range(4):
        learner.ingest(*_race(learner, 60, seed=seed), META)
    learner.train(max_seconds=60)
    learner.save()
    resumed, messages = _learner(tmp_path)
    assert resumed.stats == learner.stats
    for name, tensor in learner.online.state_dict().items():
        assert torch.equal(resumed.online.state_dict()[name], tensor), name
    for name, tensor in learner.target.state_dict().items():
        assert torch.equal(resumed.target.state_dict()[name], tensor), name
    # the optimizer's moments and step counts per parameter, and its hyper-parameters, continue exactly
    saved, loaded = learner.optimizer.state_dict(), resumed.optimizer.state_dict()
    assert saved["state"] and loaded["state"].keys() == saved["state"].keys()
    for index, state in saved["state"].items():
        assert {"step", "exp_avg", "exp_avg_sq"} <= state.keys() and loaded["state"][index].keys() == state.keys()
        assert state["step"] > 0 and torch.count_nonzero(state["exp_avg_sq"]) > 0  # trained: moments to compare
        for name, value in state.items():
            assert torch.equal(loaded["state"][index][name], value), (index, name)
    assert [{k: v for k, v in g.items() if k != "params"} for g in loaded["param_groups"]] == [
        {k: v for k, v in g.items() if k != "params"} for g in saved["param_groups"]
    ]
    assert len(resumed.buffer) == len(learner.buffer) and len(resumed.buffer_test) == len(learner.buffer_test)
    assert np.array_equal(resumed.buffer.storage.to_experience().frames, learner.buffer.storage.to_experience().frames)
    assert any(m.startswith("resumed from") for m in messages)
    fresh, _ = _learner(tmp_path, resume=False)
    assert fresh.stats.frames_played == 0 and len(fresh.buffer) == 0


def test_checkpoint_of_another_network_is_refused_with_a_message(tmp_path):
    learner, _ = _learner(tmp_path)
    learner.save()
    path = _config_file(tmp_path)
    path.write_text(path.read_text() + "\ndense_hidden_dimension = 48\n")
    live = LiveConfig(path, log=lambda m: None)
    from trackmania_rl.learner.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match="does not fit the current config"):
        Learner(live, float_layout_for(live.current), torch.device("cpu"), tmp_path / "run", log=lambda m: None)


def _race_with_versions(learner, versions, seed=3):
    rollout, stats = _race(learner, len(versions), seed=seed)
    rollout["policy_version"] = list(versions)
    return rollout, stats


def test_races_older_than_max_policy_lag_are_dropped_and_counted_by_source(tmp_path):
    learner, messages = _learner(tmp_path)
    learner.cfg = learner.cfg.replace(max_policy_lag=3)
    learner.stats.policy_version = 10
    stale = learner.ingest(*_race_with_versions(learner, [6] + [10] * 29), {**META, "source": "far"})
    assert stale == {"dropped": "stale", "policy_lag": 4}  # lag from the oldest action, not the mean (~0.1)
    assert len(learner.buffer) + len(learner.buffer_test) == 0 and learner.stats.frames_played == 0
    assert learner.stats.rollouts_dropped_stale == {"far": 1} and learner.stats.rollouts_rejected == 0
    fresh = learner.ingest(*_race_with_versions(learner, [7] * 30), META)
    assert fresh["policy_lag"] == 3 and fresh["n_train"] + fresh["n_test"] == 29
    assert learner.window["policy_lag_versions"] == [4, 3]


def test_a_race_without_tile_counts_is_refused_when_the_tile_reward_is_on(tmp_path):
    learner, messages = _learner(tmp_path)
    learner.cfg = learner.cfg.replace(reward_per_new_road_tile=0.1)
    rollout, stats = _race(learner, 20)
    del rollout["road_tiles_touched"]
    info = learner.ingest(rollout, stats, META)
    assert "lacks `road_tiles_touched`" in info["rejected"] and learner.stats.rollouts_rejected == 1
    assert len(learner.buffer) + len(learner.buffer_test) == 0 and learner.stats.frames_played == 0
    rollout, stats = _race(learner, 20)
    assert learner.ingest(rollout, stats, META)["n_train"] > 0


def test_a_race_from_a_future_policy_version_is_refused(tmp_path):
    learner, messages = _learner(tmp_path)
    learner.stats.policy_version = 2
    info = learner.ingest(*_race_with_versions(learner, [3] * 20), META)
    assert "newer than the learner's 2" in info["rejected"] and learner.stats.rollouts_rejected == 1
    assert len(learner.buffer) == 0


def test_something_that_is_not_an_envelope_is_refused(tmp_path):
    learner, messages = _learner(tmp_path)
    assert learner.ingest_envelope(("only", "two")) == {"rejected": "not an envelope"}
    assert learner.stats.rollouts_rejected == 1 and any("refused" in m for m in messages)


def test_replay_age_of_sampled_batches(tmp_path):
    learner, _ = _learner(tmp_path)
    for seed in range(3):
        learner.ingest(*_race(learner, 60, seed=seed), META)
    assert learner.buffer.take_replay_age() is None  # nothing sampled yet
    batches = learner.train(max_seconds=60)
    assert batches > 0
    age = learner.buffer.take_replay_age()
    states_written = learner.buffer.storage.states_written
    assert 0 < age < states_written  # a uniform sample over 3 races: about half the states stored came after it
    assert learner.buffer.take_replay_age() is None  # the count starts again


# ------------------------------------------------------------------------------------------------
# checkpoints: settings as values, the newest K, the best model folder
# ------------------------------------------------------------------------------------------------
def test_a_checkpoint_records_the_config_values_in_force_not_the_live_file(tmp_path):
    import json

    from trackmania_rl.config.values import config_to_values, read_settings
    from trackmania_rl.learner.checkpoint import CONFIG_COPY, SETTINGS

    learner, _ = _learner(tmp_path)
    learner.live.path.write_text("this is not a config any more")  # the live file's text is not what is saved
    folder = learner.save()
    assert not (folder / CONFIG_COPY).exists()
    assert json.loads((folder / SETTINGS).read_text()) == config_to_values(learner.cfg)
    assert read_settings(folder / SETTINGS).settings() == learner.cfg.settings()


def test_saves_keep_the_newest_checkpoints_kept_and_resume_takes_the_newest(tmp_path):
    from trackmania_rl.learner.checkpoint import CHECKPOINTS

    learner, _ = _learner(tmp_path)
    learner.cfg = learner.cfg.replace(checkpoints_kept=2)
    for seed in range(3):
        learner.ingest(*_race(learner, 60, seed=seed), META)
        learner.save()
    assert sorted(p.name for p in (tmp_path / "run" / CHECKPOINTS).iterdir()) == ["000002", "000003"]
    resumed, messages = _learner(tmp_path)
    assert resumed.stats.frames_played == learner.stats.frames_played == 180
    assert any(m.startswith(f"resumed from {tmp_path / 'run' / CHECKPOINTS / '000003'}") for m in messages)


def test_training_backlog_counts_only_once_learning_can_start(tmp_path):
    """Pacing reads the backlog: before the buffer holds `start_learn` transitions it must be 0, or paused sources
    would never fill the buffer; after, it is the replay-ratio credit in batches."""
    learner, _ = _learner(tmp_path)
    learner.ingest(*_race(learner, 30), META)  # 29 transitions, fewer than start_learn (50)
    assert len(learner.buffer) + len(learner.buffer_test) < 50
    assert learner.stats.single_memories_should_have_been_used > 0
    assert learner.training_backlog_batches() == 0.0
    learner.ingest(*_race(learner, 60, seed=1), META)
    assert len(learner.buffer) >= 50
    credit = learner.stats.single_memories_should_have_been_used - learner.stats.single_memories_used
    assert learner.training_backlog_batches() == pytest.approx(credit / learner.cfg.batch_size)
    learner.train(max_seconds=30.0)  # trains until the credit is spent
    assert learner.training_backlog_batches() < 1.0


def test_a_replay_that_does_not_fit_this_machines_memory_is_warned_of_at_start(tmp_path):
    """The buffers are made at the schedule's first capacity; the warning is about the largest one. 10 billion
    transitions fit no machine; 800 fit every one (no warning)."""
    learner, messages = _learner(tmp_path)
    assert not any("WARNING: the replay" in m for m in messages)
    huge_dir = tmp_path / "huge"
    huge_dir.mkdir()
    huge_schedule = [(0, (400, 50)), (10**12, (10**10, 50))]
    huge, huge_messages = _learner(huge_dir, overrides=dict(OVERRIDES, memory_size_schedule=huge_schedule))
    assert huge.buffer.capacity == 400  # nothing allocated for the largest capacity yet
    warnings = [m for m in huge_messages if "WARNING: the replay of 10,000,000,000 transitions" in m]
    assert len(warnings) == 1 and "memory_size_schedule" in warnings[0]
