"""A train step's results on their way to the host, and the steps launched whose results are not read yet (DESIGN §2).

A GPU step that hands back its loss at once makes the CPU wait for the GPU, then the GPU wait for the CPU to prepare
the next step. A captured step (agents/graphed_step.py) instead writes [loss, gradient norm, per-sample losses] into a
pinned host tensor with an asynchronous copy; `StepResult.read` waits for that copy's event only when the values are
needed. `StepsInFlight` reads them in launch order, leaving up to `depth` launched steps unread, so the learner
launches step i + 1 before it waits for step i: the GPU always has the next step queued while the CPU prepares the
one after. An eager step's result is known when it is returned (`StepResult.known`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

HEAD = 2  # a step's flat result: loss, gradient norm, then the per-sample losses
STEPS_LEFT_IN_FLIGHT = 1  # the learner's depth: the step launched last stays unread, the one before it is read


class StepResult:
    """(loss, gradient norm before clipping (0.0 for a step that does not learn), per-sample losses (B,)) of one step.
    `read()` gives them (waiting for the copy to land, once); `done()` says without waiting whether it would wait.
    `on_nonfinite` is called at the first read of a learning step whose gradient norm is not finite (its update
    was skipped on the device)."""

    def __init__(
        self, host: torch.Tensor | None, event: torch.cuda.Event | None, do_learn: bool, on_nonfinite: Callable[[], None] | None = None
    ):
        self._host = host
        self._event = event
        self._do_learn = do_learn
        self._on_nonfinite = on_nonfinite
        self._values: tuple[float, float, torch.Tensor] | None = None

    @classmethod
    def known(cls, loss: float, grad_norm: float, per_sample: torch.Tensor) -> StepResult:
        result = cls(None, None, True)
        result._values = (loss, grad_norm, per_sample)
        return result

    def done(self) -> bool:
        return self._values is not None or self._event is None or self._event.query()

    def read(self) -> tuple[float, float, torch.Tensor]:
        if self._values is None:
            if self._event is not None:
                self._event.synchronize()
            loss, grad_norm = self._host[:HEAD].tolist()
            per_sample = self._host[HEAD:].clone()  # the host tensor is reused by a later step
            if not self._do_learn:
                grad_norm = 0.0
            elif not math.isfinite(grad_norm) and self._on_nonfinite is not None:
                self._on_nonfinite()
            self._values = (loss, grad_norm, per_sample)
            self._host = self._event = None
        return self._values


class ResultSlots:
    """Host tensors a step's flat result is copied into (pinned for a CUDA result), a ring per result size. A slot is
    reused only after the result that last used it has been read (read now if it was not)."""

    SLOTS = STEPS_LEFT_IN_FLIGHT + 3

    def __init__(self):
        self._rings: dict[int, deque] = {}

    def result_of(self, flat: torch.Tensor, do_learn: bool, on_nonfinite: Callable[[], None] | None) -> StepResult:
        ring = self._rings.get(flat.numel())
        if ring is None:
            pin = flat.is_cuda
            ring = self._rings[flat.numel()] = deque(
                [torch.empty(flat.numel(), dtype=torch.float32, pin_memory=pin), None] for _ in range(self.SLOTS)
            )
        ring.rotate(-1)
        slot = ring[-1]
        if slot[1] is not None:
            slot[1].read()
        slot[0].copy_(flat, non_blocking=True)
        event = None
        if flat.is_cuda:
            event = torch.cuda.Event()
            event.record()
        slot[1] = StepResult(slot[0], event, do_learn, on_nonfinite)
        return slot[1]

    def settle(self) -> None:
        """Read every result still unread and forget the rings (a step of a new shape is being built)."""
        for ring in self._rings.values():
            for _, result in ring:
                if result is not None:
                    result.read()
        self._rings.clear()


class StepsInFlight:
    """Launched steps in launch order, each with what its caller keeps beside it. `add` and `drain` return
    (context, values) for the steps read: `add` every finished one from the oldest, and the oldest unfinished ones
    beyond `depth` (waited for); `drain` all of them."""

    def __init__(self, depth: int = STEPS_LEFT_IN_FLIGHT):
        if depth < 0:
            raise ValueError(f"steps left in flight must be >= 0, got {depth}")
        self.depth = depth
        self._steps: deque[tuple[Any, StepResult]] = deque()

    def __len__(self) -> int:
        return len(self._steps)

    def add(self, result: StepResult, context: Any = None) -> list[tuple[Any, tuple]]:
        self._steps.append((context, result))
        read = []
        while self._steps and (len(self._steps) > self.depth or self._steps[0][1].done()):
            context, oldest = self._steps.popleft()
            read.append((context, oldest.read()))
        return read

    def drain(self) -> list[tuple[Any, tuple]]:
        read = [(context, result.read()) for context, result in self._steps]
        self._steps.clear()
        return read
