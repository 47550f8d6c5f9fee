"""The rollout contract (DESIGN §3.2, §7): what every rollout source hands the learner, and its one validator.

An envelope is `(rollout_results, end_race_stats, meta)`:
- `rollout_results`: one race, per-step lists. Per state (F >= 1 entries): `STATE_KEYS`; per action (A
  entries, A = F - 1 when the race was finished, whose last state is the finish pseudo-state, else A = F):
  `GAME_ACTION_KEYS` as the game instance returns them, plus `policy_version`, the version of the published
  weights each action was chosen with, which every source adds (the collector knows it, the game does
  not). Scalar: `race_time` (ms) only when the race was finished (its last state is terminal).
  What a game has beyond that (games/base.py): a centerline's `current_zone_idx`, `meters_advanced_along_centerline`,
  `car_gear_and_wheels` per state and the scalar `furthest_zone_idx`; road tiles' `road_tiles_touched`,
  `road_tiles_missed` per state; the game's own `game_reward` per action. Each is checked when present, and required
  by the reward terms that need it (`require_reward_keys`).
- `end_race_stats`: a dict of the race's results (`race_finished`, `race_time`, ...; DESIGN §3.2).
- `meta`: a dict naming the source and the race (`source`, `collector`, `map_name`, `seed`, `map_status`,
  `is_explo`, `fill_buffer`, timings).

`validate_rollout` checks a game's rollout_results (the replay math calls it on what it is given);
`validate_envelope` checks a whole envelope, policy versions included, before anything is stored: every
source's envelopes go through it (the learner calls it). Messages name the key and the problem.
"""

from __future__ import annotations

import operator
from typing import NamedTuple

import numpy as np

from trackmania_rl.games.base import (
    CENTERLINE_STATE_KEYS,
    CURRENT_ZONE,
    FURTHEST_ZONE,
    GAME_REWARD,
    METERS_ADVANCED,
    ROAD_TILE_COUNTS,
    ROAD_TILES_MISSED,
    ROAD_TILES_TOUCHED,
    ROLLOUT_ACTION_KEYS,
    ROLLOUT_STATE_KEYS,
)
from trackmania_rl.rollouts.packed_race import StepArray

# per state: uint8 frame (C, H, W), float32 inputs (D,); per action: the decision and what the policy saw (both from
# the game), and the policy version (from the source)
STATE_KEYS, GAME_ACTION_KEYS = ROLLOUT_STATE_KEYS, ROLLOUT_ACTION_KEYS
POLICY_VERSION = "policy_version"
ACTION_KEYS = GAME_ACTION_KEYS + (POLICY_VERSION,)
RACE_TIME = "race_time"  # present only when the race was finished


# what the learner reads of a race's end_race_stats and meta besides the source's name (learner.py): checked here, so
# that no source can stop the learner with a wrong type; the other entries pass as they are
RACE_STAT_NUMBERS = ("race_time", "race_time_for_ratio", "native_score", "progress_fraction", "episode_return", "episode_actions")
INSTRUMENTATION_PREFIX = "instrumentation__"  # end_race_stats: a collector stage's ns per action
META_NUMBERS = ("rollout_duration_s", "put_time")
MAP_STATUSES = ("trained", "blind")


class InvalidRollout(ValueError):
    """The rollout or its envelope breaks the contract; the message names the key and the step."""


class Envelope(NamedTuple):
    """One race as a source delivers it."""

    rollout_results: dict
    end_race_stats: dict
    meta: dict


class RolloutShape(NamedTuple):
    """What a rollout must look like for this run: frame shape (C, H, W), float count D, action count."""

    frame_shape: tuple
    float_dim: int
    n_actions: int


class StackedSteps(NamedTuple):
    """The per-step vectors of a checked rollout, each stacked into one array: frames (F, 1, H, W) uint8,
    state_float (F, D) float32, q_values (A, n_actions) float32. Made once by the validator for whoever uses them next."""

    frames: np.ndarray
    state_float: np.ndarray
    q_values: np.ndarray


def validate_envelope(envelope, shape: RolloutShape) -> Envelope:
    """The envelope as an `Envelope`, or InvalidRollout naming the first problem found."""
    return validated_race(envelope, shape)[0]


def validated_race(envelope, shape: RolloutShape) -> tuple[Envelope, StackedSteps]:
    """`validate_envelope`, also returning the per-step vectors stacked (the learner stores those)."""
    if not isinstance(envelope, (tuple, list)) or len(envelope) != 3:
        raise InvalidRollout("an envelope must be (rollout_results, end_race_stats, meta)")
    rollout_results, end_race_stats, meta = envelope
    for name, part in (("end_race_stats", end_race_stats), ("meta", meta)):
        if not isinstance(part, dict):
            raise InvalidRollout(f"`{name}` must be a dict, got {type(part).__name__}")
    if not isinstance(meta.get("source"), str) or not meta["source"]:
        raise InvalidRollout(f"`meta['source']` must name the rollout source, got {meta.get('source')!r}")
    _check_race_facts(end_race_stats, meta)
    steps = validate_rollout(rollout_results, shape.frame_shape, shape.float_dim, shape.n_actions)
    versions = rollout_results.get(POLICY_VERSION)
    if not isinstance(versions, (list, tuple)):
        raise InvalidRollout(f"rollout_results lacks `{POLICY_VERSION}`: a list with the policy version of each action")
    if len(versions) != len(rollout_results["actions"]):
        raise InvalidRollout(f"`{POLICY_VERSION}` has {len(versions)} entries but `actions` has {len(rollout_results['actions'])}")
    versions = _numbers(rollout_results, POLICY_VERSION, None)
    if versions.size and (not np.issubdtype(versions.dtype, np.integer) or versions.min() < 0):
        raise InvalidRollout(f"`{POLICY_VERSION}` must hold integers >= 0, got {versions.dtype} values from {versions.min()}")
    return Envelope(rollout_results, end_race_stats, meta), steps


def _check_race_facts(end_race_stats: dict, meta: dict) -> None:
    """String keys, and the entries the learner reads of the right type (RACE_STAT_NUMBERS...)."""
    for name, part in (("end_race_stats", end_race_stats), ("meta", meta)):
        for key in part:
            if not isinstance(key, str):
                raise InvalidRollout(f"`{name}` keys must be strings, got {type(key).__name__} {key!r}")
    for key, value in end_race_stats.items():
        if (key in RACE_STAT_NUMBERS or key.startswith(INSTRUMENTATION_PREFIX)) and not _finite_number(value):
            raise InvalidRollout(f"`end_race_stats['{key}']` must be a finite number, got {value!r}")
    for key in META_NUMBERS:
        if key in meta and not _finite_number(meta[key]):
            raise InvalidRollout(f"`meta['{key}']` must be a finite number, got {meta[key]!r}")
    if "map_status" in meta and meta["map_status"] not in MAP_STATUSES:
        raise InvalidRollout(f"`meta['map_status']` must be one of {', '.join(MAP_STATUSES)}, got {meta['map_status']!r}")
    if "map_name" in meta and not isinstance(meta["map_name"], str):
        raise InvalidRollout(f"`meta['map_name']` must be a string, got {type(meta['map_name']).__name__}")


def _finite_number(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, np.integer)):
        return True  # however large
    return isinstance(value, (float, np.floating)) and bool(np.isfinite(value))


# the reward terms that read an optional key of the rollout (a setting that is not 0 needs its key)
REWARD_KEYS = (
    ("reward_per_m_advanced_along_centerline", METERS_ADVANCED),
    ("reward_per_new_road_tile", ROAD_TILES_TOUCHED),
    ("missed_road_tile_penalty", ROAD_TILES_MISSED),
    ("reward_per_game_point", GAME_REWARD),
    ("no_progress_penalty", CURRENT_ZONE),
)


def require_reward_keys(rollout_results: dict, cfg) -> None:
    """InvalidRollout when one of the run's reward terms needs a key the rollout does not carry."""
    for setting, key in REWARD_KEYS:
        if getattr(cfg, setting) != 0 and key not in rollout_results:
            raise InvalidRollout(f"rollout_results lacks `{key}`, which {setting} needs")
    if (
        cfg.road_tile_reward_max_m_behind_furthest is not None
        and cfg.reward_per_new_road_tile != 0
        and METERS_ADVANCED not in rollout_results
    ):
        raise InvalidRollout(f"rollout_results lacks `{METERS_ADVANCED}`, which road_tile_reward_max_m_behind_furthest needs")


def validate_rollout(rollout: dict, frame_shape: tuple, float_dim: int, n_actions: int) -> StackedSteps:
    """Raise InvalidRollout naming the first problem found in one race's rollout_results. Returns the per-step
    vectors stacked (the checks build them anyway), for a caller that goes on to use them."""
    if not isinstance(rollout, dict):
        raise InvalidRollout(f"rollout_results must be a dict, got {type(rollout).__name__}")
    for key in STATE_KEYS + GAME_ACTION_KEYS:
        if key not in rollout:
            raise InvalidRollout(f"rollout_results lacks key `{key}`")
    state_keys = STATE_KEYS + tuple(k for k in CENTERLINE_STATE_KEYS if k in rollout)
    action_keys = GAME_ACTION_KEYS + ((GAME_REWARD,) if GAME_REWARD in rollout else ())
    for key in state_keys + action_keys:
        if not isinstance(rollout[key], (list, tuple)):
            raise InvalidRollout(f"`{key}` must be a list with one entry per step, got {type(rollout[key]).__name__}")
    n_states = len(rollout["frames"])
    n_actions_taken = len(rollout["actions"])
    finished = RACE_TIME in rollout
    if n_states < 1:
        raise InvalidRollout("rollout has no state")
    for key in state_keys:
        if len(rollout[key]) != n_states:
            raise InvalidRollout(f"`{key}` has {len(rollout[key])} entries but `frames` has {n_states}")
    for key in action_keys:
        if len(rollout[key]) != n_actions_taken:
            raise InvalidRollout(f"`{key}` has {len(rollout[key])} entries but `actions` has {n_actions_taken}")
    expected_actions = n_states - 1 if finished else n_states
    if n_actions_taken != expected_actions:
        state = "finished" if finished else "cut-off"
        raise InvalidRollout(f"a {state} rollout with {n_states} states must have {expected_actions} actions, has {n_actions_taken}")
    race_time = rollout.get(RACE_TIME)
    if finished and not (isinstance(race_time, (int, np.integer)) and not isinstance(race_time, bool) and race_time > 0):
        raise InvalidRollout(f"`{RACE_TIME}` must be a positive integer of ms, got {race_time!r}")
    frame_shape = tuple(frame_shape)
    if _array_kinds(rollout["frames"]) != {(np.dtype(np.uint8), frame_shape)}:
        for i, frame in enumerate(rollout["frames"]):
            if not isinstance(frame, np.ndarray) or frame.dtype != np.uint8 or frame.shape != frame_shape:
                got = getattr(frame, "shape", None), getattr(frame, "dtype", type(frame).__name__)
                raise InvalidRollout(f"`frames[{i}]` must be uint8 of shape {frame_shape}, got {got}")
    floats = rollout["state_float"]
    kinds = _array_kinds(floats)
    if kinds is None or any(shape != (float_dim,) or dtype.kind != "f" for dtype, shape in kinds):
        for i, f in enumerate(floats):
            if not isinstance(f, np.ndarray) or f.shape != (float_dim,) or not np.issubdtype(f.dtype, np.floating):
                got = getattr(f, "shape", None), getattr(f, "dtype", type(f).__name__)
                raise InvalidRollout(f"`state_float[{i}]` must be floats of shape ({float_dim},), got {got}")
    stacked = _stack(floats, (float_dim,)).astype(np.float32, copy=False)
    if not np.all(np.isfinite(stacked)):
        step = int(np.argwhere(~np.isfinite(stacked))[0][0])
        raise InvalidRollout(f"`state_float[{step}]` contains NaN or inf")
    for key in (METERS_ADVANCED, GAME_REWARD):
        if key in rollout and not np.all(np.isfinite(_numbers(rollout, key, np.float64))):
            raise InvalidRollout(f"`{key}` contains NaN or inf")
    for key in ROAD_TILE_COUNTS:
        if key not in rollout:
            continue
        tiles = _numbers(rollout, key, None)
        if len(tiles) != n_states:
            raise InvalidRollout(f"`{key}` has {len(tiles)} entries but `frames` has {n_states}")
        if tiles.size and (not np.issubdtype(tiles.dtype, np.integer) or tiles.min() < 0 or np.any(np.diff(tiles) < 0)):
            raise InvalidRollout(f"`{key}` must be a non-decreasing count of tiles (integers >= 0)")
    actions = _numbers(rollout, "actions", None)
    if actions.size and (not np.issubdtype(actions.dtype, np.integer) or actions.min() < 0 or actions.max() >= n_actions):
        raise InvalidRollout(f"`actions` must be integers in [0, {n_actions}), got values {actions.min()}..{actions.max()}")
    q_values = rollout["q_values"]
    q_stacked = np.zeros((0, n_actions), np.float32)
    if q_values:
        try:
            rows = _rows(q_values)
            q_stacked = (np.stack(q_values) if rows is None else rows).astype(np.float32, copy=False)
        except (TypeError, ValueError):
            q_stacked = None
        if q_stacked is None or q_stacked.shape[1:] != (n_actions,) or not np.all(np.isfinite(q_stacked)):
            raise InvalidRollout(f"`q_values` must be finite vectors of shape ({n_actions},)")
    if (FURTHEST_ZONE in rollout) != (METERS_ADVANCED in rollout):
        raise InvalidRollout(f"`{FURTHEST_ZONE}` and the per-state centerline keys come together (a game with a centerline), or neither")
    furthest = rollout.get(FURTHEST_ZONE, 0)
    if not isinstance(furthest, (int, np.integer)) or isinstance(furthest, bool) or furthest < 0:
        raise InvalidRollout(f"`{FURTHEST_ZONE}` must be an integer >= 0, got {furthest!r}")
    return StackedSteps(_stack(rollout["frames"], frame_shape).astype(np.uint8, copy=False), stacked, q_stacked)


_DTYPE_AND_SHAPE = operator.attrgetter("dtype", "shape")


def _rows(steps) -> np.ndarray | None:
    """The array a StepArray of numpy arrays keeps (its items are its rows: packed_race.py), else None."""
    if isinstance(steps, StepArray) and steps.stacked.ndim >= 2 and len(steps.stacked) == len(steps):
        return steps.stacked
    return None


def _array_kinds(steps) -> set | None:
    """{(dtype, shape)} of a list of numpy arrays (the common, all-alike case checked in one go, in C); None when one
    is not an array."""
    rows = _rows(steps)
    if rows is not None:
        return {(rows.dtype, rows.shape[1:])}
    if set(map(type, steps)) - {np.ndarray}:
        return None
    return set(map(_DTYPE_AND_SHAPE, steps))


def _stack(steps: list, shape: tuple) -> np.ndarray:
    """np.stack of arrays of one `shape` (checked), as one concatenation: twice as fast on a race's frames."""
    rows = _rows(steps)
    if rows is not None and rows.shape[1:] == tuple(shape):
        return rows
    return np.concatenate(steps).reshape(len(steps), *shape) if steps else np.zeros((0, *shape))


def _numbers(rollout: dict, key: str, dtype) -> np.ndarray:
    """A per-step list of scalars as an array; InvalidRollout when it holds anything else."""
    try:
        array = np.asarray(rollout[key], dtype=dtype)
    except (TypeError, ValueError):
        raise InvalidRollout(f"`{key}` must hold one number per step") from None
    if array.ndim != 1 or array.dtype == object:
        raise InvalidRollout(f"`{key}` must hold one number per step")
    return array


def policy_lag(rollout_results: dict, current_version: int) -> int:
    """How many publications the rollout's oldest weights are behind the learner's: the version now minus the
    oldest version any of its actions was chosen with (0 for a rollout without actions)."""
    versions = rollout_results[POLICY_VERSION]
    return int(current_version) - int(min(versions)) if len(versions) else 0
