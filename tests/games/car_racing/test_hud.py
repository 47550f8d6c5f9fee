"""CarRacing's HUD bar in the frame (config setting frame_hud): the pygame renderer draws what Gymnasium's own
CarRacing-v3 observation shows, the fast renderer draws the same bars, and a setting that cannot work is refused."""

import cv2
import gymnasium
import numpy as np
import pytest

from tests.games.gymnasium.test_car_racing_v3 import _config
from trackmania_rl.config.loader import load_config
from trackmania_rl.config.schema import ConfigError
from trackmania_rl.games.backend import game_backend
from trackmania_rl.games.car_racing.env import MAX_FRAME_W, CarRacingEnv, frame_render_size
from trackmania_rl.games.car_racing.fast_view import hud_rectangles
from trackmania_rl.games.car_racing.renderer_comparison import frame_difference

SIZE = 96  # Gymnasium's observation: 96 x 96, its HUD bar the bottom 12 rows
HUD_ROWS = SIZE * 5 // 40
SCORE_COLUMNS = 16  # the score digits CarRacing writes at the bar's left end (not drawn here): 0-15 of 96 columns


def _drive(env, steps: int, rng):
    """Full throttle, then random controls: the speed, ABS, steering and gyro bars all move."""
    for k in range(steps):
        action = np.array([rng.uniform(-1, 1), 1.0 if k < 50 else rng.uniform(0, 1), 0.0 if k < 50 else rng.uniform(0, 0.3)])
        yield env.step(action)


def test_with_frame_hud_the_pygame_frame_is_gymnasiums_own_observation_but_for_the_score_digits():
    ours = CarRacingEnv(render_size=frame_render_size(SIZE, SIZE, hud=True), hud=True)
    plain = gymnasium.make("CarRacing-v3").unwrapped
    try:
        ours.reset(seed=3)
        plain.reset(seed=3)
        rng_ours, rng_plain = np.random.default_rng(0), np.random.default_rng(0)
        checked = 0
        for k, (_, (observation, *_)) in enumerate(zip(_drive(ours, 90, rng_ours), _drive(plain, 90, rng_plain), strict=True)):
            if k % 15 == 14:
                mine = ours.render_state_pixels()
                assert mine.shape == observation.shape == (SIZE, SIZE, 3)
                np.testing.assert_array_equal(mine[: SIZE - HUD_ROWS], observation[: SIZE - HUD_ROWS])
                np.testing.assert_array_equal(mine[SIZE - HUD_ROWS :, SCORE_COLUMNS:], observation[SIZE - HUD_ROWS :, SCORE_COLUMNS:])
                checked += 1
        assert checked == 6
        # the bars are there (the bar itself is black): the speed bar in columns 12-14 of 96, the others to its right
        bars = mine[SIZE - HUD_ROWS :].max(axis=(0, 2))
        assert bars[12:14].max() > 50 and bars[SCORE_COLUMNS:].max() > 50
    finally:
        ours.close()
        plain.close()


@pytest.mark.parametrize("height, width", [(64, 64), (96, 96)])
def test_the_fast_renderer_draws_the_hud_bars_where_pygame_draws_them(height, width):
    env = CarRacingEnv(render_size=frame_render_size(height, width, hud=True), fast_frame_size=(height, width), hud=True)
    plain_view = CarRacingEnv(render_size=frame_render_size(height, width), fast_frame_size=(height, width))
    try:
        env.reset(seed=5)
        plain_view.reset(seed=5)
        hud_rows = slice(height - -(-height * 5 // 40), height)
        for _ in _drive(env, 80, np.random.default_rng(1)):
            pass
        quads, _ = hud_rectangles(env)
        assert len(quads) >= 6  # the bar, speed, some wheels' spin, steering or gyro
        fast = env.render_fast_frame()[0]
        pygame_grey = cv2.cvtColor(env.render_state_pixels(), cv2.COLOR_RGB2GRAY)
        difference = frame_difference(fast, pygame_grey)
        assert difference.mean() < 1.5 and difference[hud_rows].mean() < 1.5, (difference.mean(), difference[hud_rows].mean())
        # without the HUD the frame's bottom rows are the scene: the bars are what changed there
        for _ in _drive(plain_view, 80, np.random.default_rng(1)):
            pass
        no_hud = plain_view.render_fast_frame()[0]
        assert no_hud.shape == fast.shape
        assert frame_difference(no_hud[hud_rows], fast[hud_rows]).mean() > 20
    finally:
        env.close()
        plain_view.close()


def test_frame_render_size_with_the_hud_is_the_frame_itself_and_refuses_what_the_window_cannot_give():
    assert frame_render_size(64, 64, hud=True) == (64, 64)
    assert frame_render_size(64, 64) == (64, 74)  # the view above the HUD: 74 rows drawn, the top 64 kept
    assert frame_render_size(800, MAX_FRAME_W, hud=True) == (MAX_FRAME_W, 800)
    with pytest.raises(ValueError, match="H_downsized"):
        frame_render_size(801, 64, hud=True)


def test_frame_hud_is_refused_for_a_gymnasium_env(tmp_path):
    path = _config(tmp_path, '{"continuous": False}')
    path.write_text(path.read_text() + "\nframe_hud = True\n")
    cfg = load_config(path)
    with pytest.raises(ConfigError, match="frame_hud"):
        game_backend("gymnasium").check_config(cfg)
