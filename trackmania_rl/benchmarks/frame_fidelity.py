"""How close the fast renderer's frames are to the pygame renderer's (DESIGN §5, issue 40), on real game states.

- `game.fast_frame_abs_diff`: the mean absolute grey difference (0-255) between the two renderers' frames of the
  same state, over every decision of the shipped model's greedy races played on the pygame frames (`trained_on`: the
  frames its settings say it learned on) on FIDELITY_SEEDS, the start's zoom-in included (target <= 2.0); with its
  spread over frames and its largest frame.
- `game.fast_frame_same_action_fraction`: at those decisions, how often the shipped model's greedy action on the fast
  frame is its action on the pygame frame (target >= 0.95).
- `game.fast_frame_abs_diff_random_controls`: the same difference over states of random controls on RANDOM_SEEDS
  (skids, grass, spins, off the road), split to show where it is largest: per pixel around the car or elsewhere, per
  frame during the zoom-in or after it, with a wheel on the grass or all on the road.
The seeds are neither trained on (1,000-49,999), held out (100-109) nor final test tracks (500,000 and up).
"""

from __future__ import annotations

import statistics

import numpy as np

from trackmania_rl.agents.acting import acting_torch_settings
from trackmania_rl.evaluation.evaluate import EvaluationError, open_policy
from trackmania_rl.games.car_racing.renderer_comparison import BothRenderersGame, frame_difference
from trackmania_rl.rollouts.greedy import play_race

FIDELITY_SEEDS = (200, 201, 202, 203, 204, 205)
RANDOM_SEEDS = (210, 211, 212)
CAR_BOX_PX = 5  # "around the car": this many pixels either way of the car's centre in the frame


def run(weights, quick: bool):
    try:
        policy = open_policy(weights=weights)
    except EvaluationError as e:
        yield {"figure": "game.fast_frame_abs_diff", "value": None, "skipped": str(e)}
        return
    # states played on the pygame frames; BothRenderersGame gives the fast renderer to every env it makes, so an env
    # the game rebuilds after a crash draws both as well (game.env is read at each use, never kept across races)
    seeds = FIDELITY_SEEDS[:2] if quick else FIDELITY_SEEDS
    yield from _greedy_figures(policy, BothRenderersGame(policy.cfg), seeds, trained_on=policy.cfg.frame_renderer)
    yield from _random_control_figures(BothRenderersGame(policy.cfg), RANDOM_SEEDS[:1] if quick else RANDOM_SEEDS, 80 if quick else 200)


def _greedy_figures(policy, game: BothRenderersGame, seeds, trained_on: str):
    diffs, same, zoom_diffs = [], [], []

    def observer(step, frame, state_float, decision):
        fast = game.env.render_fast_frame()
        diffs.append(float(frame_difference(frame, fast).mean()))
        if game.env.t < 1:
            zoom_diffs.append(diffs[-1])
        same.append(int(policy(fast, state_float)[0]) == int(decision[0]))

    try:
        with acting_torch_settings():
            for seed in seeds:
                play_race(game, policy, seed, observer)
    finally:
        game.close()
    common = {"seeds": list(seeds), "frames": len(diffs), "frame_size": list(game.frame_shape[1:])}
    yield {
        "figure": "game.fast_frame_abs_diff",
        "value": round(statistics.fmean(diffs), 3),
        "unit": "grey levels (0-255)",
        "target": "<= 2.0",
        "median_frame": round(statistics.median(diffs), 3),
        "p95_frame": round(float(np.percentile(diffs, 95)), 3),
        "max_frame": round(max(diffs), 3),
        "mean_during_zoom_in": round(statistics.fmean(zoom_diffs), 3) if zoom_diffs else None,
        "states": "the shipped model's greedy races, played on the pygame frames",
        "trained_on": trained_on,
        **common,
    }
    yield {
        "figure": "game.fast_frame_same_action_fraction",
        "value": round(sum(same) / len(same), 4),
        "unit": "fraction",
        "target": ">= 0.95",
        **common,
    }


def _random_control_figures(game: BothRenderersGame, seeds, actions_per_seed: int):
    """Random controls, each held 1 to 8 actions: full throttle, hard brakes and steering make skids, spins and grass."""
    env, rng = game.env, np.random.default_rng(0)  # driven here directly: the game never rebuilds it
    _, height, width = game.frame_shape
    diffs, parts = [], {"near_car": [], "elsewhere": [], "zoom_in": [], "after_zoom_in": [], "on_grass": [], "on_road": []}
    try:
        for seed in seeds:
            env.reset(seed=seed)
            control, held = None, 0
            for _ in range(actions_per_seed):
                if held == 0:
                    control, held = np.array([rng.uniform(-1, 1), rng.uniform(0, 1), rng.choice([0.0, 0.0, 1.0])]), int(rng.integers(1, 9))
                held -= 1
                for _ in range(game.cfg.physics_steps_per_action):
                    env.step(control)
                if abs(env.car.hull.position[0]) > 300 or abs(env.car.hull.position[1]) > 300:
                    break  # about to leave the playfield
                pygame_frame = game.convert_frame(env.render_state_pixels())[0]
                difference = frame_difference(pygame_frame, env.render_fast_frame()[0])
                diffs.append(float(difference.mean()))
                row, col = (int(round(v)) for v in game.world_to_frame(env.car.hull.position)[0])
                near = np.zeros_like(difference, dtype=bool)
                near[max(0, row - CAR_BOX_PX) : row + CAR_BOX_PX + 1, max(0, col - CAR_BOX_PX) : col + CAR_BOX_PX + 1] = True
                parts["near_car"].append(float(difference[near].mean()))
                parts["elsewhere"].append(float(difference[~near].mean()))
                parts["zoom_in" if env.t < 1 else "after_zoom_in"].append(diffs[-1])
                parts["on_grass" if any(not wheel.tiles for wheel in env.car.wheels) else "on_road"].append(diffs[-1])
    finally:
        game.close()
    yield {
        "figure": "game.fast_frame_abs_diff_random_controls",
        "value": round(statistics.fmean(diffs), 3),
        "unit": "grey levels (0-255)",
        "frames": len(diffs),
        "seeds": list(seeds),
        "mean_by_part": {name: round(statistics.fmean(values), 3) if values else None for name, values in parts.items()},
        "frames_by_part": {name: len(values) for name, values in parts.items()},
        "frame_size": [height, width],
    }
