"""The float inputs of a game that gives only pixels and a score: the mini-race clock and the agent's own previous
actions, nothing read from the game's memory (DESIGN §3.3)."""

from __future__ import annotations

from trackmania_rl.games.float_layout import MINI_RACE_CLOCK, FloatLayout, Segment

ACTION_FLAGS = ("accelerate", "brake", "left", "right")
PREVIOUS_ACTIONS = "previous_actions"
SEGMENT_NAMES = (MINI_RACE_CLOCK, PREVIOUS_ACTIONS)


def make_float_layout(cfg) -> FloatLayout:
    n_prev = cfg.n_prev_actions_in_inputs
    horizon = cfg.temporal_mini_race_duration_actions
    return FloatLayout(
        [
            Segment(MINI_RACE_CLOCK, 1, mean=horizon / 2, std=horizon / 2),  # [0, H) -> about [-1, 1]
            # each flag 0 or 1: mapped to -1 or 1 (no game-specific frequencies to measure them by)
            Segment(
                PREVIOUS_ACTIONS,
                4 * n_prev,
                mean=0.5,
                std=0.5,
                element_names=tuple(f"t-{n_prev - j}.{f}" for j in range(n_prev) for f in ACTION_FLAGS),
            ),
        ]
    )
