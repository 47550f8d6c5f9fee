"""CollectorPool with real spawned processes and real multiprocessing queues."""

import threading

import pytest
import torch.multiprocessing as torch_mp

from tests.rollouts.local.mid_write import kill_mid_write
from tests.rollouts.local.pool_targets import put_one_large_item_then_idle
from trackmania_rl.rollouts.local.pool import CollectorPool

LARGE = 64 * 1024 * 1024  # far beyond a pipe's 64 KB buffer: the writer is stuck mid-message until read


def finishes_within(seconds, function):
    """(finished, result): runs function in a thread; a call blocked for ever leaves finished False."""
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("value", function()), daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive(), result.get("value")


@pytest.fixture
def pool():
    logs = []
    pool = CollectorPool(torch_mp.get_context("spawn"), put_one_large_item_then_idle, (LARGE,), count=1, queue_size=2, log=logs.append)
    pool.logs = logs
    pool.start()
    yield pool
    finishes_within(30, pool.stop)


def test_a_collector_killed_in_the_middle_of_a_put_does_not_block_the_reader(pool):
    kill_mid_write(pool, LARGE)
    finished, got = finishes_within(20, lambda: pool.get_rollout(timeout_s=1.0))
    assert finished, "get_rollout blocked on the half-written item of a dead collector"
    assert got is None and any("queue is broken" in line for line in pool.logs)
    # the pool replaces it, and the new collector's whole item arrives
    assert pool.check(stall_timeout_s=60) == [0]
    finished, got = finishes_within(60, lambda: pool.get_rollout(timeout_s=50))
    assert finished and got is not None
    index, item = got
    assert index == 0 and len(item) == LARGE and item[:1] == item[-1:] == b"\x01"


def test_stop_returns_when_a_collector_died_in_the_middle_of_a_put(pool):
    kill_mid_write(pool, LARGE)
    finished, _ = finishes_within(30, pool.stop)
    assert finished, "stop() blocked on the half-written item of a dead collector"
    assert not pool.slots[0].process.is_alive()
