"""Where an eager train step's time goes (Trainer.phases): seconds summed per phase since the trainer was made.

Phases: `sampling` (the batch drawn from the replay buffer: Learner.train_step), `forward` (the loss: the target
network on the next states, the online network on the states), `backward`, `exchange` (a learner group's wait for the
averaged gradients after backward: learner_group/gradients.py), `optimizer` (clipping and the optimizer step),
`testing` (a hidden-test batch's loss, no gradient). Clock readings around host calls: on the CPU they are the work
itself; on a GPU they are launch times (the work runs later), so only the CPU's are figures (benchmark.py learners
reads them).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

PHASES = ("sampling", "forward", "backward", "exchange", "optimizer", "testing")


@dataclass
class StepPhases:
    sampling: float = 0.0
    forward: float = 0.0
    backward: float = 0.0
    exchange: float = 0.0
    optimizer: float = 0.0
    testing: float = 0.0
    learning_steps: int = 0
    test_steps: int = 0

    def snapshot(self) -> dict:
        return asdict(self)


def since(start: float) -> tuple[float, float]:
    """(seconds since `start`, now): one clock reading both ends a phase and starts the next."""
    now = time.perf_counter()
    return now - start, now
