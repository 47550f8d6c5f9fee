"""A scripted SuperTuxKart driver: steers toward a zone center ahead, slows for bends (tests, benchmarks, sanity checks)."""

from __future__ import annotations

import math

import numpy as np

from trackmania_rl.games.base import ExplorationPolicy
from trackmania_rl.games.supertuxkart import floats as kart_floats
from trackmania_rl.games.supertuxkart.actions import find_action


def zone_follower(
    cfg,
    layout,
    aim_index: int = 1,
    steer_threshold: float = 0.05,
    max_speed: float = 40.0,
    min_speed: float = 10.0,
    slow_speed: float = 15.0,
) -> ExplorationPolicy:
    """A policy that reads only `state_float`, by segment name: it steers toward the `aim_index`-th zone center ahead
    (left or right beyond `steer_threshold` rad of bearing), and picks a target speed from how far the next centers
    turn away (the sharper the bend, the slower, from `max_speed` down to `min_speed` m/s): full throttle below it,
    coasting a little above, braking further above. Below `slow_speed` it aims halfway to that center."""
    zones, velocity = layout.slice(kart_floats.ZONE_CENTERS_AHEAD), layout.slice(kart_floats.VELOCITY)
    n_actions = len(cfg.inputs)
    actions = {
        (pedal, steer): find_action(cfg, **{pedal: pedal != "coast", "left": steer == "left", "right": steer == "right"})
        for pedal in ("accelerate", "coast", "brake")
        for steer in ("left", "straight", "right")
    }

    def policy(frame, state_float):
        centers = state_float[zones].reshape(-1, 3)
        aim = centers[min(aim_index, len(centers) - 1)]
        speed = float(state_float[velocity][2])
        if speed < slow_speed:  # slow in a tight bend: aim nearer, or the kart cuts into its inside wall
            aim = (centers[0] + aim) / 2
        bearing = math.atan2(aim[0], max(aim[2], 1e-3))  # positive: on the right
        steer = "right" if bearing > steer_threshold else "left" if bearing < -steer_threshold else "straight"
        ahead = centers[1:5]
        bend = float(np.max(np.abs(np.arctan2(ahead[:, 0], np.maximum(ahead[:, 2], 1e-3))))) if len(ahead) else 0.0
        target = max(min_speed, max_speed * (1 - bend / 1.3))
        pedal = "accelerate" if speed < target else "coast" if speed < target + 5 else "brake"
        action = actions[(pedal, steer)]
        q_values = np.zeros(n_actions, dtype=np.float32)
        q_values[action] = 1.0
        return action, True, 1.0, q_values

    return policy
