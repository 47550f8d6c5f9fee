"""One race as contiguous numpy arrays, the form it travels in through Ray's object store, and back.

An envelope's per-step lists (contract.py) become one array per key: frames stacked uint8 (F, 1, H, W),
state_float (F, D), every per-step scalar a 1-D array. Ray moves such arrays without pickling their bytes and
reads them back as read-only views of its shared memory. `to_envelope` turns them back into the contract's
per-step lists: rows of the arrays (views, no copy) for the vector keys, Python numbers for the scalar keys.
The learner validates the result like any envelope.
"""

from __future__ import annotations

import numpy as np

from trackmania_rl.rollouts.contract import ACTION_KEYS, STATE_KEYS

PER_STEP_KEYS = STATE_KEYS + ACTION_KEYS


def to_arrays(envelope) -> dict:
    """The race in transport form: {"arrays": key -> array, "rest": the other rollout values, "end_race_stats", "meta"}."""
    rollout_results, end_race_stats, meta = envelope
    arrays = {}
    for key in PER_STEP_KEYS:
        steps = rollout_results[key]
        if len(steps) and isinstance(steps[0], np.ndarray):
            arrays[key] = np.stack(steps)
        else:
            arrays[key] = np.asarray(steps)
    rest = {key: value for key, value in rollout_results.items() if key not in arrays}
    return {"arrays": arrays, "rest": rest, "end_race_stats": end_race_stats, "meta": meta}


def to_envelope(message: dict) -> tuple:
    """The contract's (rollout_results, end_race_stats, meta) from `to_arrays`'s form."""
    rollout_results = dict(message["rest"])
    for key, array in message["arrays"].items():
        rollout_results[key] = array.tolist() if array.ndim == 1 else list(array)
    return rollout_results, message["end_race_stats"], message["meta"]


def nbytes(message: dict) -> int:
    return sum(array.nbytes for array in message["arrays"].values())
