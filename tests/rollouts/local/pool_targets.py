"""Collector main functions for tests/test_collector_pool.py (importable by spawned processes)."""

import time


def put_one_large_item_then_idle(index, rollout_queue, heartbeat, stop_event, n_bytes):
    """Puts one item far larger than a pipe's buffer (its writing blocks until the reader drains it),
    then keeps its heartbeat fresh until asked to stop."""
    rollout_queue.put(bytes([index + 1]) * n_bytes)
    while not stop_event.is_set():
        heartbeat.value = time.time()
        time.sleep(0.05)
    rollout_queue.cancel_join_thread()


def put_tagged_envelopes(index, rollout_queue, heartbeat, stop_event, tag, count):
    """Puts `count` envelopes tagged with its source's name, then idles until asked to stop."""
    for i in range(count):
        rollout_queue.put(({"race": i}, {}, {"source": tag, "collector": index}))
    while not stop_event.is_set():
        heartbeat.value = time.time()
        time.sleep(0.05)
    rollout_queue.cancel_join_thread()
