"""SuperTuxKart time trials as a backend (games/backend.py `game_backend("supertuxkart")`).

Light to import: the float layout (numpy). OpenCV and the game's process come with the first game instance; pystk2 is
imported by the game's own process only (child.py).
"""

from __future__ import annotations

import numpy as np

from trackmania_rl.config.loader import frame_shape
from trackmania_rl.games.base import CENTERLINE_RACE_KEYS, RULES_TRAINING, GameBackend, MapSpec
from trackmania_rl.games.supertuxkart import floats as kart_floats
from trackmania_rl.games.supertuxkart.tracks import ROLE_SETTINGS

FULL_VIEW_SIZE = (400, 400)  # instance.py FULL_VIEW_SIZE (a constant here: describing the backend starts no game)


def make_game_instance(cfg, rules: str = RULES_TRAINING):
    from trackmania_rl.games.supertuxkart.instance import SuperTuxKartGameInstance

    return SuperTuxKartGameInstance(cfg, rules)


def check_config(cfg) -> None:
    """ConfigError naming what cannot work: a frame option SuperTuxKart has not, data not prepared, a map that is no race
    track (an arena, a cut-scene, an unknown name, a reverse the track has not), a held-out or test track the map cycle
    trains on or that is in both roles, fewer than 4 such tracks, no held-out track for the held-out evaluation."""
    from trackmania_rl.config.schema import ConfigError
    from trackmania_rl.games.supertuxkart.data import GameDataMissing, prepared_root
    from trackmania_rl.games.supertuxkart.tracks import UnraceableMap, check_maps

    for name in ("frame_colour", "frame_hud"):
        if getattr(cfg, name):
            raise ConfigError(f"config setting `{name}` = True: SuperTuxKart's frame is the road drawn in grey (set it to False)")
    if cfg.held_out_eval_period_s > 0 and not cfg.supertuxkart_held_out_tracks:
        raise ConfigError(
            f"setting `supertuxkart_held_out_tracks` is empty: the held-out evaluation (held_out_eval_period_s = "
            f"{cfg.held_out_eval_period_s:g}) chooses best/ on those tracks (or set held_out_eval_period_s = 0)"
        )
    try:
        check_maps(cfg, prepared_root())
    except (UnraceableMap, GameDataMissing) as e:
        raise ConfigError(str(e)) from None
    if cfg.float_inputs != "own_actions":
        return
    for name in ("shaped_reward_dist_to_cur_vcp", "off_road_penalty_per_action"):  # read from floats the network lacks then
        if getattr(cfg, name) != 0:
            raise ConfigError(
                f'setting `{name}` = {getattr(cfg, name)} needs the floats read from the game, and `float_inputs` is "own_actions"'
            )


def frame_preprocessing(cfg) -> str:
    words = (
        f"The road around the kart seen from above, drawn from the track's driveline (not the game's picture): "
        f"{cfg.W_downsized} x {cfg.H_downsized} uint8 grey, shape (1, H_downsized, W_downsized), row-major from the top-left pixel, "
        f"{cfg.supertuxkart_view_m:g} m across; the kart at the middle column, 3/4 of the way down, heading up (x on the "
        "right as SuperTuxKart's world has it). Each driveline node is its quad of road (its width, sides meeting the "
        "next node's), filled with OpenCV fillConvexPoly (LINE_AA, corners at quarter pixels) in grey 150 + 4 per metre "
        "it lies above the kart, clipped to [70, 230], nodes over 30 m above or below left out, those nearest the kart's "
        "height drawn last; off the road 0 (trackmania_rl/games/supertuxkart/view.py)."
    )
    if cfg.frame_stack == 1:
        return words
    return words + (
        f" A state is the last {cfg.frame_stack} such frames stacked as channels, oldest first, shape {frame_shape(cfg)}; "
        "a race's first frame stands for the frames before it."
    )


def render_full_view(game) -> np.ndarray:
    return game.render_full_view()


def _eval_map(name: str) -> MapSpec:
    return MapSpec(name, 0, is_explo=False, fill_buffer=False)  # the race's seed: our kart's time trial is the same whatever it is


def held_out_maps(cfg) -> list[MapSpec]:
    """The held-out evaluation's races: one on each map of `supertuxkart_held_out_tracks`."""
    return [_eval_map(name) for name in cfg.supertuxkart_held_out_tracks]


MAP_SETS = {"held_out": ROLE_SETTINGS[0], "test": ROLE_SETTINGS[1]}  # evaluate.py --tracks held_out|test


def named_maps(cfg, text: str) -> list[MapSpec]:
    """The maps `text` names: "held_out" or "test" (the config's supertuxkart_held_out_tracks or supertuxkart_test_tracks),
    or a comma list of maps ("lighthouse,zengarden:reverse"). ValueError (tracks.py UnraceableMap) naming a map that
    cannot be raced, a map named twice, an empty list, the game's data not prepared."""
    from trackmania_rl.games.supertuxkart.data import GameDataMissing, prepared_root
    from trackmania_rl.games.supertuxkart.tracks import UnraceableMap, check_map

    if text in MAP_SETS:
        names = list(getattr(cfg, MAP_SETS[text]))
        if not names:
            raise UnraceableMap(f"the config's {MAP_SETS[text]} is empty: no {text} track to race")
    else:
        names = [name.strip() for name in str(text).split(",")]
    try:
        root = prepared_root()
    except GameDataMissing as e:
        raise ValueError(str(e)) from None
    for i, name in enumerate(names):
        check_map(name, root)
        if name in names[:i]:
            raise UnraceableMap(f"SuperTuxKart map {name!r} is named twice")
    return [_eval_map(name) for name in names]


def native_time_limit_s(cfg) -> float:
    return cfg.supertuxkart_native_time_cap_ms / 1000


SUPERTUXKART = GameBackend(
    name="supertuxkart",
    make_float_layout=kart_floats.make_float_layout,
    make_game_instance=make_game_instance,
    distance_to_current_zone_center=kart_floats.distance_to_current_zone_center,
    off_road_fraction=kart_floats.off_road_fraction,
    render_full_view=render_full_view,
    full_view_size=lambda cfg: FULL_VIEW_SIZE,
    frame_preprocessing=frame_preprocessing,
    race_keys=CENTERLINE_RACE_KEYS,
    check_config=check_config,
    held_out_maps=held_out_maps,
    named_maps=named_maps,
    native_time_limit_s=native_time_limit_s,
)
