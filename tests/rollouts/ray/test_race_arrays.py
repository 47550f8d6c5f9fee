"""A race through its object-store form and back: contiguous typed arrays out, the contract's lists back."""

import numpy as np
import pytest

from tests.helpers import layout_for, make_rollout, tiny_config
from trackmania_rl.rollouts.contract import RolloutShape, validate_envelope
from trackmania_rl.rollouts.ray import race_arrays

pytestmark = pytest.mark.ray


@pytest.mark.parametrize("finished", [True, False])
def test_a_race_survives_the_round_trip_as_arrays(finished):
    cfg = tiny_config()
    layout = layout_for(cfg)
    rollout = make_rollout(cfg, layout, 7, finished, first_marker=40)
    rollout["policy_version"] = [3, 3, 4, 4, 4, 5, 5][: len(rollout["actions"])]
    envelope = (rollout, {"race_finished": finished}, {"source": "ray", "collector": 1})

    message = race_arrays.to_arrays(envelope)
    frames = message["arrays"]["frames"]
    assert frames.dtype == np.uint8 and frames.shape == (7, 1, cfg.H_downsized, cfg.W_downsized) and frames.flags.c_contiguous
    assert message["arrays"]["state_float"].shape == (7, layout.dim) and message["arrays"]["actions"].ndim == 1

    back = race_arrays.to_envelope(message)
    shape = RolloutShape((1, cfg.H_downsized, cfg.W_downsized), layout.dim, len(cfg.inputs))
    validate_envelope(back, shape)
    got = back[0]
    assert set(got) == set(rollout)
    for key in ("actions", "policy_version", "current_zone_idx", "action_was_greedy"):
        assert got[key] == list(rollout[key]) and all(type(v) in (int, bool, float) for v in got[key])
    assert all(np.array_equal(a, b) for a, b in zip(got["frames"], rollout["frames"], strict=True))
    assert got["frames"][3].base is frames  # rows are views of the one array, not copies
    assert got["furthest_zone_idx"] == rollout["furthest_zone_idx"] and ("race_time" in got) == finished
    assert back[1:] == envelope[1:]


def test_a_race_without_actions_keeps_empty_lists():
    cfg = tiny_config()
    rollout = make_rollout(cfg, layout_for(cfg), 1, True, race_time=10)
    back = race_arrays.to_envelope(race_arrays.to_arrays((rollout, {}, {"source": "ray"})))
    assert back[0]["actions"] == [] and back[0]["q_values"] == [] and len(back[0]["frames"]) == 1
