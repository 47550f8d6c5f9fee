"""The fast renderer (games/car_racing/fast_view.py, frame_renderer "fast") against CarRacing's own pygame drawing, on real
game states: races driven by the scripted centerline follower from the start's zoom-in on, and spins on the grass."""

import numpy as np
import pytest

from trackmania_rl.games.base import MapSpec
from trackmania_rl.games.car_racing.driver import centerline_follower
from trackmania_rl.games.car_racing.env import CarRacingEnv, frame_render_size
from trackmania_rl.games.car_racing.fast_view import grown
from trackmania_rl.games.car_racing.instance import CarRacingGameInstance
from trackmania_rl.games.car_racing.renderer_comparison import BothRenderersGame, frame_difference

# a frame's mean |grey difference| (0-255) may be this large; measured: ~0.2 on average, ~0.6 at most
# (docs/performance.md, game.fast_frame_abs_diff); an offset of one pixel in the camera makes it ~10
MEAN_DIFFERENCE_BOUND = 1.5


def both_frames(game: BothRenderersGame):
    """The pygame renderer's frame of the game's current state and the fast renderer's."""
    return game.render_frame()[0], game.env.render_fast_frame()[0]


def race_with_both_renderers(cfg, seed: int, frames_wanted: int, observe):
    """A race of the centerline follower drawn by pygame, the fast renderer drawing every decision's state beside it:
    `observe(game, pygame_frame, fast_frame)` at each decision, up to `frames_wanted` decisions."""
    game = BothRenderersGame(cfg.replace(cutoff_rollout_if_race_not_finished_within_duration_ms=60_000))
    follower = centerline_follower(game.cfg, game.float_layout)
    seen = [0]

    def policy(frame, state_float):
        if seen[0] < frames_wanted:
            pygame_frame, fast_frame = both_frames(game)
            np.testing.assert_array_equal(pygame_frame, frame[0])  # the rollout's own frame, drawn again: the same
            observe(game, pygame_frame, fast_frame)
        seen[0] += 1
        return follower(frame, state_float)

    spec = MapSpec("fast", seed)
    try:
        game.rollout(policy, spec, game.zone_centers_for(spec), lambda: None)
    finally:
        game.close()
    assert seen[0] >= frames_wanted


@pytest.mark.parametrize(("height", "width"), [(64, 64), (48, 96)])
def test_both_renderers_draw_the_same_frames_within_a_bound(cfg, height, width):
    means, zoomed = [], []

    def observe(game, pygame_frame, fast_frame):
        assert fast_frame.shape == pygame_frame.shape == (height, width) and fast_frame.dtype == np.uint8
        means.append(frame_difference(pygame_frame, fast_frame).mean())
        if game.env.t < 1:
            zoomed.append(means[-1])

    race_with_both_renderers(cfg.replace(H_downsized=height, W_downsized=width), 7, 120, observe)
    assert len(zoomed) >= 10  # the zoom-in of the first second was compared too
    assert max(means) <= MEAN_DIFFERENCE_BOUND, max(means)
    assert np.mean(means) <= MEAN_DIFFERENCE_BOUND / 3


def car_image(game, frame_with_car, fast_with_car, monkeypatch):
    """Each renderer's car alone: |frame with the car - the same frame drawn without it|, (pygame, fast)."""
    renderer = game.env.fast_frames
    with monkeypatch.context() as patch:
        patch.setattr(game.env.car, "draw", lambda *args, **kwargs: None)
        patch.setattr(renderer, "car_order", [])
        patch.setattr(renderer, "_car_quads", lambda: (np.zeros((0, 4, 2)), np.zeros((0, 1)), []))
        pygame_without, fast_without = both_frames(game)
    return frame_difference(frame_with_car, pygame_without), frame_difference(fast_with_car, fast_without)


def centre_of_mass(image) -> np.ndarray:
    rows, cols = np.indices(image.shape)
    return np.array([(image * rows).sum(), (image * cols).sum()]) / image.sum()


def test_the_car_sits_where_the_pygame_frame_has_it(cfg, monkeypatch):
    """Each renderer's car alone (the frame minus the same frame drawn without the car) has its centre at the same place,
    within a tenth of a pixel on average, and where the camera puts the car (the hull's centre)."""
    offsets = []

    def observe(game, pygame_frame, fast_frame):
        if game.env.t < 1.5:  # the camera's zoom-in: the car is a speck
            return
        theirs, ours = (centre_of_mass(image) for image in car_image(game, pygame_frame, fast_frame, monkeypatch))
        expected = game.world_to_frame(game.env.car.hull.position)[0]
        assert np.abs(theirs - expected).max() < 1.0, (theirs, expected)  # the camera's transform, checked on pygame's frame
        offsets.append(ours - theirs)

    for height, width in ((64, 64), (96, 80)):
        offsets.clear()
        race_with_both_renderers(cfg.replace(H_downsized=height, W_downsized=width), 11, 60, observe)
        assert len(offsets) >= 30
        mean, largest = np.abs(np.mean(offsets, axis=0)), np.abs(offsets).max(axis=0)
        assert (mean < 0.1).all() and (largest < 0.5).all(), (height, width, mean, largest)


def test_a_tile_recoloured_in_play_is_drawn_so_by_both_renderers(cfg):
    """CarRacing recolours a tile in place (`tile.color[:] = ...`) when the car touches it: the fast renderer sees the new
    colour at once, and the pygame renderer still does."""
    height = width = 64
    env = CarRacingEnv(render_size=frame_render_size(height, width), fast_frame_size=(height, width))
    try:
        env.reset(seed=3)
        for _ in range(60):  # past the zoom-in
            env.step(np.array([0.0, 0.0, 0.0]))
        before = env.render_fast_frame()[0]
        pygame_before = env.render_state_pixels()
        for tile in env.road[:6]:  # the tiles under and ahead of the car, made red as no tile ever is
            tile.color[:] = (255, 0, 0)
        after, pygame_after = env.render_fast_frame()[0], env.render_state_pixels()
        changed = frame_difference(before, after) > 20
        changed_pygame = np.abs(pygame_before.astype(np.int16) - pygame_after.astype(np.int16)).max(axis=2)[:height] > 20
        assert changed.sum() > 30  # the red tiles show
        # and where pygame draws them
        assert (changed & changed_pygame).sum() >= 0.8 * changed.sum()
    finally:
        env.close()


def test_growing_a_square_moves_each_edge_by_the_rectangles_reach():
    square = np.array([[[0.0, 0.0], [2.0, 0.0], [2.0, 2.0], [0.0, 2.0]]])
    np.testing.assert_allclose(grown(square, 0.5, 0.25)[0], [[-0.5, -0.25], [2.5, -0.25], [2.5, 2.25], [-0.5, 2.25]])
    np.testing.assert_allclose(grown(square[:, ::-1], -0.5, -0.5)[0], [[0.5, 1.5], [1.5, 1.5], [1.5, 0.5], [0.5, 0.5]])  # clockwise
    diamond = np.array([[[1.0, 0.0], [2.0, 1.0], [1.0, 2.0], [0.0, 1.0]]])
    # a 45-degree edge reaches 0.5 * (|nx| + |ny|) = 0.707 out; the vertices move along the axes by 0.707 * sqrt(2) = 1
    np.testing.assert_allclose(grown(diamond, 0.5, 0.5)[0], [[1.0, -1.0], [3.0, 1.0], [1.0, 3.0], [-1.0, 1.0]])


def test_the_fast_renderer_reads_no_file_and_neither_does_the_pygame_frame(cfg, monkeypatch, play, fixed_actions_policy):
    """CarRacing's HUD loads pygame's font file at every render; a reinstall of pygame under a running collector made renders
    fail with FileNotFoundError (docs/runs/2026-11-27_gpu_box_h100). The frames need no file: a race plays with every
    font load failing, with either renderer."""
    import pygame

    def no_font(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "freesansbold.ttf")

    monkeypatch.setattr(pygame.font, "Font", no_font)
    for renderer in ("pygame", "fast"):
        game = CarRacingGameInstance(cfg.replace(frame_renderer=renderer, cutoff_rollout_if_race_not_finished_within_duration_ms=1_200))
        try:
            results, stats = play(game, 2, fixed_actions_policy(len(cfg.inputs), [0]))
        finally:
            game.close()
        assert len(results["frames"]) == 1_200 // cfg.ms_per_action and stats["end_reason"] == "overall"
        # the fast renderer draws the frame itself, so no conversion is done (or timed); pygame's view is converted
        assert (stats["instrumentation__convert_frame"] == 0) == (renderer == "fast"), (renderer, stats)
