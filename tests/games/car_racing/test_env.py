"""CarRacing as this project renders it (trackmania_rl/games/car_racing/env.py): the road drawing and the
frame render size, on the real game (Gymnasium CarRacing-v3, headless)."""

import numpy as np
import pytest
from gymnasium.envs.box2d import car_racing as gym_car_racing

from trackmania_rl.games import make_game_instance
from trackmania_rl.games.car_racing.env import CarRacingEnv, _RoadDrawing


@pytest.mark.parametrize("unsure_px", [_RoadDrawing.UNSURE_PX, 60.0])
def test_road_drawing_draws_exactly_what_car_racing_draws(monkeypatch, unsure_px):
    """The vectorised on-screen test changes no pixel: car poses all over the playfield (on the road,
    on grass, at its edges, every heading), during the zoom-in of the first second and after, with
    visited (recoloured) tiles; with a wide unsure band, many polygons go to CarRacing's own test."""
    monkeypatch.setattr(_RoadDrawing, "UNSURE_PX", unsure_px)
    env = CarRacingEnv(render_size=(64, 74))
    rng = np.random.default_rng(3)
    compared = 0
    for seed in (0, 5):
        env.reset(seed=seed)
        for tile in env.road[::7]:
            tile.color[:] = env.road_color  # what the contact listener does to a visited tile
        hull = env.car.hull
        track_points = [(x, y) for _, _, x, y in env.track]
        for k in range(12):
            if k % 3 == 0:
                position = track_points[int(rng.integers(len(track_points)))]
            else:
                position = tuple(rng.uniform(-gym_car_racing.PLAYFIELD, gym_car_racing.PLAYFIELD, size=2))
            hull.position, hull.angle = position, float(rng.uniform(-2 * np.pi, 2 * np.pi))
            env.t = float(rng.choice([0.0, 0.4, 1.0, 7.5]))
            ours = env.render_state_pixels()
            with monkeypatch.context() as original:
                original.setattr(CarRacingEnv, "_render_road", gym_car_racing.CarRacing._render_road)
                theirs = env.render_state_pixels()
            np.testing.assert_array_equal(ours, theirs)
            compared += 1
    env.close()
    assert compared == 24


def test_larger_frames_are_rendered_larger_without_touching_the_module(cfg, play, fixed_actions_policy):
    game = make_game_instance(cfg.replace(H_downsized=128, W_downsized=160, cutoff_rollout_if_race_not_finished_within_duration_ms=400))
    results, _ = play(game, 1, fixed_actions_policy(len(cfg.inputs), [0]))
    game.close()
    assert results["frames"][0].shape == (1, 128, 160)
    assert game.env.render_size == (160, 147)  # 147 x 35/40 = 128 rows above the HUD
    assert (gym_car_racing.STATE_W, gym_car_racing.STATE_H) == (96, 96)
