"""CarRacing's float-input layout and its normalisation (DESIGN §3.3, §4).

Car-frame coordinates are (lateral, forward) as returned by Box2D's `GetLocalVector`; lateral is
positive to the car's right... see `car_frame` in car_racing.py for the exact convention.
The normalisation constants are the statistics of states met while driving (see docs/config.md).
"""

from __future__ import annotations

from trackmania_rl.float_layout import MINI_RACE_CLOCK, FloatLayout, Segment

ACTION_FLAGS = ("accelerate", "brake", "left", "right")
WHEELS = ("front_left", "front_right", "rear_left", "rear_right")

# Segment names, used by name everywhere else.
PREVIOUS_ACTIONS = "previous_actions"
VELOCITY = "velocity_car_frame"  # (lateral, forward)
ANGULAR_VELOCITY = "angular_velocity"
STEERING_ANGLE = "steering_angle"
WHEEL_SPEEDS = "wheel_speeds"
WHEELS_ON_ROAD = "wheels_on_road"
ZONE_CENTERS_AHEAD = "zone_centers_ahead"  # (lateral, forward) of each center, point-major
DISTANCE_TO_FINISH = "distance_to_finish"

# The car-state block stored per step as rollout_results["car_gear_and_wheels"].
CAR_STATE_FIRST, CAR_STATE_LAST = VELOCITY, WHEELS_ON_ROAD


def make_float_layout(cfg) -> FloatLayout:
    n_prev = cfg.n_prev_actions_in_inputs
    n_zones = cfg.n_zone_centers_in_inputs
    horizon = cfg.temporal_mini_race_duration_actions
    zone_spacing = cfg.distance_between_checkpoints * cfg.one_every_n_zone_centers_in_inputs
    # Zone centers ahead: mostly in front of the car, spreading sideways in curves.
    zone_mean, zone_std = [], []
    for k in range(n_zones):
        ahead = k * zone_spacing
        zone_mean += [0.0, 0.8 * ahead]
        zone_std += [4.0 + 0.5 * ahead, 4.0 + 0.4 * ahead]
    action_mean = {"accelerate": 0.6, "brake": 0.2, "left": 0.3, "right": 0.3}
    return FloatLayout(
        [
            # clock in [0, H) mapped to about [-1, 1]
            Segment(MINI_RACE_CLOCK, 1, mean=horizon / 2, std=horizon / 2),
            Segment(
                PREVIOUS_ACTIONS,
                4 * n_prev,
                mean=tuple(action_mean[f] for _ in range(n_prev) for f in ACTION_FLAGS),
                std=0.5,
                element_names=tuple(f"t-{n_prev - j}.{f}" for j in range(n_prev) for f in ACTION_FLAGS),
            ),
            Segment(VELOCITY, 2, mean=(0.0, 40.0), std=(5.0, 25.0), element_names=("lateral", "forward")),
            Segment(ANGULAR_VELOCITY, 1, mean=0.0, std=1.5),
            Segment(STEERING_ANGLE, 1, mean=0.0, std=0.25),
            Segment(WHEEL_SPEEDS, 4, mean=60.0, std=40.0, element_names=WHEELS),
            Segment(WHEELS_ON_ROAD, 4, mean=0.8, std=0.4, element_names=WHEELS),
            Segment(
                ZONE_CENTERS_AHEAD,
                2 * n_zones,
                mean=tuple(zone_mean),
                std=tuple(zone_std),
                element_names=tuple(f"{k}.{axis}" for k in range(n_zones) for axis in ("lateral", "forward")),
            ),
            Segment(
                DISTANCE_TO_FINISH,
                1,
                mean=cfg.margin_to_announce_finish_meters / 2,
                std=cfg.margin_to_announce_finish_meters / 2,
            ),
        ]
    )


def distance_to_current_zone_center(layout: FloatLayout, state_float):
    """Distance from the car to the current zone center (the first center ahead); works on batches."""
    import numpy as np

    first_center = layout.get(state_float, ZONE_CENTERS_AHEAD)[..., :2]
    return np.linalg.norm(first_center, axis=-1)
