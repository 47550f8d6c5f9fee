"""A race's per-step lists packed into arrays for a local collector's queue (rollouts/packed_race.py): a real race
comes back with the same items of the same types, validates and fills the buffers exactly as before; lists whose
items are not alike travel as they are; a packed race that breaks the contract is still refused."""

import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest

from tests.helpers import SHORT_RACES, layout_for, make_rollout, tiny_config, write_config
from trackmania_rl.benchmarks.recorded_races import record_races
from trackmania_rl.config.live import LiveConfig
from trackmania_rl.games import float_layout_for
from trackmania_rl.replay.experience import rollout_to_experience
from trackmania_rl.rollouts.contract import InvalidRollout, RolloutShape, validate_envelope, validated_race
from trackmania_rl.rollouts.packed_race import PackedSteps, StepArray, pack_race, packed_nbytes, unpack_race


@pytest.fixture(scope="module")
def real_race(tmp_path_factory):
    """One race of the built-in game played by the collectors' loop (policy version added as
    a source adds it), its config and float layout."""
    cfg = LiveConfig(write_config(tmp_path_factory.mktemp("race"), SHORT_RACES), game_backend="carracing").current
    (rollout, stats, meta), *_ = record_races(cfg, "carracing", 1)[0]  # fresh weights: the no-progress cut-off ends it
    rollout["policy_version"] = [2] * len(rollout["actions"])
    meta["source"] = "local"
    return (rollout, stats, meta), cfg, float_layout_for(cfg)


def _through_the_queue(rollout: dict) -> dict:
    """What the learner gets: packed by the collector, pickled onto the queue, unpickled and unpacked."""
    return unpack_race(pickle.loads(bytes(ForkingPickler.dumps(pack_race(rollout)))))


def test_a_real_race_comes_back_with_the_same_items_of_the_same_types(real_race):
    (rollout, _, _), _, _ = real_race
    packed = pack_race(rollout)
    assert isinstance(packed["frames"], PackedSteps) and packed["frames"].array.shape[0] == len(rollout["frames"])
    back = _through_the_queue(rollout)
    assert back.keys() == rollout.keys()
    for key, value in rollout.items():
        if not isinstance(value, list):
            assert back[key] == value, key
            continue
        assert isinstance(back[key], list) and len(back[key]) == len(value), key
        for mine, theirs in zip(back[key], value, strict=True):
            assert type(mine) is type(theirs), (key, type(mine), type(theirs))
            assert np.array_equal(np.asarray(mine), np.asarray(theirs)), key
            if isinstance(theirs, np.ndarray):
                assert mine.dtype == theirs.dtype and mine.shape == theirs.shape, key
        assert np.array_equal(np.asarray(back[key]), np.asarray(value)), key
    assert isinstance(back["frames"], StepArray) and isinstance(back["actions"], StepArray)


def test_a_packed_race_validates_and_fills_the_buffers_as_before(real_race):
    (rollout, stats, meta), cfg, layout = real_race
    shape = RolloutShape((1, cfg.H_downsized, cfg.W_downsized), layout.dim, len(cfg.inputs))
    _, plain_steps = validated_race((rollout, stats, meta), shape)
    back = _through_the_queue(rollout)
    _, packed_steps = validated_race((back, stats, meta), shape)
    for mine, theirs in zip(packed_steps, plain_steps, strict=True):
        assert mine.dtype == theirs.dtype and np.array_equal(mine, theirs)
    plain = rollout_to_experience(rollout, cfg, layout, gamma=0.99, steps=plain_steps)
    packed = rollout_to_experience(back, cfg, layout, gamma=0.99, steps=packed_steps)
    for name in ("frames", "state_float", "action", "rewards", "gammas", "n_steps", "state_index", "next_state_index", "potential"):
        assert np.array_equal(getattr(packed, name), getattr(plain, name)), name


def test_a_packed_race_that_breaks_the_contract_is_refused(real_race):
    (rollout, stats, meta), cfg, layout = real_race
    shape = RolloutShape((1, cfg.H_downsized, cfg.W_downsized), layout.dim, len(cfg.inputs))
    small = dict(rollout, frames=[f[:, ::2, ::2].copy() for f in rollout["frames"]])
    with pytest.raises(InvalidRollout, match="frames"):
        validated_race((_through_the_queue(small), stats, meta), shape)
    wide = dict(rollout, frames=[f.astype(np.float32) for f in rollout["frames"]])
    with pytest.raises(InvalidRollout, match="frames"):
        validated_race((_through_the_queue(wide), stats, meta), shape)
    bad_action = dict(rollout, actions=[len(cfg.inputs)] * len(rollout["actions"]))
    with pytest.raises(InvalidRollout, match="actions"):
        validated_race((_through_the_queue(bad_action), stats, meta), shape)


@pytest.mark.parametrize(
    "values",
    [
        [np.zeros(3), np.zeros(4)],  # shapes differ
        [np.zeros(3, np.float32), np.zeros(3, np.float64)],  # dtypes differ
        [1, 2.0],  # Python types differ
        [True, 1],  # bool is not int here
        [np.float32(1), np.float64(2)],  # numpy scalar types differ
        [2**70, 1],  # beyond int64
        ["a", "b"],  # not numbers
        [None, None],
        [np.array(1.0), np.array(2.0)],  # 0-d arrays
        [np.array([None]), np.array([None])],  # object arrays
    ],
)
def test_lists_whose_items_are_not_alike_travel_as_they_are(values):
    back = unpack_race(pack_race({"steps": values, "empty": []}))
    assert back["empty"] == [] and not isinstance(back["empty"], StepArray)
    assert not isinstance(back["steps"], StepArray) and back["steps"] is not None
    assert len(back["steps"]) == len(values) and all(type(a) is type(b) for a, b in zip(back["steps"], values, strict=True))


def test_numpy_scalars_come_back_as_numpy_scalars_of_their_type():
    values = [np.float32(1.5), np.float32(-2.0), np.float32(0.25)]
    back = unpack_race(pickle.loads(pickle.dumps(pack_race({"x": values}))))["x"]
    assert isinstance(back, StepArray) and [type(v) for v in back] == [np.float32] * 3 and back == values


def test_a_step_array_whose_length_was_edited_gives_its_items():
    steps = unpack_race(pack_race({"x": [1, 2, 3]}))["x"]
    assert np.asarray(steps, dtype=np.float64).tolist() == [1.0, 2.0, 3.0]
    steps.append(4)
    assert np.asarray(steps).tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("finished", [True, False])
def test_a_made_race_round_trips_its_rows_as_views_and_validates(finished):
    cfg = tiny_config()
    layout = layout_for(cfg)
    rollout = make_rollout(cfg, layout, 7, finished, first_marker=40)
    rollout["policy_version"] = [3, 3, 4, 4, 4, 5, 5][: len(rollout["actions"])]
    packed = pack_race(rollout)
    frames = packed["frames"].array
    assert frames.dtype == np.uint8 and frames.shape == (7, 1, cfg.H_downsized, cfg.W_downsized) and frames.flags.c_contiguous
    assert packed_nbytes(packed) >= frames.nbytes + packed["state_float"].array.nbytes
    back = unpack_race(packed)
    assert back["frames"][3].base is frames  # rows are views of the one array, not copies
    shape = RolloutShape((1, cfg.H_downsized, cfg.W_downsized), layout.dim, len(cfg.inputs))
    validate_envelope((back, {"race_finished": finished}, {"source": "ray"}), shape)
    for key in ("actions", "policy_version", "current_zone_idx", "action_was_greedy"):
        assert back[key] == list(rollout[key]), key
    assert back["furthest_zone_idx"] == rollout["furthest_zone_idx"] and ("race_time" in back) == finished


def test_a_race_without_actions_keeps_empty_lists():
    cfg = tiny_config()
    rollout = make_rollout(cfg, layout_for(cfg), 1, True, race_time=10)
    back = unpack_race(pack_race(rollout))
    assert back["actions"] == [] and back["q_values"] == [] and len(back["frames"]) == 1
