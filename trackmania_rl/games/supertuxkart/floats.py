"""SuperTuxKart's float inputs (DESIGN §3.3): the kart's state and the driveline's zone centers ahead, in the kart's frame.

The kart's frame turns with its heading only (pitch and roll left out): (lateral, up, forward), lateral positive on the
kart's right, up the world's. The yaw rate is positive turning right. `energy` is the nitro the kart holds; `skid` the
game's skid factor (1 when not drifting). Means and stds are rough figures of a scripted driver's laps and of the game's
own ranges, as CarRacing's are of its game; the clock and the distance to the finish map their ranges to [-1, 1].
"""

from __future__ import annotations

from trackmania_rl.games.float_layout import MINI_RACE_CLOCK, FloatLayout, Segment
from trackmania_rl.games.supertuxkart.actions import FLAGS

PREVIOUS_ACTIONS = "previous_actions"
VELOCITY = "velocity_kart_frame"  # (lateral, up, forward)
YAW_RATE = "yaw_rate"
ON_ROAD = "on_road"
IN_AIR = "in_air"
NITRO = "nitro_energy"
SKID = "skid_factor"
ZONE_CENTERS_AHEAD = "zone_centers_ahead"  # (lateral, up, forward) of each center, point-major
DISTANCE_TO_FINISH = "distance_to_finish"

SEGMENT_NAMES = (
    MINI_RACE_CLOCK,
    PREVIOUS_ACTIONS,
    VELOCITY,
    YAW_RATE,
    ON_ROAD,
    IN_AIR,
    NITRO,
    SKID,
    ZONE_CENTERS_AHEAD,
    DISTANCE_TO_FINISH,
)
CAR_STATE_FIRST, CAR_STATE_LAST = VELOCITY, SKID  # the block stored per step as rollout_results["car_gear_and_wheels"]
OWN_ACTIONS_SEGMENTS = (MINI_RACE_CLOCK, PREVIOUS_ACTIONS)  # float_inputs = "own_actions"
AXES = ("lateral", "up", "forward")

# how often each flag is pressed in a race, roughly (its mean; a flag's std is that of a coin of that bias)
_FLAG_SHARE = {"accelerate": 0.8, "brake": 0.1, "left": 0.35, "right": 0.35, "drift": 0.1, "nitro": 0.1, "rescue": 0.01}


def make_float_layout(cfg) -> FloatLayout:
    """The network's floats: every segment, or with `float_inputs = "own_actions"` the clock and previous actions only."""
    full = full_float_layout(cfg)
    if cfg.float_inputs == "own_actions":
        return FloatLayout([segment for segment in full.segments if segment.name in OWN_ACTIONS_SEGMENTS])
    return full


def full_float_layout(cfg) -> FloatLayout:
    n_prev, n_zones = cfg.n_prev_actions_in_inputs, cfg.n_zone_centers_in_inputs
    horizon = cfg.temporal_mini_race_duration_actions
    spacing = cfg.distance_between_checkpoints * cfg.one_every_n_zone_centers_in_inputs
    zone_mean, zone_std = [], []
    for k in range(n_zones):  # ahead along the track: in front of the kart, spreading sideways and in height with distance
        ahead = k * spacing
        zone_mean += [0.0, 0.0, 0.85 * ahead]
        zone_std += [3.0 + 0.35 * ahead, 1.0 + 0.08 * ahead, 2.0 + 0.25 * ahead]
    share = [_FLAG_SHARE[flag] for flag in FLAGS]
    return FloatLayout(
        [
            Segment(MINI_RACE_CLOCK, 1, mean=horizon / 2, std=horizon / 2),
            Segment(
                PREVIOUS_ACTIONS,
                len(FLAGS) * n_prev,
                mean=tuple(share * n_prev),
                std=tuple((p * (1 - p)) ** 0.5 for p in share * n_prev),
                element_names=tuple(f"t-{n_prev - j}.{flag}" for j in range(n_prev) for flag in FLAGS),
            ),
            Segment(VELOCITY, 3, mean=(0.0, 0.0, 20.0), std=(2.0, 2.0, 10.0), element_names=AXES),
            Segment(YAW_RATE, 1, mean=0.0, std=1.0),
            Segment(ON_ROAD, 1, mean=0.9, std=0.3),
            Segment(IN_AIR, 1, mean=0.05, std=0.2),
            Segment(NITRO, 1, mean=2.0, std=3.0),
            Segment(SKID, 1, mean=1.0, std=0.2),
            Segment(
                ZONE_CENTERS_AHEAD,
                3 * n_zones,
                mean=tuple(zone_mean),
                std=tuple(zone_std),
                element_names=tuple(f"{k}.{axis}" for k in range(n_zones) for axis in AXES),
            ),
            Segment(DISTANCE_TO_FINISH, 1, mean=cfg.margin_to_announce_finish_meters / 2, std=cfg.margin_to_announce_finish_meters / 2),
        ]
    )


def distance_to_current_zone_center(layout: FloatLayout, state_float):
    """Distance from the kart to the current zone center (the first center ahead); works on batches."""
    import numpy as np

    return np.linalg.norm(layout.get(state_float, ZONE_CENTERS_AHEAD)[..., :3], axis=-1)


def off_road_fraction(layout: FloatLayout, state_float):
    """1 off the driveline's road, 0 on it (the game's own flag); works on batches."""
    return 1.0 - layout.get(state_float, ON_ROAD)[..., 0]
