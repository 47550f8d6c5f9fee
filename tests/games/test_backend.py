"""The game backends' description (trackmania_rl/games/backend.py, base.py, config/game_backends.py): the one way the rest of the
code learns about a game."""

import subprocess
import sys

import numpy as np
import pytest
from gymnasium.envs.box2d import car_racing as gym_car_racing

from trackmania_rl.games import float_layout_for, make_game_instance
from trackmania_rl.games.backend import DEFAULT_GAME_BACKEND, MS_PER_PHYSICS_STEP, game_backend
from trackmania_rl.games.base import GameBackend, MapSpec
from trackmania_rl.games.car_racing import floats as car_floats
from trackmania_rl.games.car_racing.instance import CarRacingGameInstance


def test_unknown_backend_is_refused_with_the_known_names():
    with pytest.raises(ValueError) as error:
        game_backend("pong")
    assert (
        str(error.value)
        == "user_config.game_backend = 'pong': unknown game backend; expected 'carracing', 'gymnasium', 'supertuxkart' or 'trackmania'"
    )


def test_trackmania_is_known_but_not_implemented():
    with pytest.raises(NotImplementedError) as error:
        game_backend("trackmania")
    assert str(error.value) == (
        "user_config.game_backend = 'trackmania': the Trackmania backend is not implemented yet "
        "(DESIGN §7); set user_config.game_backend = 'carracing'"
    )
    assert MS_PER_PHYSICS_STEP["trackmania"] == 10  # its physics step is known: configs can be built for it


def test_carracing_backend_values(cfg):
    backend = game_backend("carracing")
    assert isinstance(backend, GameBackend) and backend is game_backend(DEFAULT_GAME_BACKEND)
    assert backend.name == "carracing" and MS_PER_PHYSICS_STEP["carracing"] == 20
    assert cfg.ms_per_action == cfg.physics_steps_per_action * MS_PER_PHYSICS_STEP["carracing"]
    # gymnasium's "rgb_array" render size, kept as a constant so that describing the backend needs no gymnasium
    assert backend.full_view_size(cfg) == (gym_car_racing.VIDEO_W, gym_car_racing.VIDEO_H) == (600, 400)
    assert backend.full_view_aspect(cfg) == 1.5
    # a game along a centerline: its races carry the zones and the road tiles, which the wire requires of its clients
    assert {"current_zone_idx", "meters_advanced_along_centerline", "furthest_zone_idx", "road_tiles_touched"} <= set(backend.race_keys)
    layout = backend.make_float_layout(cfg)
    assert layout.names() == list(car_floats.SEGMENT_NAMES) and float_layout_for(cfg).names() == layout.names()
    state_float = np.zeros((3, layout.dim), np.float32)
    state_float[:, layout.slice(car_floats.ZONE_CENTERS_AHEAD)][:, :2] = [[3.0, 4.0], [0.0, 0.0], [-6.0, 8.0]]
    np.testing.assert_array_equal(backend.distance_to_current_zone_center(layout, state_float), [5.0, 0.0, 10.0])
    with pytest.raises(AttributeError):
        backend.name = "other"  # frozen


def test_carracing_game_instance_and_its_full_view(cfg):
    backend = game_backend("carracing")
    game = backend.make_game_instance(cfg.replace(cutoff_rollout_if_race_not_finished_within_duration_ms=200))
    try:
        assert isinstance(game, CarRacingGameInstance)
        spec = MapSpec("view", 3)
        views = []

        def policy(frame, state_float):
            views.append(backend.render_full_view(game))
            return 0, True, 0.0, np.zeros(len(cfg.inputs), np.float32)

        results, _ = game.rollout(policy, spec, game.zone_centers_for(spec), lambda: None)
        width, height = backend.full_view_size(cfg)
        assert len(views) == len(results["actions"]) > 0
        assert all(v.shape == (height, width, 3) and v.dtype == np.uint8 for v in views)
        # the views leave the race as it is
        again, _ = game.rollout(
            lambda f, s: (0, True, 0.0, np.zeros(len(cfg.inputs), np.float32)), spec, game.zone_centers_for(spec), lambda: None
        )
        for ours, theirs in zip(results["frames"], again["frames"], strict=True):
            np.testing.assert_array_equal(ours, theirs)
    finally:
        game.close()
    with pytest.raises(NotImplementedError, match="not implemented yet"):
        make_game_instance(cfg, "trackmania")
    with pytest.raises(ValueError, match="unknown game backend"):
        float_layout_for(cfg, "pong")


def test_games_package_reexports_the_contract_lazily():
    import trackmania_rl.games as games
    from trackmania_rl.games import base

    assert (games.GameCrashed, games.GameInstance, games.MapSpec) == (base.GameCrashed, base.GameInstance, base.MapSpec)
    with pytest.raises(AttributeError):
        games.no_such_name  # noqa: B018


def test_config_and_backend_descriptions_are_light_to_import():
    """Loading a config, and describing a backend, start neither gymnasium nor Box2D (nor numpy, for the config)."""
    code = (
        "import sys\n"
        "import trackmania_rl.config.loader\n"
        "assert not {'numpy', 'gymnasium', 'Box2D', 'cv2', 'torch'} & set(sys.modules), sorted(sys.modules)\n"
        "from trackmania_rl.games.backend import game_backend\n"
        "game_backend('carracing')\n"
        "assert not {'gymnasium', 'Box2D', 'cv2', 'torch'} & set(sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("backend, game", [("carracing", "CarRacing"), ("gymnasium", "the Gymnasium env 'CarRacing-v3'")])
@pytest.mark.parametrize("flag", ["drift", "nitro", "rescue"])
def test_a_game_without_the_karts_controls_refuses_an_action_pressing_one(cfg, backend, game, flag):
    from trackmania_rl.config.schema import ConfigError

    kart = cfg.replace(action_set=["accelerate", "accelerate+left", f"accelerate+right+{flag}", "brake"], gymnasium_env_id="CarRacing-v3")
    # the action is named, with the flag the game would silently drop, before any env is made
    with pytest.raises(ConfigError, match=rf"action 'accelerate\+right\+{flag}' presses {flag}, which {game} has not"):
        game_backend(backend).check_config(kart)
    game_backend("carracing").check_config(cfg)  # the four flags alone: nothing to refuse
