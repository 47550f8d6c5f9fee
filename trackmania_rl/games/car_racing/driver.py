"""A scripted CarRacing driver: steers toward the zone centers ahead, for tests, benchmarks and sanity checks."""

from __future__ import annotations

import math

import numpy as np

from trackmania_rl.games.base import ExplorationPolicy
from trackmania_rl.games.car_racing import floats as car_floats
from trackmania_rl.games.car_racing.actions import find_action


def centerline_follower(
    cfg,
    layout,
    max_speed: float = 70.0,
    min_speed: float = 30.0,
    steer_threshold: float = 0.06,
) -> ExplorationPolicy:
    """A hand-written exploration policy that steers toward the zone centers ahead (tests, benchmarks,
    sanity checks). It reads only `state_float`, by segment name: it aims at the second look-ahead
    center and picks a target speed from how far the next ones turn away."""
    zones_slice = layout.slice(car_floats.ZONE_CENTERS_AHEAD)
    velocity_slice = layout.slice(car_floats.VELOCITY)
    n_actions = len(cfg.inputs)
    actions = {
        (accel, brake, steer): find_action(cfg, accelerate=accel, brake=brake, left=steer == "left", right=steer == "right")
        for accel, brake in ((True, False), (False, False), (False, True))
        for steer in ("left", "straight", "right")
    }

    def policy(frame, state_float):
        zones = state_float[zones_slice].reshape(-1, 2)
        forward_speed = float(state_float[velocity_slice][1])
        # heading error to the aim point: positive = it lies to the right
        aim = zones[min(1, len(zones) - 1)]
        error = math.atan2(aim[0], max(aim[1], 1e-3))
        steer = "right" if error > steer_threshold else "left" if error < -steer_threshold else "straight"
        # slow down for bends: the larger the bearing of the centers ahead, the lower the speed
        ahead = zones[1:6]
        bend = float(np.max(np.abs(np.arctan2(ahead[:, 0], np.maximum(ahead[:, 1], 1e-3))))) if len(ahead) else 0.0
        target = max(min_speed, max_speed * (1 - bend / 1.2))
        if forward_speed < target:
            accel, brake = True, False
        elif forward_speed > target + 8:
            accel, brake = False, True
        else:
            accel, brake = False, False
        if accel and steer != "straight" and abs(error) > 0.3:
            accel = False  # full gas while turning hard spins the rear wheels
        action = actions[(accel, brake, steer)]
        q_values = np.zeros(n_actions, dtype=np.float32)
        q_values[action] = 1.0
        return action, True, 1.0, q_values

    return policy
