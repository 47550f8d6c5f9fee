import numpy as np
import pytest
import torch
from torchrl.data import ReplayBuffer

from tests.helpers import make_rollout, markers
from trackmania_rl.config.loader import default_config
from trackmania_rl.games.car_racing.floats import make_float_layout
from trackmania_rl.games.float_layout import MINI_RACE_CLOCK
from trackmania_rl.replay.buffers import (
    append_saved_buffer,
    load_buffer,
    make_buffer,
    make_buffers,
    read_buffer_file,
    resize_buffers,
    save_buffer,
)
from trackmania_rl.replay.experience import Experience, rollout_to_experience
from trackmania_rl.replay.mini_race import MiniRaceTransform, draw_mini_race_clock
from trackmania_rl.replay.samplers import SumTree
from trackmania_rl.replay.storage import TransitionStorage

GAMMA = 0.95


def experience(cfg, layout, n_states, first_marker=0, finished=False, greedy=None):
    rollout = make_rollout(
        cfg, layout, n_states, finished, first_marker=first_marker, greedy=greedy, rng=np.random.default_rng(first_marker)
    )
    return rollout_to_experience(rollout, cfg, layout, GAMMA)


def stored_markers(buffer, layout):
    """Markers of the stored transitions' states, oldest first."""
    exp = buffer.storage.to_experience()
    return markers(layout, exp.state_float[exp.state_index])


def check_consistent(buffer, layout):
    """Every live transition reads its own state and the right next state (state marker + n)."""
    exp = buffer.storage.to_experience()
    state, next_state = markers(layout, exp.state_float[exp.state_index]), markers(layout, exp.state_float[exp.next_state_index])
    np.testing.assert_array_equal(next_state - state, exp.n_steps)
    raw = buffer.storage.get(torch.from_numpy(buffer.storage.physical_order()))
    np.testing.assert_array_equal(markers(layout, raw["state_float"].numpy()), state)
    np.testing.assert_array_equal(markers(layout, raw["next_state_float"].numpy()), next_state)
    np.testing.assert_array_equal(raw["next_state_img"][:, 0, 0, 0].numpy(), next_state % 256)


# ---------------------------------------------------------------------------------------------------------
# the mini-race clock and transform
# ---------------------------------------------------------------------------------------------------------


def exact_clock_law(horizon, long_term, max_term):
    """P(t = k) for u uniform on [-(L-M), H+M), t = max(0, |u| - M), written in closed form."""
    total = long_term + horizon
    p = np.zeros(horizon)
    p[0] = max_term + 1 + min(max_term, long_term - max_term)
    for k in range(1, horizon):
        p[k] = 1 + (k <= long_term - 2 * max_term)
    return p / total


@pytest.mark.parametrize("horizon, long_term, max_term", [(50, 16, 4), (140, 40, 5), (10, 3, 3), (7, 0, 0)])
def test_clock_law_matches_the_exact_probabilities(horizon, long_term, max_term):
    expected = exact_clock_law(horizon, long_term, max_term)
    assert abs(expected.sum() - 1) < 1e-12
    n = 400_000
    t = draw_mini_race_clock(np.random.default_rng(3), n, horizon, long_term, max_term)
    assert t.min() >= 0 and t.max() <= horizon - 1
    frequency = np.bincount(t, minlength=horizon) / n
    tolerance = 5 * np.sqrt(expected * (1 - expected) / n) + 1e-9
    assert np.all(np.abs(frequency - expected) <= tolerance)


def test_linesight_clock_law_values():
    p = exact_clock_law(140, 40, 5)
    assert p[0] == pytest.approx(11 / 180) and p[30] == pytest.approx(2 / 180) and p[31] == pytest.approx(1 / 180)


class FixedDraws:
    """An rng whose integer draws are given: u values for the mini-race clock."""

    def __init__(self, u):
        self.u = np.asarray(u)

    def integers(self, low, high, size):
        assert len(self.u) == size and np.all((self.u >= low) & (self.u < high))
        return self.u.copy()


def crafted_batch():
    """Four raw transitions as the storage returns them (clock floats at 0)."""
    d = 5
    return {
        "action": torch.tensor([0, 1, 2, 3]),
        "n_steps": torch.tensor([3, 3, 2, 1]),
        "rewards": torch.tensor([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0], [5.0, 6.0, 0.0], [7.0, 0.0, 0.0]]),
        "gammas": torch.tensor([[0.9, 0.81, 0.729]] * 4),
        "terminal_actions": torch.tensor([np.inf, 3.0, 2.0, 5.0]),
        "state_img": torch.zeros(4, 1, 2, 2, dtype=torch.uint8),
        "next_state_img": torch.ones(4, 1, 2, 2, dtype=torch.uint8),
        "state_float": torch.zeros(4, d),
        "next_state_float": torch.zeros(4, d),
        "state_potential": torch.tensor([-1.0, -2.0, -3.0, -4.0]),
        "next_state_potential": torch.tensor([-0.5, -0.5, -0.5, -0.5]),
    }


def test_mini_race_transform_on_crafted_transitions():
    cfg = default_config()  # H = 50, L = 16, M = 4: u in [-12, 54)
    layout = make_float_layout(cfg)
    horizon = cfg.temporal_mini_race_duration_actions
    assert (horizon, cfg.oversample_long_term_steps, cfg.oversample_maximum_term_steps) == (50, 16, 4)
    # u -> t: -3 -> 0 ; 52 -> 48 ; 10 -> 6 ; 53 -> 49
    transform = MiniRaceTransform(cfg, layout, rng=FixedDraws([-3, 52, 10, 53]))
    batch = crafted_batch()
    batch["state_float"] = torch.zeros(4, layout.dim)
    batch["next_state_float"] = torch.zeros(4, layout.dim)
    out = transform(batch)
    np.testing.assert_array_equal(out["mini_race_clock"], [0, 48, 6, 49])
    # 0: t=0, n=3: m=3, not terminal (cut-off race)           -> gamma^3, rewards[2]
    # 1: t=48, n=3: m = 3 - (51-50) = 2, t+n >= H -> terminal -> 0, rewards[1]
    # 2: t=6, n=2, terminal_actions=2: m=2 >= 2 -> terminal    -> 0, rewards[1]
    # 3: t=49, n=1: m = 1 - 0 = 1, t+n = 50 >= H -> terminal  -> 0, rewards[0]
    np.testing.assert_array_equal(out["terminal"], [False, True, True, True])
    np.testing.assert_allclose(out["gamma_eff"], [0.729, 0, 0, 0], rtol=1e-6)
    np.testing.assert_allclose(out["reward"], [3.0 + 0.729 * -0.5 + 1.0, 20.0 + 2.0, 6.0 + 3.0, 7.0 + 4.0], rtol=1e-6)
    clock = layout.slice(MINI_RACE_CLOCK).start
    np.testing.assert_array_equal(out["state_float"][:, clock], [0, 48, 6, 49])
    np.testing.assert_array_equal(out["next_state_float"][:, clock], [3, 51, 8, 50])
    assert out["action"].tolist() == [0, 1, 2, 3] and out["state_img"].dtype == torch.uint8


def test_transform_truncates_without_terminal_flag_inside_the_race():
    cfg = default_config()
    layout = make_float_layout(cfg)
    # t = 47, n = 3, H = 50: m = 3 - 0 = 3 and t + n = 50 >= H: terminal at the mini-race end
    # t = 45, n = 3: m = 3, t + n = 48 < 50: bootstraps with gamma^3
    transform = MiniRaceTransform(cfg, layout, rng=FixedDraws([51, 49, 4, 4]))
    batch = crafted_batch()
    batch["state_float"] = torch.zeros(4, layout.dim)
    batch["next_state_float"] = torch.zeros(4, layout.dim)
    batch["terminal_actions"] = torch.full((4,), np.inf)
    out = transform(batch)
    np.testing.assert_array_equal(out["mini_race_clock"], [47, 45, 0, 0])
    np.testing.assert_array_equal(out["terminal"], [True, False, False, False])
    np.testing.assert_allclose(out["gamma_eff"], [0, 0.729, 0.81, 0.9], rtol=1e-6)


def test_sampled_batches_follow_the_clock_law(cfg, layout):
    buffer, _ = make_buffers(cfg, layout, 500, rng=np.random.default_rng(0), batch_size=512)
    buffer.extend(experience(cfg, layout, 200))
    clocks = np.concatenate([buffer.sample_batch()["mini_race_clock"].numpy() for _ in range(40)])
    h, L, M = cfg.temporal_mini_race_duration_actions, cfg.oversample_long_term_steps, cfg.oversample_maximum_term_steps
    expected = exact_clock_law(h, L, M)
    frequency = np.bincount(clocks, minlength=h) / len(clocks)
    assert np.all(np.abs(frequency - expected) <= 5 * np.sqrt(expected * (1 - expected) / len(clocks)))


# ---------------------------------------------------------------------------------------------------------
# storage: one frame per transition, FIFO, growth, save/load
# ---------------------------------------------------------------------------------------------------------


def test_is_a_torchrl_replay_buffer_and_batches_are_right(cfg, layout):
    buffer, _ = make_buffers(cfg, layout, 1000, rng=np.random.default_rng(0))
    assert isinstance(buffer, ReplayBuffer)
    exp = experience(cfg, layout, 101, finished=True)
    buffer.extend(exp)
    assert len(buffer) == 100 and buffer.storage.states_written == 101  # each frame stored once
    batch = buffer.sample_batch()
    b = cfg.batch_size
    assert batch["state_img"].shape == (b, 1, cfg.H_downsized, cfg.W_downsized) and batch["state_img"].dtype == torch.uint8
    assert batch["state_float"].shape == (b, layout.dim) and batch["reward"].dtype == torch.float32
    assert "weight" not in batch
    # each sampled transition is read back whole: next state = state + n, stored rewards and action
    index = batch["index"].numpy()
    s, ns = markers(layout, batch["state_float"].numpy()), markers(layout, batch["next_state_float"].numpy())
    np.testing.assert_array_equal(ns - s, batch["n_steps"].numpy())
    np.testing.assert_array_equal(batch["action"].numpy(), exp.action[s])
    np.testing.assert_array_equal(batch["state_img"][:, 0, 0, 0].numpy(), s % 256)
    assert np.all(index < 1000)
    check_consistent(buffer, layout)


def test_fifo_eviction_keeps_the_newest(cfg, layout):
    buffer = make_buffer(cfg, layout, 250, rng=np.random.default_rng(0))
    for k in range(4):
        buffer.extend(experience(cfg, layout, 101, first_marker=1000 * k))
    expected = np.concatenate([np.arange(100) + 1000 * k for k in range(4)])[-250:]
    np.testing.assert_array_equal(stored_markers(buffer, layout), expected)
    check_consistent(buffer, layout)


def test_state_ring_overflow_evicts_oldest_transitions_consistently(cfg, layout):
    # single transitions each need 2 states: the state ring (capacity + slack) fills before the transition ring
    buffer = make_buffer(cfg, layout, 40, rng=np.random.default_rng(0))
    exp = experience(cfg, layout, 400)
    for k in range(0, 300, 3):
        buffer.extend(exp.select(np.array([k])))
        check_consistent(buffer, layout)
    stored = stored_markers(buffer, layout)
    assert 0 < len(stored) < 40
    np.testing.assert_array_equal(stored, np.arange(0, 300, 3)[-len(stored) :])


def test_memory_per_transition_is_one_frame_plus_floats():
    cfg = default_config()
    layout = make_float_layout(cfg)
    storage = TransitionStorage(100_000, (1, cfg.H_downsized, cfg.W_downsized), layout.dim, cfg.n_steps)
    one_state = cfg.H_downsized * cfg.W_downsized + 4 * layout.dim
    assert storage.nbytes() / storage.capacity <= 1.25 * one_state


def test_grow_and_shrink_keep_content_and_fifo_order(cfg, layout):
    buffer, buffer_test = make_buffers(cfg, layout, 300, rng=np.random.default_rng(0))
    for k in range(4):
        buffer.extend(experience(cfg, layout, 101, first_marker=1000 * k))
    before = stored_markers(buffer, layout)
    resize_buffers(buffer, buffer_test, cfg, 600)
    assert buffer.capacity == 600 and buffer_test.capacity == int(600 * cfg.buffer_test_ratio)
    np.testing.assert_array_equal(stored_markers(buffer, layout), before)
    check_consistent(buffer, layout)
    for k in range(4, 8):
        buffer.extend(experience(cfg, layout, 101, first_marker=1000 * k))
    expected = np.concatenate([np.arange(100) + 1000 * k for k in range(8)])[-600:]
    np.testing.assert_array_equal(stored_markers(buffer, layout), expected)
    buffer.resize(150)
    np.testing.assert_array_equal(stored_markers(buffer, layout), expected[-150:])
    check_consistent(buffer, layout)
    buffer.sample_batch()


def test_save_and_load_round_trip(cfg, layout, tmp_path):
    buffer = make_buffer(cfg, layout, 300, prioritized=True, rng=np.random.default_rng(0))
    for k in range(4):
        buffer.extend(experience(cfg, layout, 101, first_marker=1000 * k))
    batch = buffer.sample_batch()
    buffer.update_priority(batch["index"], torch.linspace(0.1, 5.0, len(batch["index"])))
    path = tmp_path / "buffer.pt"
    save_buffer(buffer, path)
    raw = torch.load(path, weights_only=True)  # plain data only
    assert raw["storage"]["content"]["frames"].dtype == torch.uint8

    same = make_buffer(cfg, layout, 300, prioritized=True, rng=np.random.default_rng(1))
    load_buffer(same, path)
    a, b = buffer.storage.to_experience(), same.storage.to_experience()
    for name in Experience.STATE_FIELDS + Experience.TRANSITION_FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    np.testing.assert_array_equal(buffer.sampler.tree.leaves[buffer.storage.physical_order()], same.sampler.tree.leaves[:300])
    assert same.sampler.tree.total == pytest.approx(buffer.sampler.tree.total)
    check_consistent(same, layout)

    smaller = make_buffer(cfg, layout, 100, prioritized=False, rng=np.random.default_rng(1))
    load_buffer(smaller, path)
    np.testing.assert_array_equal(stored_markers(smaller, layout), stored_markers(buffer, layout)[-100:])
    smaller.sample_batch()


def test_a_saved_buffer_shares_the_rings_frames_and_loads_back_in_order(cfg, layout, tmp_path):
    # a full replay is most of the machine's memory: saving must not copy its frames (a checkpoint would double it)
    buffer = make_buffer(cfg, layout, 300, rng=np.random.default_rng(0))
    ring = buffer.storage.frames
    ring_bytes = range(ring.data_ptr(), ring.data_ptr() + ring.numel())
    buffer.extend(experience(cfg, layout, 101))
    saved = buffer.storage.state_dict()
    assert saved["state_offset"] == 0 and len(saved["content"]["frames"]) == 101  # not yet wrapped: the live range
    assert saved["content"]["frames"].data_ptr() in ring_bytes
    for k in range(1, 5):
        buffer.extend(experience(cfg, layout, 101, first_marker=1000 * k))
    saved = buffer.storage.state_dict()
    assert saved["state_offset"] > 0  # wrapped: the whole ring, the oldest live state at the offset
    assert saved["content"]["frames"].data_ptr() == ring.data_ptr()
    path = tmp_path / "buffer.pt"
    save_buffer(buffer, path)

    for capacity in (300, 120):  # written straight into the ring; into a smaller one, the newest that fit
        other = make_buffer(cfg, layout, capacity, rng=np.random.default_rng(1))
        load_buffer(other, path)
        assert stored_markers(other, layout).tolist() == stored_markers(buffer, layout)[-capacity:].tolist()
        check_consistent(other, layout)
    merged = make_buffer(cfg, layout, 600, rng=np.random.default_rng(1))  # a learner group's shards merged
    merged.extend(experience(cfg, layout, 51, first_marker=9000))
    append_saved_buffer(merged, read_buffer_file(path))
    assert stored_markers(merged, layout).tolist() == list(range(9000, 9050)) + stored_markers(buffer, layout).tolist()
    check_consistent(merged, layout)


def _corrupt(state, how):
    content, storage = state["storage"]["content"], state["storage"]
    if how == "action out of range":
        content["action"][3] = 99
    elif how == "negative action":
        content["action"][0] = -1
    elif how == "n_steps 0":
        content["n_steps"][1] = 0
    elif how == "n_steps above N":
        content["n_steps"][1] = storage["n_steps"] + 1
    elif how == "NaN reward":
        content["rewards"][2, 0] = float("nan")
    elif how == "infinite gamma":
        content["gammas"][2, 0] = float("inf")
    elif how == "state index past the states":
        content["next_state_index"][-1] = len(content["frames"])
    elif how == "state offset outside the states":
        storage["state_offset"] = len(content["state_float"])
    elif how == "float frames":
        content["frames"] = content["frames"].float()
    elif how == "frames of another shape":
        content["frames"] = content["frames"][:, :, :10]
    elif how == "rewards missing":
        del content["rewards"]
    elif how == "pickled object":
        content["action"] = content["action"].tolist()
    elif how == "negative priority":
        state["sampler"]["leaves"][0] = -1.0
    elif how == "not a buffer":
        state.clear()
        state["format"] = "something else"
    return state


@pytest.mark.parametrize(
    "how, named",
    [
        ("action out of range", "`action` holds values in [0, 99], expected [0, 12)"),
        ("negative action", "`action`"),
        ("n_steps 0", "`n_steps`"),
        ("n_steps above N", "`n_steps`"),
        ("NaN reward", "`rewards` holds NaN"),
        ("infinite gamma", "`gammas` holds NaN or infinite"),
        ("state index past the states", "state indices point outside"),
        ("state offset outside the states", "`state_offset` 101 is not a slot of the 101 stored rows"),
        ("float frames", "`frames` has dtype torch.float32, expected torch.uint8"),
        ("frames of another shape", "`frames` has shape"),
        ("rewards missing", "`rewards` is missing"),
        ("pickled object", "`action` is missing or not a tensor"),
        ("negative priority", "priorities hold"),
        ("not a buffer", "not a saved transition replay buffer"),
    ],
)
def test_a_damaged_buffer_file_is_refused_naming_the_file_and_the_fault(cfg, layout, tmp_path, how, named):
    from trackmania_rl.replay.storage import InvalidBufferFile

    buffer = make_buffer(cfg, layout, 300, prioritized=True, rng=np.random.default_rng(0))
    buffer.extend(experience(cfg, layout, 101))
    path = tmp_path / "buffer"
    save_buffer(buffer, path)
    torch.save(_corrupt(torch.load(path, weights_only=True), how), path)
    target = make_buffer(cfg, layout, 300, prioritized=True, rng=np.random.default_rng(1))
    target.extend(experience(cfg, layout, 31, first_marker=5000))
    before = stored_markers(target, layout)
    with pytest.raises(InvalidBufferFile) as error:
        load_buffer(target, path, n_actions=len(cfg.inputs))
    assert str(path) in str(error.value) and named in str(error.value)
    np.testing.assert_array_equal(stored_markers(target, layout), before)  # nothing changed


@pytest.mark.parametrize("content", [b"", b"not a torch file at all", "truncated", "pickle"])
def test_an_unreadable_buffer_file_is_named_without_a_raw_traceback(cfg, layout, tmp_path, content):
    import pickle

    from trackmania_rl.replay.storage import InvalidBufferFile

    buffer = make_buffer(cfg, layout, 300, rng=np.random.default_rng(0))
    buffer.extend(experience(cfg, layout, 101))
    path = tmp_path / "buffer"
    save_buffer(buffer, path)
    if content == "truncated":
        content = path.read_bytes()[: path.stat().st_size // 2]
    elif content == "pickle":
        content = pickle.dumps({"format": object})
    path.write_bytes(content)
    with pytest.raises(InvalidBufferFile, match="is corrupt or not a plain-data torch file") as error:
        load_buffer(make_buffer(cfg, layout, 300), path)
    assert str(path) in str(error.value) and "weights_only" not in str(error.value)
    with pytest.raises(FileNotFoundError, match="none"):
        load_buffer(make_buffer(cfg, layout, 300), tmp_path / "none")


def test_a_valid_buffer_of_another_config_is_a_mismatch_not_damage(cfg, layout, tmp_path):
    from trackmania_rl.replay.storage import InvalidBufferFile

    buffer = make_buffer(cfg, layout, 300)
    buffer.extend(experience(cfg, layout, 101))
    save_buffer(buffer, tmp_path / "buffer")
    other = make_buffer(cfg.replace(n_steps=cfg.n_steps + 1), layout, 300)
    with pytest.raises(ValueError, match="n_steps") as error:
        load_buffer(other, tmp_path / "buffer")
    assert not isinstance(error.value, InvalidBufferFile)


# ---------------------------------------------------------------------------------------------------------
# prioritized replay
# ---------------------------------------------------------------------------------------------------------


def test_sum_tree_sums_and_finds():
    tree = SumTree(5)
    tree.set(np.array([0, 1, 2, 3, 4]), np.array([1.0, 2.0, 0.0, 3.0, 4.0]))
    assert tree.total == 10.0
    np.testing.assert_array_equal(tree.find(np.array([0.0, 0.99, 1.0, 2.99, 3.0, 5.99, 6.0, 9.99])), [0, 0, 1, 1, 3, 3, 4, 4])


def test_prioritized_sampling_is_deterministic_by_construction(cfg, layout):
    buffer = make_buffer(cfg, layout, 4, prioritized=True, batch_size=8, rng=np.random.default_rng(0))
    buffer.extend(experience(cfg, layout, 5))
    assert len(buffer) == 4
    # leaves 1, 0, 0, 7: stratum k of [0, 8) holds mass [k, k+1); transition 0 owns exactly the first
    buffer.sampler.tree.set(np.arange(4), np.array([1.0, 0.0, 0.0, 7.0]))
    beta = buffer.sampler.beta
    for seed in range(5):
        buffer.sampler.rng = np.random.default_rng(seed)
        batch = buffer.sample_batch()
        assert sorted(batch["index"].tolist()) == [0, 3, 3, 3, 3, 3, 3, 3]
        weight = dict(zip(batch["index"].tolist(), batch["weight"].tolist(), strict=True))
        # w = (N P)^-beta / max: (4 x 1/8)^-beta / 0.5^-beta = 1 and (4 x 7/8)^-beta / 0.5^-beta = 7^-beta
        assert weight[0] == pytest.approx(1.0) and weight[3] == pytest.approx(7.0**-beta)
        np.testing.assert_array_equal(markers(layout, batch["state_float"].numpy()), batch["index"].numpy())


def test_priority_updates_and_new_transitions(cfg, layout):
    pcfg = cfg.replace(prio_alpha=0.5, prio_epsilon=0.01)
    buffer = make_buffer(pcfg, layout, 10, prioritized=True, rng=np.random.default_rng(0))
    buffer.extend(experience(pcfg, layout, 5))
    np.testing.assert_array_equal(buffer.sampler.tree.leaves[:4], [1, 1, 1, 1])  # max leaf so far
    buffer.update_priority(torch.tensor([0, 2]), torch.tensor([3.99, 0.0]))
    np.testing.assert_allclose(buffer.sampler.tree.leaves[:4], [2.0, 1.0, 0.1, 1.0])
    buffer.extend(experience(pcfg, layout, 3, first_marker=100))
    np.testing.assert_allclose(buffer.sampler.tree.leaves[4:6], [2.0, 2.0])  # new ones get the max
    buffer.update_priority(torch.tensor([9]), torch.tensor([100.0]))  # slot 9 holds nothing: ignored
    assert buffer.sampler.tree.leaves[9] == 0


def test_prioritized_evictions_leave_no_mass_on_dead_slots(cfg, layout):
    buffer = make_buffer(cfg, layout, 40, prioritized=True, rng=np.random.default_rng(0))
    exp = experience(cfg, layout, 400)
    for k in range(0, 300, 3):
        buffer.extend(exp.select(np.array([k])))
    live = np.zeros(40, bool)
    live[buffer.storage.physical_order()] = True
    assert np.all(buffer.sampler.tree.leaves[~live] == 0) and np.all(buffer.sampler.tree.leaves[live] > 0)
    for _ in range(20):
        assert np.all(live[buffer.sample_batch()["index"].numpy()])


def test_prioritized_resize_keeps_priorities_with_their_transitions(cfg, layout):
    buffer = make_buffer(cfg, layout, 150, prioritized=True, rng=np.random.default_rng(0))
    buffer.extend(experience(cfg, layout, 101, first_marker=0))
    buffer.extend(experience(cfg, layout, 101, first_marker=1000))
    slots = buffer.storage.physical_order()
    buffer.update_priority(torch.from_numpy(slots), torch.from_numpy(np.arange(len(slots), dtype=np.float64)))
    leaves_in_order = buffer.sampler.tree.leaves[slots].copy()
    buffer.resize(400)
    np.testing.assert_allclose(buffer.sampler.tree.leaves[: len(slots)], leaves_in_order)
    assert buffer.sampler.tree.total == pytest.approx(leaves_in_order.sum())


def test_a_priority_update_skips_the_slots_replaced_since_the_batch_was_sampled(cfg, layout):
    """A batch trains while races are stored (the learner's two threads): its priority update must not land on the
    transitions that replaced some of its slots in the meantime; they keep the priority they were stored with."""
    pcfg = cfg.replace(prio_alpha=1.0, prio_epsilon=1.0)  # leaf = |priority| + 1
    buffer = make_buffer(pcfg, layout, 10, prioritized=True, batch_size=32, rng=np.random.default_rng(0))
    buffer.extend(experience(pcfg, layout, 11))  # slots 0..9 full
    batch = buffer.sample_batch()
    sampled = np.unique(batch["index"].numpy())
    buffer.extend(experience(pcfg, layout, 4, first_marker=100))  # the 3 oldest slots (0, 1, 2) now hold new transitions
    replaced = np.array([0, 1, 2])
    assert set(replaced) <= set(sampled) and len(set(sampled) - set(replaced)) >= 3
    buffer.update_priority(batch["index"], torch.full((32,), 7.0), batch["state_gid"])
    leaves = buffer.sampler.tree.leaves
    np.testing.assert_array_equal(leaves[replaced], [1.0, 1.0, 1.0])  # as stored: the max leaf at the time
    kept = np.setdiff1d(sampled, replaced)
    np.testing.assert_array_equal(leaves[kept], np.full(len(kept), 8.0))
    buffer.update_priority(batch["index"], torch.full((32,), 9.0))  # without state_gid: every live slot, as torchrl does
    assert leaves[0] == 10.0
