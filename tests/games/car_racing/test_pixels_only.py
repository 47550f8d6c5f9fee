"""A pixels-only CarRacing agent's game (`float_inputs = "own_actions"`, `frame_stack` > 1): the same race as the float
agent's, only what the network sees differs: the last frames stacked, the clock and its previous actions as floats;
the rollout keeps the car's state and the centerline progress for the reward. On the real game."""

import numpy as np
import pytest

from trackmania_rl.config.loader import ConfigError, default_config, frame_shape
from trackmania_rl.games.backend import game_backend
from trackmania_rl.games.car_racing import floats as car_floats
from trackmania_rl.games.car_racing.instance import CarRacingGameInstance
from trackmania_rl.replay.experience import rollout_to_experience
from trackmania_rl.rollouts.contract import validate_rollout

STACK = 3
SEED = 7


def _pixels_cfg(cfg):
    return cfg.replace(float_inputs="own_actions", frame_stack=STACK, shaped_reward_dist_to_cur_vcp=0.0)


def _race(cfg, play, fixed_actions_policy):
    game = CarRacingGameInstance(cfg)
    try:
        actions = [0] * 30 + [1] * 6 + [0] * 20 + [2] * 6  # accelerate, turning left then right (inputs_list order)
        seen = []
        policy = fixed_actions_policy(len(cfg.inputs), actions)

        def recording(frame, state_float):
            seen.append((frame.copy(), state_float.copy()))
            return policy(frame, state_float)

        results, stats = play(game, SEED, recording)
        return game, results, stats, seen
    finally:
        game.close()


def test_the_pixels_only_race_is_the_float_agents_race_seen_through_stacked_frames_and_own_actions(play, fixed_actions_policy):
    base = default_config().replace(shaped_reward_dist_to_cur_vcp=0.0, cutoff_rollout_if_race_not_finished_within_duration_ms=6_000)
    pixels = _pixels_cfg(base)
    _, full, _, _ = _race(base, play, fixed_actions_policy)
    game, mine, _, seen = _race(pixels, play, fixed_actions_policy)
    n = len(mine["actions"])
    assert n == len(full["actions"]) > 30
    layout = game_backend("carracing").make_float_layout(pixels)
    assert layout.names() == list(car_floats.OWN_ACTIONS_SEGMENTS) and layout.dim == 1 + 4 * pixels.n_prev_actions_in_inputs
    steps = validate_rollout(mine, frame_shape(pixels), layout.dim, len(pixels.inputs))
    frames = np.stack(mine["frames"])
    assert frames.shape[1:] == (STACK, pixels.H_downsized, pixels.W_downsized) == game.frame_shape
    # the newest frame of each state is the float agent's frame; the older ones are the states before, the first
    # state's frame standing for those before the start
    single = np.stack(full["frames"])[:, 0]
    assert np.array_equal(frames[:, -1], single)
    for k in range(len(frames)):
        for j in range(STACK):
            assert np.array_equal(frames[k, j], single[max(0, k - (STACK - 1 - j))])
    # the network's floats are the float agent's first ones; what the network saw is what was stored
    assert np.allclose(np.stack(mine["state_float"]), np.stack(full["state_float"])[:, : layout.dim])
    assert all(np.array_equal(f, stored) for (_, f), stored in zip(seen, mine["state_float"], strict=False))
    # the car's state and the progress still reach the learner: the same rewards as the float agent's race
    for key in ("car_gear_and_wheels", "meters_advanced_along_centerline", "road_tiles_touched", "road_tiles_missed"):
        assert np.allclose(np.asarray(mine[key], dtype=np.float64), np.asarray(full[key], dtype=np.float64)), key
    full_layout = game_backend("carracing").make_float_layout(base)
    mine_exp = rollout_to_experience(mine, pixels, layout, 0.99, steps=steps)
    full_exp = rollout_to_experience(full, base, full_layout, 0.99)
    assert np.allclose(mine_exp.rewards, full_exp.rewards) and np.any(mine_exp.rewards != 0)
    assert mine_exp.frames.shape[1:] == (STACK, pixels.H_downsized, pixels.W_downsized)


@pytest.mark.parametrize("name", ["shaped_reward_dist_to_cur_vcp", "off_road_penalty_per_action"])
def test_a_reward_term_that_reads_the_games_floats_is_refused_for_a_pixels_only_agent(name):
    cfg = _pixels_cfg(default_config()).replace(**{name: 0.5})
    with pytest.raises(ConfigError, match=f"setting `{name}` = 0.5 needs the floats read from the game"):
        game_backend("carracing").check_config(cfg)
    game_backend("carracing").check_config(cfg.replace(**{name: 0.0}))  # no error
