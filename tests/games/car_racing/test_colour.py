"""Colour frames (`frame_colour = True`) of the built-in CarRacing: each frame R, G, B, drawn by the fast renderer as the
pygame renderer draws them, stacked frame after frame, and taken by the network; on the real game."""

import numpy as np
import torch

from trackmania_rl.agents.iqn import IQNNetwork
from trackmania_rl.config.loader import default_config, frame_shape
from trackmania_rl.evaluation.video import FrameComposer
from trackmania_rl.games.backend import game_backend
from trackmania_rl.games.car_racing.backend import frame_preprocessing
from trackmania_rl.games.car_racing.instance import CarRacingGameInstance
from trackmania_rl.games.car_racing.renderer_comparison import BothRenderersGame, frame_difference
from trackmania_rl.replay.experience import rollout_to_experience
from trackmania_rl.rollouts.contract import validate_rollout

# a frame's mean |difference| per channel value (0-255) may be this large (the grey frames' bound, test_fast_view.py);
# measured on colour frames: ~0.1-0.5
MEAN_DIFFERENCE_BOUND = 1.5


def test_the_fast_renderer_draws_the_pygame_renderers_colours(play, fixed_actions_policy):
    cfg = default_config().replace(frame_colour=True, cutoff_rollout_if_race_not_finished_within_duration_ms=4_000)
    game = BothRenderersGame(cfg)
    means, greens = [], []
    try:

        def observe(frame, state_float):
            pygame_frame, fast_frame = game.render_frame(), game.env.render_fast_frame()
            np.testing.assert_array_equal(pygame_frame, frame)  # the rollout's own frame, drawn again
            assert fast_frame.shape == pygame_frame.shape == (3, 64, 64) and fast_frame.dtype == np.uint8
            means.append(frame_difference(pygame_frame, fast_frame).mean())
            greens.append(fast_frame.reshape(3, -1).mean(axis=1))
            return policy(frame, state_float)

        policy = fixed_actions_policy(len(cfg.inputs), [0] * 20 + [1] * 10 + [0] * 10)
        play(game, 5, observe)
    finally:
        game.close()
    assert len(means) >= 40
    assert max(means) <= MEAN_DIFFERENCE_BOUND and np.mean(means) <= MEAN_DIFFERENCE_BOUND / 3, max(means)
    # R, G, B in that order: the grass (102, 204, 102) makes green the brightest channel of the view, red and blue alike
    red, green, blue = np.mean(greens, axis=0)
    assert green > red + 20 and abs(red - blue) < 10, (red, green, blue)


def test_a_stacked_colour_race_is_each_frames_r_g_b_oldest_first_through_the_contract_and_the_network(play, fixed_actions_policy):
    cfg = default_config().replace(
        frame_colour=True,
        frame_stack=2,
        frame_renderer="fast",
        float_inputs="own_actions",
        shaped_reward_dist_to_cur_vcp=0.0,
        cutoff_rollout_if_race_not_finished_within_duration_ms=3_000,
    )
    assert frame_shape(cfg) == (6, 64, 64)
    game = CarRacingGameInstance(cfg)
    drawn = []
    try:
        policy = fixed_actions_policy(len(cfg.inputs), [0] * 30)

        def recording(frame, state_float):
            drawn.append(game.render_frame())  # the frame of the state the policy is asked about
            return policy(frame, state_float)

        results, _ = play(game, 9, recording)
    finally:
        game.close()
    frames = np.stack(results["frames"])
    assert frames.shape[1:] == (6, 64, 64) and len(frames) == len(drawn) > 10
    np.testing.assert_array_equal(frames[:, 3:], np.stack(drawn))  # the newest frame last, its R, G, B in order
    np.testing.assert_array_equal(frames[1:, :3], frames[:-1, 3:])  # the frame before it first
    np.testing.assert_array_equal(frames[0, :3], frames[0, 3:])  # a race's first frame stands for the one before it
    layout = game_backend("carracing").make_float_layout(cfg)
    steps = validate_rollout(results, frame_shape(cfg), layout.dim, len(cfg.inputs))
    assert steps.frames.shape[1:] == (6, 64, 64)
    experience = rollout_to_experience(results, cfg, layout, 0.99, steps=steps)
    assert experience.frames.shape[1:] == (6, 64, 64)
    network = IQNNetwork(cfg, layout, len(cfg.inputs))
    q, _ = network(torch.from_numpy(frames[:4]), torch.zeros(4, layout.dim), 8)
    assert q.shape == (4, 8, len(cfg.inputs)) and torch.isfinite(q).all()
    assert "(6, 64, 64)" in frame_preprocessing(cfg) and "R, G and B" in frame_preprocessing(cfg)


def test_watch_shows_the_networks_colour_frames_in_colour():
    cfg = default_config().replace(frame_colour=True, frame_stack=2)
    composer = FrameComposer(cfg, 240)
    frame = np.zeros((6, 64, 64), np.uint8)
    frame[1] = 200  # the older frame green
    frame[3] = 150  # the newer red
    image = composer.compose(np.zeros((400, 600, 3), np.uint8), frame, np.zeros(len(cfg.inputs)), 0, 0.0, 0)
    layout = composer.layout
    network = image[:, layout.view_width : layout.view_width + layout.network_width]
    h, w = network.shape[:2]  # a 2 x 2 mosaic, oldest first
    assert tuple(network[h // 4, w // 4]) == (0, 200, 0)
    assert tuple(network[h // 4, 3 * w // 4]) == (150, 0, 0)
