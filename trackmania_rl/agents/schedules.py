"""Schedules over frames played (DESIGN §3.6).

A schedule is a list of `(frames_played, value)` points with increasing frame counts, the first at 0
(config_loader checks this). Before the first point the first value holds, after the last point the last
value holds; in between:
- `linear`: straight-line interpolation (gamma);
- `exponential`: geometric interpolation, i.e. linear in log(value) (lr, epsilon); values of one sign;
- `staircase`: the value of the last point reached, no interpolation (memory size, any value type).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any


def _segment(schedule: Sequence, x: float):
    """(value at or before x, value after, fraction of the way) for the segment holding x."""
    steps = [p[0] for p in schedule]
    k = bisect.bisect_right(steps, x) - 1
    if k < 0:
        return schedule[0][1], schedule[0][1], 0.0
    if k >= len(schedule) - 1:
        return schedule[-1][1], schedule[-1][1], 0.0
    (x0, v0), (x1, v1) = schedule[k], schedule[k + 1]
    return v0, v1, (x - x0) / (x1 - x0)


def linear(schedule: Sequence, frames_played: float) -> float:
    v0, v1, frac = _segment(schedule, frames_played)
    return float(v0 + (v1 - v0) * frac)


def exponential(schedule: Sequence, frames_played: float) -> float:
    v0, v1, frac = _segment(schedule, frames_played)
    if frac == 0.0:
        return float(v0)
    if v0 == 0 or v1 == 0 or (v0 > 0) != (v1 > 0):
        raise ValueError(f"an exponential schedule needs non-zero values of one sign, got {v0} and {v1}")
    return float(v0 * math.exp(frac * math.log(v1 / v0)))


def values_at(cfg, frames_played: float) -> dict:
    """The config's scheduled values at a frame count: lr, gamma, epsilon, epsilon_boltzmann
    (the learner and the collectors read them here, so both follow the same schedules)."""
    return {
        "lr": exponential(cfg.lr_schedule, frames_played),
        "gamma": linear(cfg.gamma_schedule, frames_played),
        "epsilon": exponential(cfg.epsilon_schedule, frames_played),
        "epsilon_boltzmann": exponential(cfg.epsilon_boltzmann_schedule, frames_played),
    }


def staircase(schedule: Sequence, frames_played: float) -> Any:
    steps = [p[0] for p in schedule]
    k = max(bisect.bisect_right(steps, frames_played) - 1, 0)
    return schedule[k][1]
