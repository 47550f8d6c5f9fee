"""The two renderers side by side, for measuring how close the fast renderer's frames are to the pygame renderer's
(tests/games/car_racing/test_fast_view.py, the benchmark's frame_fidelity.py): a game whose races are drawn by the
pygame renderer while its env can draw the fast renderer's frame of the same state, and the difference of two frames.
"""

from __future__ import annotations

import numpy as np

from trackmania_rl.config.game_backends import RENDERER_PYGAME
from trackmania_rl.games.car_racing.env import CarRacingEnv
from trackmania_rl.games.car_racing.fast_view import FastFrameRenderer
from trackmania_rl.games.car_racing.instance import CarRacingGameInstance


class BothRenderersGame(CarRacingGameInstance):
    """A CarRacing game drawn by the pygame renderer (whatever `cfg.frame_renderer` says) whose env also draws the fast
    renderer's frame of its current state: `game.env.render_fast_frame()`.

    The fast renderer is given to every env as the game makes it (`_make_env`), not to the env of the moment: a game
    that crashes makes itself a new env (`_rebuild_env`), which has it too."""

    def __init__(self, cfg, *args, **kwargs):
        super().__init__(cfg.replace(frame_renderer=RENDERER_PYGAME), *args, **kwargs)

    def _make_env(self) -> CarRacingEnv:
        env = super()._make_env()
        _, height, width = self.frame_shape
        # bound to each track at reset
        env.fast_frames = FastFrameRenderer(height, width, render_h=env.render_size[1], hud=env.hud, colour=self.cfg.frame_colour)
        return env


def frame_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| per pixel of two uint8 frames, as int16."""
    return np.abs(a.astype(np.int16) - b.astype(np.int16))
