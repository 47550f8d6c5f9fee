"""What the training loop asks of "the learners" of a run: here, the one learner of a run (today's behaviour).

`run_training` (train_loop.py) calls these hooks at the few points where a group of data-parallel learners
(learner_group/, above this package) does more: its share of the local collectors, its learner, its training
thread, a look at the other ranks every loop, their figures, and closing them. A learner group passes its own
subclass to `run_training`; a run of one learner uses this class as it is.
"""

from __future__ import annotations

from trackmania_rl.learner.cores import LearnerThreads
from trackmania_rl.learner.learner import Learner
from trackmania_rl.learner.training_thread import TrainingThread


class GroupHooks:
    learners = 1

    def collectors_here(self, collectors_count: int, context, device) -> int:
        """This process's share of the run's `collectors_count` local collectors (`context`: learner/sources.py
        SourceContext). ConfigError when the learners cannot run so: nothing has started yet."""
        return collectors_count

    def learner_threads(self, cores: int, games_here: int) -> LearnerThreads:
        return LearnerThreads(cores, games_here)

    def make_learner(self, live, layout, device, run_dir, source, logger, log, threads: int | None = None) -> Learner:
        return Learner(live, layout, device, run_dir, source=source, logger=logger, log=log, resume=True, threads=threads)

    def start(self, learner: Learner) -> None:
        """Before the sources start: the other ranks (none here)."""

    def training_thread(self, learner: Learner, wanted_threads) -> TrainingThread:
        return TrainingThread(learner, wanted_threads=wanted_threads)

    def poll(self, learner: Learner) -> str | None:
        """Every loop: None, or why the run must stop now (it then saves and exits 1)."""
        return None

    def scalars(self) -> dict[str, float]:
        """Figures of the other ranks for TensorBoard, every aggregate window."""
        return {}

    def close(self) -> None:
        """After the final save; never raises."""
