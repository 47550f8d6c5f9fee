"""The rollout contract: one validator for the game's rollout_results and for whole envelopes."""

import re

import numpy as np
import pytest

from tests.helpers import layout_for, make_rollout, tiny_config
from trackmania_rl.rollouts.contract import (
    ACTION_KEYS,
    POLICY_VERSION,
    STATE_KEYS,
    Envelope,
    InvalidRollout,
    RolloutShape,
    policy_lag,
    validate_envelope,
    validate_rollout,
    validated_race,
)

CFG = tiny_config()
LAYOUT = layout_for(CFG)
SHAPE = RolloutShape((1, CFG.H_downsized, CFG.W_downsized), LAYOUT.dim, len(CFG.inputs))


def _envelope(n_states=8, finished=False, **changes):
    rollout = make_rollout(CFG, LAYOUT, n_states, finished)
    rollout.update(changes)
    return rollout, {"race_finished": finished}, {"source": "test"}


def test_a_valid_envelope_passes_and_comes_back_typed():
    rollout, stats, meta = _envelope(finished=True)
    envelope = validate_envelope((rollout, stats, meta), SHAPE)
    assert isinstance(envelope, Envelope) and envelope.rollout_results is rollout and envelope.meta is meta
    assert set(STATE_KEYS) | set(ACTION_KEYS) <= set(rollout)


@pytest.mark.parametrize(
    "versions, fragment",
    [
        (None, "lacks `policy_version`"),
        ([0] * 3, "`policy_version` has 3 entries but `actions` has 8"),
        ([-1] * 8, "integers >= 0"),
        ([0.5] * 8, "integers >= 0"),
        ([[0]] * 8, "one number per step"),
    ],
)
def test_policy_versions_are_required_from_every_source(versions, fragment):
    rollout, stats, meta = _envelope()
    if versions is None:
        del rollout[POLICY_VERSION]
    else:
        rollout[POLICY_VERSION] = versions
    with pytest.raises(InvalidRollout, match=re.escape(fragment)):
        validate_envelope((rollout, stats, meta), SHAPE)


def test_the_game_contract_does_not_ask_for_policy_versions():
    rollout, _, _ = _envelope()
    del rollout[POLICY_VERSION]
    validate_rollout(rollout, SHAPE.frame_shape, SHAPE.float_dim, SHAPE.n_actions)  # no error


@pytest.mark.parametrize(
    "envelope, fragment",
    [
        ("not a tuple", "an envelope must be"),
        ((1, 2), "an envelope must be"),
        (lambda e: (e[0], None, e[2]), "`end_race_stats` must be a dict"),
        (lambda e: (e[0], e[1], []), "`meta` must be a dict"),
        (lambda e: ([], e[1], e[2]), "rollout_results must be a dict"),
        (lambda e: (e[0], e[1], {"collector": 0}), "`meta['source']` must name the rollout source, got None"),
        # what the learner reads of the results and the race facts, of any source: the right type or refused
        (lambda e: (e[0], {"native_score": "912"}, e[2]), "`end_race_stats['native_score']` must be a finite number"),
        (lambda e: (e[0], {"race_time": float("nan")}, e[2]), "`end_race_stats['race_time']` must be a finite number"),
        (lambda e: (e[0], {"instrumentation__game": [1]}, e[2]), "`end_race_stats['instrumentation__game']` must be"),
        (lambda e: (e[0], {b"race_time": 1}, e[2]), "`end_race_stats` keys must be strings"),
        (lambda e: (e[0], e[1], {**e[2], "put_time": None}), "`meta['put_time']` must be a finite number"),
        (lambda e: (e[0], e[1], {**e[2], "map_status": ["trained"]}), "`meta['map_status']` must be one of trained, blind"),
        (lambda e: (e[0], e[1], {**e[2], "map_name": 3}), "`meta['map_name']` must be a string"),
    ],
)
def test_envelope_parts_are_named_when_wrong(envelope, fragment):
    if callable(envelope):
        envelope = envelope(_envelope())
    with pytest.raises(InvalidRollout, match=re.escape(fragment)):
        validate_envelope(envelope, SHAPE)


@pytest.mark.parametrize(
    "change, fragment",
    [
        (lambda r: r.pop("furthest_zone_idx"), "`furthest_zone_idx` and the per-state centerline keys come together"),
        (lambda r: r.__setitem__("furthest_zone_idx", -1), "`furthest_zone_idx` must be an integer >= 0"),
        (lambda r: r.__setitem__("actions", np.zeros(7, np.int64)), "`actions` must be a list"),
        (lambda r: r.__setitem__("race_time", 12.5), "`race_time` must be a positive integer"),
        (lambda r: [r[key].append(r[key][0]) for key in ACTION_KEYS], "must have 7 actions"),  # a finished race with A = F
        (lambda r: r["state_float"].__setitem__(1, r["state_float"][1].astype(np.int32)), "`state_float[1]` must be floats"),
        (lambda r: r["q_values"].__setitem__(0, np.full(len(CFG.inputs), np.inf, np.float32)), "`q_values` must be finite"),
        (lambda r: r["q_values"].__setitem__(3, np.zeros(len(CFG.inputs) + 1, np.float32)), "`q_values` must be finite vectors of shape"),
        (lambda r: r["q_values"].__setitem__(2, None), "`q_values` must be finite vectors of shape"),
        (lambda r: r["frames"].__setitem__(5, r["frames"][5].astype(bool)), "`frames[5]` must be uint8"),
        (lambda r: r["frames"].__setitem__(4, r["frames"][4].tolist()), "`frames[4]` must be uint8"),
        (lambda r: r["frames"].__setitem__(6, r["frames"][6][:, :-1]), "`frames[6]` must be uint8 of shape"),
        (lambda r: r["state_float"].__setitem__(2, list(r["state_float"][2])), "`state_float[2]` must be floats"),
    ],
)
def test_game_rollout_problems_are_named(change, fragment):
    rollout = make_rollout(CFG, LAYOUT, 8, finished=True)
    change(rollout)
    with pytest.raises(InvalidRollout, match=re.escape(fragment)):
        validate_rollout(rollout, SHAPE.frame_shape, SHAPE.float_dim, SHAPE.n_actions)


def test_the_validator_returns_the_per_step_vectors_stacked():
    rollout, stats, meta = _envelope(n_states=6, finished=True)
    envelope, steps = validated_race((rollout, stats, meta), SHAPE)
    assert envelope.rollout_results is rollout
    assert steps.frames.dtype == np.uint8 and np.array_equal(steps.frames, np.stack(rollout["frames"]))
    assert steps.state_float.dtype == np.float32 and np.array_equal(steps.state_float, np.stack(rollout["state_float"]))
    assert steps.q_values.shape == (5, SHAPE.n_actions) and np.array_equal(steps.q_values, np.stack(rollout["q_values"]))


def test_policy_lag_is_counted_from_the_oldest_action():
    rollout = make_rollout(CFG, LAYOUT, 4, finished=False)
    rollout[POLICY_VERSION] = [5, 7, 9, 9]
    assert policy_lag(rollout, 10) == 5  # the oldest weights, not the mean (2.5)
    assert policy_lag(rollout, 9) == 4
    rollout_without_actions = make_rollout(CFG, LAYOUT, 1, finished=True)
    assert policy_lag(rollout_without_actions, 3) == 0
