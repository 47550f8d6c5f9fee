"""BothRenderersGame (games/car_racing/renderer_comparison.py): races drawn by the pygame renderer, the fast renderer's
frame of each state at hand, and still so once the game has rebuilt its env after a crash."""

import numpy as np
import pytest

from trackmania_rl.games.base import GameCrashed
from trackmania_rl.games.car_racing.renderer_comparison import BothRenderersGame, frame_difference


def test_both_renderers_draw_again_once_the_game_rebuilt_its_env(cfg, play, fixed_actions_policy):
    game = BothRenderersGame(cfg.replace(frame_renderer="fast", cutoff_rollout_if_race_not_finished_within_duration_ms=1_000))
    drive = fixed_actions_policy(len(cfg.inputs), [0])
    try:
        assert game.cfg.frame_renderer == "pygame"  # its races are drawn by pygame, whatever the config said
        broken = game.env

        def failing_step(action):
            raise RuntimeError("Box2D fell over")

        broken.step = failing_step
        with pytest.raises(GameCrashed):
            play(game, 9, drive)
        assert game.env is not broken  # rebuilt

        differences = []

        def policy(frame, state_float):
            fast = game.env.render_fast_frame()  # the rebuilt env draws fast frames too
            assert fast.shape == frame.shape and fast.dtype == np.uint8
            differences.append(frame_difference(frame, fast).mean())
            return drive(frame, state_float)

        _, stats = play(game, 9, policy)
    finally:
        game.close()
    assert stats["end_reason"] == "overall" and len(differences) >= 1_000 // cfg.ms_per_action - 1
    assert np.mean(differences) <= 1.5  # the same scene (test_fast_view.py bounds it closely)
