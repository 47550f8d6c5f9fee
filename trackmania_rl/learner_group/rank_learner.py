"""One rank's learner: a Learner (learner/learner.py) whose train steps use the settings the ranks agreed on.

- `StepSettings`: the config and the group's frame count every rank's steps use until the next agreement (set by
  the training thread between chunks): the same lr, the same clipping, the same target-update cadence everywhere.
  The lr is the schedule's times 1, sqrt(N) or N (`learners_lr_scaling`): a group's step learns from N batches.
- the rank's share of a checkpoint's buffer shards at resume (rank r of N takes the shards k with k mod N = r);
- `own_frames`: the frames of the races this rank stored in this session (the agreement sums them);
- rank 0: the other ranks' shards, digests and counters in every checkpoint (learner_group/shards.py).
"""

from __future__ import annotations

import math
from pathlib import Path

from trackmania_rl.agents import schedules
from trackmania_rl.learner import checkpoint as ckpt
from trackmania_rl.learner.learner import Learner
from trackmania_rl.learner_group.shards import rank_counters

RANK_SEED_STRIDE = 1_000_003
TEST_DRAWS_SEED_OFFSET = 7_919  # the test draws' generator is not the batches' one
LR_SCALING = {"none": lambda n: 1.0, "sqrt": math.sqrt, "linear": float}


def lr_scale(rule: str, ranks: int) -> float:
    return float(LR_SCALING[rule](ranks))


class StepSettings:
    def __init__(self, cfg, frames: int, ranks: int):
        self.cfg = cfg
        self.frames = int(frames)
        self.ranks = ranks

    def lr(self) -> float:
        return schedules.values_at(self.cfg, self.frames)["lr"] * lr_scale(self.cfg.learners_lr_scaling, self.ranks)


class RankLearner(Learner):
    def __init__(
        self, live, layout, device, run_dir: Path, *, rank: int, ranks: int, source=None, logger=None, log=print, resume=True, threads=None
    ):
        self.rank = rank
        self.ranks = ranks
        self.own_frames = 0
        self.shards = None  # rank 0: the ShardTransfer that adds the other ranks' shards to its checkpoints
        self.settings: StepSettings | None = None
        super().__init__(live, layout, device, run_dir, source=source, logger=logger, log=log, resume=resume, threads=threads)
        self.settings = StepSettings(self.cfg, self.stats.frames_played, ranks)

    def random_seed(self) -> int:
        """Rank 0 draws as a single learner would; every other rank from a seed of its own: N batches and N draws of
        quantile fractions per step, not N copies of one draw (its initial weights are replaced by rank 0's anyway)."""
        return super().random_seed() + RANK_SEED_STRIDE * self.rank

    def test_draws_seed(self) -> int:
        """The same on every rank: each takes its hidden-test batches at the same steps as the others, so that none waits
        at an exchange while another tests."""
        return super().random_seed() + TEST_DRAWS_SEED_OFFSET

    def step_settings(self) -> tuple:
        if self.settings is None:
            return super().step_settings()
        return self.settings.cfg, self.settings.lr()

    def ingest(self, rollout_results: dict, end_race_stats: dict, meta: dict) -> dict:
        result = super().ingest(rollout_results, end_race_stats, meta)
        self.own_frames += result.get("frames", 0)
        return result

    def credit_batches(self) -> int:
        """Whole batches this rank's replay ratio allows now (0 until its buffer holds enough to start learning)."""
        return int(self.training_backlog_batches())

    def _buffer_shards(self, folder: Path, name: str) -> list[Path]:
        return [path for rank, path in ckpt.shard_files(folder, name) if rank % self.ranks == self.rank]

    def checkpoint_extra_files(self) -> dict:
        return self.shards.writers() if self.shards is not None else {}

    def checkpoint_stats(self) -> dict:
        stats = super().checkpoint_stats()
        return self.shards.group_stats(stats, rank_counters(self)) if self.shards is not None else stats

    def save(self) -> Path:
        try:
            return super().save()
        finally:
            if self.shards is not None:
                self.shards.finish()  # whatever a failed save left unreceived: the ranks stay in step
