"""The frames of one race, each state's stack of the last C frames a view of them (the games that stack frames:
games/gymnasium, CarRacing with `frame_stack` > 1).

`FrameHistory(C, H, W)`: the frames in order, each `stack()` a (C, H, W) view of the last C (no copy: a race's C-frame
states cost the memory of single frames); the race starts from C frames given (an episode's first frame repeated, or
where the previous race of the same episode ended).
"""

from __future__ import annotations

import numpy as np

FIRST_CAPACITY = 1_024  # frames a history holds before it grows (doubling)


class FrameHistory:
    """The frames of a race; `stack()` is the state now: the last C frames as a (C, H, W) view."""

    def __init__(self, stack: int, height: int, width: int):
        self.c = int(stack)
        self._frames = np.empty((FIRST_CAPACITY + self.c, height, width), np.uint8)
        self._n = 0

    @property
    def started(self) -> bool:
        return self._n > 0

    def start(self, recent: np.ndarray) -> None:
        """A new race whose state is `recent` (C, H, W): the last C frames before it (an episode's first frame repeated,
        or where the previous race of the same episode ended). The array is fresh: states handed out earlier keep theirs."""
        self._frames = np.empty_like(self._frames)
        self._frames[: self.c] = recent
        self._n = self.c

    def push(self, frame: np.ndarray) -> None:
        if self._n == len(self._frames):  # grow: the views already handed out keep the old array alive
            grown = np.empty((2 * len(self._frames), *self._frames.shape[1:]), np.uint8)
            grown[: self._n] = self._frames
            self._frames = grown
        self._frames[self._n] = frame
        self._n += 1

    def stack(self) -> np.ndarray:
        return self._frames[self._n - self.c : self._n]
