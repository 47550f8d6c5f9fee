"""Checking a rollout before it is stored (DESIGN §3.2, §6): wrong shapes or NaNs are refused, not stored."""

from __future__ import annotations

import numpy as np

STATE_LISTS = ("frames", "state_float", "current_zone_idx", "meters_advanced_along_centerline", "car_gear_and_wheels")
ACTION_LISTS = ("actions", "action_was_greedy", "q_values", "input_w")


class InvalidRollout(ValueError):
    """The rollout breaks the rollout_results contract; the message names the key and the step."""


def validate_rollout(rollout: dict, frame_shape: tuple, float_dim: int, n_actions: int) -> None:
    """Raise InvalidRollout naming the first problem found."""
    if not isinstance(rollout, dict):
        raise InvalidRollout(f"rollout_results must be a dict, got {type(rollout).__name__}")
    for key in STATE_LISTS + ACTION_LISTS + ("furthest_zone_idx",):
        if key not in rollout:
            raise InvalidRollout(f"rollout_results lacks key `{key}`")
    n_states = len(rollout["frames"])
    n_actions_taken = len(rollout["actions"])
    finished = "race_time" in rollout
    if n_states < 2:
        raise InvalidRollout(f"rollout has {n_states} state(s); at least 2 are needed for one transition")
    for key in STATE_LISTS:
        if len(rollout[key]) != n_states:
            raise InvalidRollout(f"`{key}` has {len(rollout[key])} entries but `frames` has {n_states}")
    for key in ACTION_LISTS:
        if len(rollout[key]) != n_actions_taken:
            raise InvalidRollout(f"`{key}` has {len(rollout[key])} entries but `actions` has {n_actions_taken}")
    expected_actions = n_states - 1 if finished else n_states
    if n_actions_taken != expected_actions:
        state = "finished" if finished else "cut-off"
        raise InvalidRollout(f"a {state} rollout with {n_states} states must have {expected_actions} actions, has {n_actions_taken}")
    if finished and not (isinstance(rollout["race_time"], (int, np.integer)) and rollout["race_time"] > 0):
        raise InvalidRollout(f"`race_time` must be a positive integer of ms, got {rollout['race_time']!r}")
    for i, frame in enumerate(rollout["frames"]):
        if not isinstance(frame, np.ndarray) or frame.dtype != np.uint8 or frame.shape != tuple(frame_shape):
            got = getattr(frame, "shape", None), getattr(frame, "dtype", type(frame).__name__)
            raise InvalidRollout(f"`frames[{i}]` must be uint8 of shape {tuple(frame_shape)}, got {got}")
    floats = rollout["state_float"]
    for i, f in enumerate(floats):
        if not isinstance(f, np.ndarray) or f.shape != (float_dim,):
            raise InvalidRollout(f"`state_float[{i}]` must have shape ({float_dim},), got {getattr(f, 'shape', type(f).__name__)}")
    stacked = np.stack(floats)
    if not np.all(np.isfinite(stacked)):
        step = int(np.argwhere(~np.isfinite(stacked))[0][0])
        raise InvalidRollout(f"`state_float[{step}]` contains NaN or inf")
    progress = np.asarray(rollout["meters_advanced_along_centerline"], dtype=np.float64)
    if not np.all(np.isfinite(progress)):
        raise InvalidRollout("`meters_advanced_along_centerline` contains NaN or inf")
    actions = np.asarray(rollout["actions"])
    if actions.size and (not np.issubdtype(actions.dtype, np.integer) or actions.min() < 0 or actions.max() >= n_actions):
        raise InvalidRollout(f"`actions` must be integers in [0, {n_actions}), got values {actions.min()}..{actions.max()}")
    q_values = rollout["q_values"]
    if q_values and (np.shape(q_values[0]) != (n_actions,) or not np.all(np.isfinite(np.stack(q_values)))):
        raise InvalidRollout(f"`q_values` must be finite vectors of shape ({n_actions},)")
