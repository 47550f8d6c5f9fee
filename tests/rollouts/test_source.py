"""The rollout-source seam with real collector processes: several sources as one, publication, health."""

import pytest
import torch
import torch.multiprocessing as torch_mp

from tests.rollouts.local.pool_targets import put_tagged_envelopes
from trackmania_rl.rollouts.local.pool import CollectorPool
from trackmania_rl.rollouts.local.shared_network import SharedNetwork
from trackmania_rl.rollouts.local.source import LocalCollectorSource
from trackmania_rl.rollouts.source import CombinedSources


def _source(ctx, tag, count):
    pool = CollectorPool(ctx, put_tagged_envelopes, args=(tag, count), count=1, queue_size=count, log=lambda m: None)
    shared = SharedNetwork(torch.nn.Linear(2, 2), ctx)
    return LocalCollectorSource(pool, shared, ctx.Event(), ctx.Value("q", 0, lock=False), stall_timeout_s=lambda: 60.0)


@pytest.mark.slow
def test_combined_sources_take_from_each_and_publish_to_all():
    ctx = torch_mp.get_context("spawn")
    a, b = _source(ctx, "a", 2), _source(ctx, "b", 2)
    sources = CombinedSources([a, b])
    sources.start()
    try:
        got = [sources.get(timeout_s=30.0) for _ in range(4)]
        assert sorted(e[2]["source"] for e in got) == ["a", "a", "b", "b"]
        assert sources.get(timeout_s=0.2) is None  # both drained
        weights = {k: torch.full_like(v, 3.0) for k, v in torch.nn.Linear(2, 2).state_dict().items()}
        sources.publish(7, weights)
        for source in (a, b):
            assert source.shared_network.version == 7
            assert torch.equal(source.shared_network.network.weight, weights["weight"])
        sources.pause()
        health = sources.health()
        assert (health.producers, health.alive, health.replaced, health.paused) == (2, 2, [], True)
        sources.resume()
        assert not sources.health().paused
    finally:
        sources.stop()
    assert all(not slot.process.is_alive() for s in (a, b) for slot in s.pool.slots)


def test_a_dead_collector_is_replaced_by_the_health_check():
    ctx = torch_mp.get_context("spawn")
    source = _source(ctx, "a", 1)
    source.start()
    try:
        assert source.get(timeout_s=30.0)[2]["source"] == "a"
        first = source.pool.slots[0].process
        first.kill()
        first.join(10)
        health = source.health()
        assert health.replaced == [0] and source.pool.slots[0].process is not first
        assert source.get(timeout_s=30.0)[2]["source"] == "a"  # the new collector delivers
    finally:
        source.stop()
