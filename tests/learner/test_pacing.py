"""Pacing: the learner holds its rollout sources back while it owes too many batches, with hysteresis."""

import torch
import torch.multiprocessing as torch_mp

from trackmania_rl.learner.sources import Pacing
from trackmania_rl.rollouts.local.pool import CollectorPool
from trackmania_rl.rollouts.local.shared_network import SharedNetwork
from trackmania_rl.rollouts.local.source import LocalCollectorSource
from trackmania_rl.rollouts.source import CombinedSources


def _sources(n):
    ctx = torch_mp.get_context("spawn")
    made = []
    for _ in range(n):
        pool = CollectorPool(ctx, target=None, args=(), count=0, queue_size=1, log=lambda m: None)
        shared = SharedNetwork(torch.nn.Linear(2, 2), ctx)
        made.append(LocalCollectorSource(pool, shared, ctx.Event(), ctx.Value("q", 0, lock=False), stall_timeout_s=lambda: 60.0))
    return made


def test_sources_pause_above_the_limit_and_resume_at_half_of_it():
    a, b = _sources(2)
    logged = []
    pacing = Pacing(CombinedSources([a, b]), logged.append)
    pacing.update(backlog_batches=100, limit=100)  # at the limit: not behind yet
    assert not a.pause_event.is_set()
    pacing.update(backlog_batches=101, limit=100)
    assert a.pause_event.is_set() and b.pause_event.is_set()
    assert a.health().paused
    pacing.update(backlog_batches=60, limit=100)  # caught up a little: still paused (no flapping)
    assert a.pause_event.is_set()
    pacing.update(backlog_batches=50, limit=100)
    assert not a.pause_event.is_set() and not b.pause_event.is_set()
    pacing.update(backlog_batches=500, limit=100)
    assert a.pause_event.is_set()
    assert len(logged) == 1 and "max_training_backlog_batches 100" in logged[0]  # said once, not at every pause
    assert pacing.pauses == 2
    assert pacing.take_paused_seconds() > 0
    assert pacing.take_paused_seconds() < 0.5  # counted once: the second call counts only since the first


def test_learner_progress_reaches_the_collectors_counter():
    (source,) = _sources(1)
    source.learner_progress(frames_played=12_345, batches_done=7)
    assert source.frames_played.value == 12_345
