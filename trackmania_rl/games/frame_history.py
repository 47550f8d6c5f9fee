"""The frames of one race, each state's stack of the last frames a view of them (the games that stack frames:
games/gymnasium, CarRacing with `frame_stack` > 1).

`FrameHistory(C, H, W)`: the frames' channels in order (a grey frame is one channel, a colour frame three: R, G, B), each
`stack()` a (C, H, W) view of the last C (no copy: a race's stacked states cost the memory of single frames); the race
starts from C channels given (`repeated`: an episode's first frame repeated, or where the previous race of the same
episode ended).
"""

from __future__ import annotations

import numpy as np

FIRST_CAPACITY = 1_024  # channels a history holds before it grows (doubling)


def repeated(frame: np.ndarray, stack: int) -> np.ndarray:
    """The state a race's first frame stands for: the frame ((k, H, W), or (H, W) for one channel) `stack` times over,
    (stack * k, H, W), a new array."""
    frame = np.asarray(frame, np.uint8)
    return np.tile(frame.reshape(-1, *frame.shape[-2:]), (int(stack), 1, 1))


class FrameHistory:
    """The frames of a race; `stack()` is the state now: the last C channels as a (C, H, W) view."""

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
        """The next frame: (H, W) grey, or (k, H, W) (a colour frame's R, G, B)."""
        channels = frame.reshape(-1, *self._frames.shape[1:])
        k = len(channels)
        if self._n + k > len(self._frames):  # grow: the views already handed out keep the old array alive
            grown = np.empty((2 * len(self._frames), *self._frames.shape[1:]), np.uint8)
            grown[: self._n] = self._frames[: self._n]
            self._frames = grown
        self._frames[self._n : self._n + k] = channels
        self._n += k

    def stack(self) -> np.ndarray:
        return self._frames[self._n - self.c : self._n]
