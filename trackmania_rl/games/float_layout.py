"""The float-input layout: named segments of `state_float`, declared once, with their normalisation.

A game backend declares its layout as an ordered list of `Segment`s; everything else (reward shaping,
network normalisation, notebooks) reads floats by segment name, never by literal index.
Segment 0 is always the mini-race clock (DESIGN §3.3): 0 while acting, overwritten at sampling time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MINI_RACE_CLOCK = "mini_race_clock"


@dataclass(frozen=True)
class Segment:
    """`size` consecutive floats named `name`; `mean`/`std` normalise them (scalars or one value each)."""

    name: str
    size: int
    mean: float | tuple = 0.0
    std: float | tuple = 1.0
    element_names: tuple = field(default=())  # optional names of the individual floats, for notebooks

    def mean_array(self) -> np.ndarray:
        return np.broadcast_to(np.asarray(self.mean, dtype=np.float32), (self.size,)).copy()

    def std_array(self) -> np.ndarray:
        return np.broadcast_to(np.asarray(self.std, dtype=np.float32), (self.size,)).copy()


class FloatLayout:
    """An ordered set of segments; `layout.slice(name)` gives where a segment lives in `state_float`."""

    def __init__(self, segments: list[Segment]):
        if not segments or segments[0].name != MINI_RACE_CLOCK or segments[0].size != 1:
            raise ValueError(f"the first segment of a float layout must be `{MINI_RACE_CLOCK}` of size 1")
        names = [s.name for s in segments]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate segment names in float layout: {names}")
        self.segments = tuple(segments)
        self._slices = {}
        start = 0
        for segment in segments:
            if segment.size < 0:
                raise ValueError(f"segment {segment.name} has a negative size")
            self._slices[segment.name] = slice(start, start + segment.size)
            start += segment.size
        self.dim = start
        self.mean = np.concatenate([s.mean_array() for s in segments]).astype(np.float32)
        self.std = np.concatenate([s.std_array() for s in segments]).astype(np.float32)
        if np.any(self.std <= 0):
            bad = [s.name for s in segments if np.any(s.std_array() <= 0)]
            raise ValueError(f"float layout segments {bad} have a non-positive std")

    def slice(self, name: str) -> slice:
        try:
            return self._slices[name]
        except KeyError:
            raise KeyError(f"no float segment named {name!r}; the layout has {list(self._slices)}") from None

    def span(self, first: str, last: str) -> slice:
        """The contiguous slice from the start of segment `first` to the end of segment `last`."""
        return slice(self.slice(first).start, self.slice(last).stop)

    def get(self, state_float: np.ndarray, name: str) -> np.ndarray:
        """The floats of one segment; works on one vector (D,) or a batch (..., D)."""
        return state_float[..., self.slice(name)]

    def names(self) -> list[str]:
        return [s.name for s in self.segments]

    def element_labels(self) -> list[str]:
        """One label per float, e.g. `zone_centers_ahead[3]`, for tables and plots."""
        labels = []
        for s in self.segments:
            if s.element_names and len(s.element_names) == s.size:
                labels += [f"{s.name}.{e}" for e in s.element_names]
            else:
                labels += [s.name] if s.size == 1 else [f"{s.name}[{i}]" for i in range(s.size)]
        return labels

    def normalize(self, state_float: np.ndarray) -> np.ndarray:
        return (state_float - self.mean) / self.std
