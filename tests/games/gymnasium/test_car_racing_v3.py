"""The Gymnasium backend on Gymnasium's own CarRacing-v3 (Box2D, drawn by pygame): its discrete actions through
`gymnasium_env_kwargs`, its 96 x 96 picture as the network's frames, nothing read from the game's memory."""

from pathlib import Path

import numpy as np
import pytest

from trackmania_rl.config.loader import REPO_ROOT, ConfigError, frame_shape, load_config
from trackmania_rl.games import make_game_instance
from trackmania_rl.games.backend import game_backend
from trackmania_rl.games.base import GAME_REWARD, RULES_NATIVE, MapSpec
from trackmania_rl.rollouts.contract import validate_rollout

ACTIONS = ["coast", "left", "right", "accelerate", "brake"]  # CarRacing-v3's discrete actions 0-4, in its order


def _config(tmp_path: Path, kwargs: str) -> Path:
    path = tmp_path / "car_racing_v3.py"
    path.write_text(
        (REPO_ROOT / "config_files" / "config.py").read_text()
        + f"""
game_backend = "gymnasium"
gymnasium_env_id = "CarRacing-v3"
gymnasium_env_kwargs = {kwargs}
gymnasium_ms_per_step = 20.0
physics_steps_per_action = 4
action_set = {ACTIONS!r}
gymnasium_actions = [0, 1, 2, 3, 4]
frame_stack = 2
H_downsized = 64
W_downsized = 64
reward_per_game_point = 0.1
reward_per_new_road_tile = 0.0
missed_road_tile_penalty = 0.0
reward_per_m_advanced_along_centerline = 0.0
shaped_reward_dist_to_cur_vcp = 0.0
constant_reward_per_ms = 0.0
"""
    )
    return path


def test_carracing_v3_plays_with_discrete_actions_from_its_picture_alone(tmp_path):
    cfg = load_config(_config(tmp_path, '{"continuous": False}'))
    game_backend("gymnasium").check_config(cfg)
    game = make_game_instance(cfg, rules=RULES_NATIVE)
    try:
        assert game.env.spec.kwargs["continuous"] is False
        seen = []

        def policy(frame, state_float):
            seen.append(state_float.copy())
            return 3, True, 0.0, np.zeros(len(ACTIONS), dtype=np.float32)  # accelerate

        results, stats = game.rollout(policy, MapSpec("test", 500_000), game.zone_centers_for(MapSpec("test", 500_000)), lambda: None)
    finally:
        game.close()
    layout = game_backend("gymnasium").make_float_layout(cfg)
    steps = validate_rollout(results, frame_shape(cfg), layout.dim, len(ACTIONS))
    n = len(results["actions"])
    # CarRacing-v3's own episode: 1,000 env steps at most, 4 per action here
    assert 0 < n <= 250 and steps.frames.shape[1:] == (2, 64, 64)
    assert layout.dim == 1 + 4 * cfg.n_prev_actions_in_inputs and all(f.shape == (layout.dim,) for f in seen)
    # the game's own reward: -0.1 per env step, + 1000 / tiles for each new tile; driving straight on earns some
    rewards = np.asarray(results[GAME_REWARD], dtype=np.float64)
    assert rewards.min() < 0 < rewards.max()
    assert stats["native_score"] == pytest.approx(rewards.sum(), abs=1e-6)


def test_its_continuous_actions_are_refused_at_start(tmp_path):
    cfg = load_config(_config(tmp_path, "None"))
    with pytest.raises(ConfigError, match="not discrete"):
        game_backend("gymnasium").check_config(cfg)


def test_colour_frames_are_its_picture_r_g_b_resized_by_area(tmp_path):
    import cv2
    import gymnasium

    path = _config(tmp_path, '{"continuous": False}')
    path.write_text(path.read_text() + "frame_colour = True\n")
    cfg = load_config(path)
    assert frame_shape(cfg) == (6, 64, 64)
    game = make_game_instance(cfg, rules=RULES_NATIVE)
    spec = MapSpec("test", 500_001)
    try:

        def policy(frame, state_float):
            return 3, True, 0.0, np.zeros(len(ACTIONS), dtype=np.float32)

        results, _ = game.rollout(policy, spec, game.zone_centers_for(spec), lambda: None)
    finally:
        game.close()
    plain = gymnasium.make("CarRacing-v3", continuous=False)
    try:
        picture, _ = plain.reset(seed=500_001)
    finally:
        plain.close()
    first = results["frames"][0]
    expected = cv2.resize(picture, (64, 64), interpolation=cv2.INTER_AREA).transpose(2, 0, 1)
    assert first.shape == (6, 64, 64)
    np.testing.assert_array_equal(first[3:], expected)  # R, G, B of the reset's picture
    np.testing.assert_array_equal(first[:3], expected)  # standing for the frame before it
    assert "in colour" in game_backend("gymnasium").frame_preprocessing(cfg)
