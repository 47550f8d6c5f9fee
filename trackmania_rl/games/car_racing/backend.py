"""Gymnasium's CarRacing-v3 as a backend (games/backend.py `game_backend("carracing")`).

Imports the float layout (numpy) but not the game: gymnasium, Box2D and cv2 load with the first game
instance, so a learner that needs only the layout and the shaping distance never starts them.
"""

from __future__ import annotations

import numpy as np

from trackmania_rl.config.loader import frame_shape
from trackmania_rl.games.base import CENTERLINE_RACE_KEYS, ROAD_TILE_COUNTS, RULES_TRAINING, GameBackend, refuse_kart_flags
from trackmania_rl.games.car_racing import floats as car_floats

# gymnasium's car_racing VIDEO_W x VIDEO_H, the size of its "rgb_array" render (a constant here, so that
# describing the backend does not import gymnasium; tests/games/test_backend.py checks it)
FULL_VIEW_SIZE = (600, 400)
# how the frame is made, by renderer (config setting frame_renderer; games/car_racing/env.py)
_FRAME_VIEW = (
    "CarRacing-v3's state view (its 'state_pixels' render, the car kept pointing up, no skid marks), as if drawn "
    "W_downsized pixels wide and ceil(H_downsized * 40 / 35) tall, so that the rows above the HUD number exactly "
    "H_downsized; those top rows in grey as uint8, shape (1, H_downsized, W_downsized), row-major from the top-left "
    "pixel. No other scaling: the network maps the bytes to [-1, 1) itself. "
)
FRAME_PREPROCESSING = {
    "pygame": _FRAME_VIEW + "Drawn by CarRacing's own pygame code into its 1000 x 800 window, smoothscaled to that size, "
    "then OpenCV COLOR_RGB2GRAY (0.299 R + 0.587 G + 0.114 B, rounded) (frame_renderer 'pygame').",
    "fast": _FRAME_VIEW + "Drawn straight at that size (frame_renderer 'fast': the same polygons and camera, each colour "
    "as its grey level, filled at 4x the size each way and area-averaged down; trackmania_rl/games/car_racing/fast_view.py), "
    "within ~0.2 grey levels of the pygame drawing on average.",
}


# with frame_hud: what changes in the words above
_HUD_VIEW = (
    "With frame_hud: the whole view, as if drawn W_downsized x H_downsized pixels (no rows cut off), its bottom 5/40 the "
    "HUD bar as CarRacing draws it (black, the speed bar, the four wheels' ABS bars, the steering and gyro bars) without "
    "its score digits."
)


# with frame_colour: what changes in the words above
_COLOUR_VIEW = (
    "With frame_colour: no grey conversion: a frame is the view's R, G and B channels, shape (3, H_downsized, W_downsized) "
    "(the fast renderer fills each colour as the smoothscaled pygame frame has it: every channel 2 levels darker)."
)


def frame_preprocessing(cfg) -> str:
    """How the frames of `cfg` (its frame_renderer, frame_hud, frame_colour and frame_stack) are made, in words."""
    words = FRAME_PREPROCESSING[cfg.frame_renderer] + (" " + _HUD_VIEW if cfg.frame_hud else "")
    words += " " + _COLOUR_VIEW if cfg.frame_colour else ""
    if cfg.frame_stack == 1:
        return words
    return words + (
        f" A state is the last {cfg.frame_stack} such frames stacked as channels, oldest first, shape {frame_shape(cfg)}; "
        "a race's first frame stands for the frames before it."
    )


def check_config(cfg) -> None:
    """ConfigError for an action pressing a control CarRacing has not (drift, nitro, rescue), and for a reward term the
    network's floats cannot give: with float_inputs "own_actions" the stored floats hold no zone center (the shaping's
    distance) and no wheel contact (the off-road penalty)."""
    from trackmania_rl.config.schema import ConfigError

    refuse_kart_flags(cfg, "CarRacing")
    if cfg.float_inputs != "own_actions":
        return
    for name in ("shaped_reward_dist_to_cur_vcp", "off_road_penalty_per_action"):
        if getattr(cfg, name) != 0:
            raise ConfigError(
                f"setting `{name}` = {getattr(cfg, name)} needs the floats read from the game, and `float_inputs` is "
                '"own_actions": set it to 0 (the centerline progress and the road tiles still pay)'
            )


def make_game_instance(cfg, rules: str = RULES_TRAINING):
    """A CarRacingGameInstance whose races end by `rules` (imports the game)."""
    from trackmania_rl.games.car_racing.instance import CarRacingGameInstance

    return CarRacingGameInstance(cfg, rules)


def render_full_view(game) -> np.ndarray:
    """The CarRacingGameInstance's full view (see its `render_full_view`)."""
    return game.render_full_view()


CAR_RACING = GameBackend(
    name="carracing",
    make_float_layout=car_floats.make_float_layout,
    make_game_instance=make_game_instance,
    distance_to_current_zone_center=car_floats.distance_to_current_zone_center,
    off_road_fraction=car_floats.wheels_off_road_fraction,
    render_full_view=render_full_view,
    full_view_size=lambda cfg: FULL_VIEW_SIZE,
    frame_preprocessing=frame_preprocessing,
    race_keys=CENTERLINE_RACE_KEYS + ROAD_TILE_COUNTS,
    check_config=check_config,
    frame_renderer=lambda cfg: cfg.frame_renderer,
)
