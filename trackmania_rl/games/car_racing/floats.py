"""CarRacing's float-input layout and its normalisation (DESIGN §3.3, §4).

Car-frame coordinates are (lateral, forward), Box2D's body axes (x, y): lateral is positive to the
car's right, forward positive ahead. Angles follow Box2D too (counterclockwise-positive): a positive
steering angle or angular velocity means turning left. Wheel speeds are the wheels' spin in rad/s
(Box2D `wheel.omega`; x 0.54 = m/s at the tyre), wheels on road are 1.0 when touching a road tile.

Normalisation constants were measured on 2 163 states of 6 races (seeds 100-105, default config) driven
by `car_racing.centerline_follower` with 0 to 30 % of its actions replaced by uniformly random ones (so
both clean laps and spins, off-road moments and no-progress cut-offs are in the sample); means and stds
are those statistics rounded, and the look-ahead zone-center ones are fits of them against the distance
ahead (within 0.2 std of the measured means). Exceptions, said where they are: the clock and the
distance to the finish map their known ranges to [-1, 1].
"""

from __future__ import annotations

from trackmania_rl.games.float_layout import MINI_RACE_CLOCK, FloatLayout, Segment

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

SEGMENT_NAMES = (
    MINI_RACE_CLOCK,
    PREVIOUS_ACTIONS,
    VELOCITY,
    ANGULAR_VELOCITY,
    STEERING_ANGLE,
    WHEEL_SPEEDS,
    WHEELS_ON_ROAD,
    ZONE_CENTERS_AHEAD,
    DISTANCE_TO_FINISH,
)

# The car-state block stored per step as rollout_results["car_gear_and_wheels"].
CAR_STATE_FIRST, CAR_STATE_LAST = VELOCITY, WHEELS_ON_ROAD


OWN_ACTIONS_SEGMENTS = (MINI_RACE_CLOCK, PREVIOUS_ACTIONS)  # float_inputs = "own_actions": what the network may see


def make_float_layout(cfg) -> FloatLayout:
    """The network's floats: every segment, or with `float_inputs = "own_actions"` only the mini-race clock and the
    agent's previous actions (a pixels-only agent: nothing read from the game's state). The latter is the former's
    prefix, so the game computes one array and hands the network its first floats."""
    full = full_float_layout(cfg)
    if cfg.float_inputs == "own_actions":
        return FloatLayout([segment for segment in full.segments if segment.name in OWN_ACTIONS_SEGMENTS])
    return full


def full_float_layout(cfg) -> FloatLayout:
    """Every float the game computes per state (the car-state block goes into the rollout whatever the network sees)."""
    n_prev = cfg.n_prev_actions_in_inputs
    n_zones = cfg.n_zone_centers_in_inputs
    horizon = cfg.temporal_mini_race_duration_actions
    zone_spacing = cfg.distance_between_checkpoints * cfg.one_every_n_zone_centers_in_inputs
    # Zone centers ahead, k * zone_spacing metres along the centerline: in front of the car, drifting
    # left with distance on average (CarRacing's tracks run counterclockwise) and spreading with it.
    zone_mean, zone_std = [], []
    for k in range(n_zones):
        ahead = k * zone_spacing
        zone_mean += [-0.3 * ahead * ahead / (ahead + 60.0), ahead / (1.0 + ahead / 120.0)]
        zone_std += [4.0 + 0.44 * ahead, 2.6 + 0.46 * ahead]
    # measured frequencies of each flag among the actions played, and their binary stds
    action_mean = {"accelerate": 0.4, "brake": 0.1, "left": 0.45, "right": 0.4}
    action_std = {"accelerate": 0.5, "brake": 0.3, "left": 0.5, "right": 0.5}
    return FloatLayout(
        [
            # clock in [0, H) mapped to about [-1, 1]
            Segment(MINI_RACE_CLOCK, 1, mean=horizon / 2, std=horizon / 2),
            Segment(
                PREVIOUS_ACTIONS,
                4 * n_prev,
                mean=tuple(action_mean[f] for _ in range(n_prev) for f in ACTION_FLAGS),
                std=tuple(action_std[f] for _ in range(n_prev) for f in ACTION_FLAGS),
                element_names=tuple(f"t-{n_prev - j}.{f}" for j in range(n_prev) for f in ACTION_FLAGS),
            ),
            Segment(VELOCITY, 2, mean=(0.0, 22.0), std=(2.5, 12.5), element_names=("lateral", "forward")),
            Segment(ANGULAR_VELOCITY, 1, mean=0.0, std=2.0),
            Segment(STEERING_ANGLE, 1, mean=0.0, std=0.33),
            # the driven rear wheels spin faster than the front ones
            Segment(WHEEL_SPEEDS, 4, mean=(39.0, 39.0, 52.0, 52.0), std=(23.0, 23.0, 31.0, 31.0), element_names=WHEELS),
            Segment(WHEELS_ON_ROAD, 4, mean=0.9, std=0.3, element_names=WHEELS),
            Segment(
                ZONE_CENTERS_AHEAD,
                2 * n_zones,
                mean=tuple(zone_mean),
                std=tuple(zone_std),
                element_names=tuple(f"{k}.{axis}" for k in range(n_zones) for axis in ("lateral", "forward")),
            ),
            # capped at margin_to_announce_finish_meters, which it is most of the time: [0, cap] -> [-1, 1]
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


def wheels_off_road_fraction(layout: FloatLayout, state_float):
    """Share of the four wheels touching no road tile (0: all on the road, 1: all on the grass); works on batches.
    Cutting a corner over the grass misses the road tiles the native score pays for."""
    import numpy as np

    return 1.0 - np.mean(layout.get(state_float, WHEELS_ON_ROAD), axis=-1)
