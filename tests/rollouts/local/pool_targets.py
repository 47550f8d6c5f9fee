"""Process main functions for the pool, source and fault tests (importable by spawned processes)."""

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


def die_or_deliver(index, rollout_queue, heartbeat, stop_event, dying_indices):
    """Collectors whose index is in `dying_indices` exit at once with code 3 (a crash loop); the others
    put numbered envelopes for ever, as fast as the queue takes them."""
    if index in dying_indices:
        raise SystemExit(3)
    i = 0
    while not stop_event.is_set():
        heartbeat.value = time.time()
        try:
            rollout_queue.put(({"race": i}, {}, {"source": "test", "collector": index}), timeout=0.1)
            i += 1
        except Exception:  # queue.Full
            pass
    rollout_queue.cancel_join_thread()


def fetch_with_a_slow_copy(shared, inside_event, sleep_s):
    """Takes the shared network's lock through fetch_into and sleeps inside the copy (to be killed there)."""

    def copy(network):
        inside_event.set()
        time.sleep(sleep_s)

    shared.fetch_into(copy, -1)


def fetch_and_report(shared, result_queue):
    import torch

    target = torch.nn.Linear(3, 2)
    version = shared.fetch_into(lambda net: target.load_state_dict(net.state_dict()), -1)
    result_queue.put((version, target.weight.detach().numpy().copy()))  # numpy: no fd passing
