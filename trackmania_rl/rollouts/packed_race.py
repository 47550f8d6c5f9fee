"""A race's per-step lists packed into arrays for its way to the learner: a local collector's queue, a Ray actor's
object-store put (DESIGN §2, §7).

Taking a race is the learner main thread's work, and a GPU box brings ~2,200 actions/s of it. Unpickling a race
whose per-step lists hold ~700 small arrays (176 frames, their floats, q-values...), each rebuilt one by one, was the
largest part of it (39 % of an ingest, 0.67 ms a race on 2 cores) and one long hold of the interpreter lock; packed,
taking and storing a race costs half as much (docs/performance.md). `pack_race` (in the collector)
stacks each per-step list whose items are alike into one array; `unpack_race` (in the learner) turns it back into the
contract's per-step list, a `StepArray`: a plain list of the same items (views of the array, or the same Python or
numpy scalars) that also keeps the array, so that `np.asarray` of it and the validator's stacking take the array
instead of going through the items again. Lists whose items are not alike travel as they are. Through Ray the
arrays travel without their bytes being pickled and come back as read-only views of the node's shared memory.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

PYTHON_SCALARS = (bool, int, float)


class PackedSteps(NamedTuple):
    """One per-step list as one array: `kind` says how its items come back ("arrays": the rows, as views; "numpy":
    numpy scalars of the array's dtype; "python": Python scalars, by `tolist`)."""

    array: np.ndarray
    kind: str


class StepArray(list):
    """A per-step list that also holds its items stacked in `stacked` (item i is row i, or its scalar). Built by
    `unpack_race` and handed to the learner's ingest as it is: code that edits a race's lists builds plain ones."""

    __slots__ = ("stacked",)

    def __init__(self, items, stacked: np.ndarray):
        super().__init__(items)
        self.stacked = stacked

    def __array__(self, dtype=None, copy=None):
        array = self.stacked if len(self.stacked) == len(self) else np.array(list(self))  # an edited length: its items
        if dtype is not None and array.dtype != dtype:
            return array.astype(dtype)
        return array.copy() if copy else array


def _packed(values: list) -> PackedSteps | None:
    """`values` as one array when its items are alike (numpy arrays of one shape and dtype, numpy scalars of one
    type, or Python scalars of one type), else None."""
    first = values[0]
    kind = type(first)
    if any(type(v) is not kind for v in values):
        return None
    if kind is np.ndarray:
        if first.ndim == 0 or first.dtype == object:  # 0-d arrays would come back as scalars; objects stay objects
            return None
        if any(v.shape != first.shape or v.dtype != first.dtype for v in values):
            return None
        return PackedSteps(np.stack(values), "arrays")
    if issubclass(kind, np.generic):
        return PackedSteps(np.array(values, dtype=first.dtype), "numpy")
    if kind in PYTHON_SCALARS:
        try:
            array = np.array(values)
        except OverflowError:  # an int beyond int64
            return None
        return PackedSteps(array, "python") if array.dtype != object else None
    return None


def pack_race(rollout_results: dict) -> dict:
    """rollout_results with each non-empty per-step list of alike items as a PackedSteps (the rest as it is)."""
    packed = {}
    for key, value in rollout_results.items():
        steps = _packed(value) if isinstance(value, list) and value else None
        packed[key] = value if steps is None else steps
    return packed


def packed_nbytes(rollout_results: dict) -> int:
    """The bytes of a packed race's arrays."""
    return sum(value.array.nbytes for value in rollout_results.values() if isinstance(value, PackedSteps))


def unpack_race(rollout_results: dict) -> dict:
    """The contract's rollout_results from `pack_race`'s: every PackedSteps as a StepArray."""
    unpacked = {}
    for key, value in rollout_results.items():
        if isinstance(value, PackedSteps):
            array, kind = value
            items = array.tolist() if kind == "python" else list(array)
            value = StepArray(items, array)
        unpacked[key] = value
    return unpacked
