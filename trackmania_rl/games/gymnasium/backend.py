"""Any registered Gymnasium env with an image observation and discrete actions, as a backend
(games/backend.py `game_backend("gymnasium")`): Atari Enduro (config_files/enduro.py) is the one shipped.

Light to import: gymnasium, the env's package (ale-py for "ALE/..." ids) and OpenCV load with the first game instance.
A game without a centerline: no zone centers, no shaping potential, no off-road term; its races carry the env's own
reward per action (`game_reward`), which `reward_per_game_point` pays.
"""

from __future__ import annotations

import numpy as np

from trackmania_rl.games.base import GAME_REWARD, RULES_TRAINING, GameBackend, refuse_kart_flags
from trackmania_rl.games.gymnasium import floats as gym_floats


def make_game_instance(cfg, rules: str = RULES_TRAINING):
    from trackmania_rl.games.gymnasium.instance import GymnasiumGameInstance

    return GymnasiumGameInstance(cfg, rules)


def check_config(cfg) -> None:
    """Makes the env once: ConfigError naming what cannot work (unknown id, missing package, no image, unmapped action,
    an action pressing drift, nitro or rescue: the env's actions are mapped from the four flags only)."""
    from trackmania_rl.config.schema import ConfigError

    refuse_kart_flags(cfg, f"the Gymnasium env {cfg.gymnasium_env_id!r}")
    from trackmania_rl.games.gymnasium.instance import describe_env, make_env

    if cfg.frame_hud:
        raise ConfigError(
            "config setting `frame_hud` = True: it draws the built-in CarRacing's HUD; a Gymnasium env's frame is its own picture"
        )
    env = make_env(cfg)
    try:
        describe_env(cfg, env)
    finally:
        env.close()


def full_view_size(cfg) -> tuple[int, int]:
    """(width, height) of the env's picture: its observation's (made once to find out)."""
    from trackmania_rl.games.gymnasium.instance import make_env

    env = make_env(cfg)
    try:
        height, width = env.observation_space.shape[:2]
    finally:
        env.close()
    return int(width), int(height)


def frame_preprocessing(cfg) -> str:
    from trackmania_rl.games.gymnasium.frames import describe_preprocessing

    return describe_preprocessing(cfg)


def render_full_view(game) -> np.ndarray:
    return game.render_full_view()


GYMNASIUM = GameBackend(
    name="gymnasium",
    make_float_layout=gym_floats.make_float_layout,
    make_game_instance=make_game_instance,
    distance_to_current_zone_center=None,
    off_road_fraction=None,
    render_full_view=render_full_view,
    full_view_size=full_view_size,
    frame_preprocessing=frame_preprocessing,
    race_keys=(GAME_REWARD,),
    check_config=check_config,
)
