"""What the ranks agree on before each chunk of train steps: one small all_gather (learner_group/training_thread.py).

Every rank gives a few integers; every rank gets every rank's, and computes the same plan from them:
- `steps`: learning steps every rank takes now: the least replay-ratio credit of any rank (in batches), at most
  `max_chunk`, none while any rank asks for a pause (a save, the held-out evaluation, a buffer resize) or a stop.
  So ranks step in lockstep, each at its own replay ratio, and a rank that is owed nothing holds the others back;
- `frames`: the frames stored by all ranks this session: with the frames at the start, the group's count, which
  drives the lr schedule of every rank the same way;
- rank 0's config generation and save number (a new config is broadcast in the same round; a save asks every
  rank for its buffer shard);
- the online weights' digests on digest rounds (every `DIGEST_EVERY_BATCHES` learning batches): unequal digests
  make every rank take rank 0's weights and optimizer state again;
- the batches done, which must be equal (else the ranks are out of step: an error).
Hidden-test batches hold no collective, but every rank draws them at the same steps (RankLearner.test_draws_seed):
a rank's test batch would otherwise hold the others at the next exchange.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from trackmania_rl.learner_group.rendezvous import LearnerGroupError, wait

FIELDS = ("credit_batches", "pause", "stop", "frames", "config_generation", "save_number", "digest", "batches_done")
DIGEST_EVERY_BATCHES = 200


@dataclass
class Plan:
    steps: int
    paused: bool
    stop: bool
    frames: int
    config_generation: int
    save_number: int
    digests: list[int] | None  # every rank's, on a digest round


def digest_as_int(digest: str) -> int:
    """A weights digest (16 hex digits) as a positive int64 (its first 15 digits)."""
    return int(digest[:15], 16) + 1


def plan_of(table: list[list[int]], max_chunk: int) -> Plan:
    """The plan every rank computes from the gathered table (one row per rank, FIELDS)."""
    column = {name: [row[k] for row in table] for k, name in enumerate(FIELDS)}
    if len(set(column["batches_done"])) != 1:
        raise LearnerGroupError(f"the ranks are out of step: batches done per rank {column['batches_done']}")
    stop, paused = any(column["stop"]), any(column["pause"])
    steps = 0 if stop or paused else max(0, min(min(column["credit_batches"]), max_chunk))
    digests = column["digest"] if any(column["digest"]) else None
    return Plan(steps, paused, stop, sum(column["frames"]), table[0][4], table[0][5], digests)


class Agreement:
    def __init__(self, pg, rank: int, ranks: int, max_chunk: int):
        self.pg = pg
        self.rank = rank
        self.ranks = ranks
        self.max_chunk = max_chunk
        self.rounds = 0
        self.seconds = 0.0  # spent in rounds: the all_gather and the wait for the slowest rank to reach it

    def round(self, mine: dict) -> Plan:
        begin = time.perf_counter()
        sent = torch.tensor([int(mine[name]) for name in FIELDS], dtype=torch.int64)
        gathered = [torch.zeros(len(FIELDS), dtype=torch.int64) for _ in range(self.ranks)]
        wait(self.pg.allgather([gathered], [sent]), "the agreement before train steps")
        self.rounds += 1
        self.seconds += time.perf_counter() - begin
        return plan_of([row.tolist() for row in gathered], self.max_chunk)
