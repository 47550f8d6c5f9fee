"""Collector faults with real processes and real signals: nothing lost, nothing executed for ever.

- a collector that keeps dying is restarted with back-off, then given up; the other collectors keep delivering
- a collector killed in the middle of sending leaves one "queue is broken" line, not one per poll
- a collector SIGKILLed while it holds the shared network's lock does not block the next publish
- a collector restarted while the live config is broken starts with the last config that loaded
"""

import os
import signal
import threading
import time

import pytest
import torch
import torch.multiprocessing as torch_mp

from tests.helpers import SHORT_RACES, write_config
from tests.rollouts.local.mid_write import kill_mid_write
from tests.rollouts.local.pool_targets import die_or_deliver, fetch_and_report, fetch_with_a_slow_copy, put_one_large_item_then_idle
from trackmania_rl.config.live import last_good_path_for
from trackmania_rl.rollouts.local.pool import CollectorPool, RepeatFilter
from trackmania_rl.rollouts.local.shared_network import SharedNetwork, pid_alive


def test_repeat_filter_logs_each_message_once_and_counts_the_repeats():
    lines = []
    log = RepeatFilter(lines.append)
    for _ in range(215):
        log("collector 0's queue is broken")
    assert lines == ["collector 0's queue is broken"]
    log("collector 1 started")
    assert lines[1:] == ["(repeated 214 more time(s)) collector 0's queue is broken", "collector 1 started"]
    log("collector 1 started")
    log.forget()  # at a restart: counts, then every message may come again
    log("collector 1 started")
    assert lines[3:] == ["(repeated 1 more time(s)) collector 1 started", "collector 1 started"]


@pytest.mark.slow
def test_a_crash_looping_collector_backs_off_then_is_given_up_while_the_others_deliver():
    logs = []
    ctx = torch_mp.get_context("spawn")
    pool = CollectorPool(
        ctx, die_or_deliver, args=((0,),), count=2, queue_size=2, log=logs.append, backoff_s=(0.0, 0.5, 1.0, 2.0), max_restarts=4
    )
    delivered = []  # race numbers of collector 1, in order
    restart_times = []
    pool.start()
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and (pool.slots[0].active or len(delivered) < 20 + len(restart_times)):
            if 0 in pool.check(stall_timeout_s=60):
                restart_times.append(time.monotonic())
            got = pool.get_rollout(timeout_s=0.05)
            if got is not None:
                index, (rollout, _, meta) = got
                assert index == meta["collector"] == 1
                delivered.append(rollout["race"])
        assert not pool.slots[0].active and pool.slots[1].active and pool.active_count() == 1
        assert len(restart_times) == 4 == pool.slots[0].restarts
        gaps = [b - a for a, b in zip(restart_times, restart_times[1:], strict=False)]
        # back-off: the waits grow (0 s, 0.5 s, 1 s, 2 s, plus the time each process took to die)
        assert gaps[1] >= 0.9 and gaps[2] >= 1.9 and gaps == sorted(gaps)
        given_up = [line for line in logs if "not restarting it again" in line]
        assert len(given_up) == 1 and "collector 0 died with exit code 3" in given_up[0] and "goes on with 1 collector" in given_up[0]
        # nothing lost: collector 1 was never restarted and delivered every race in order, before and after
        assert pool.slots[1].restarts == 0 and delivered == list(range(len(delivered))) and len(delivered) >= 20
        n = len(delivered)
        for _ in range(5):
            got = pool.get_rollout(timeout_s=10)
            assert got is not None and got[1][0]["race"] == n
            n += 1
        assert pool.check(stall_timeout_s=60) == []  # a slot given up stays given up
    finally:
        pool.stop()
    assert all(not slot.process.is_alive() for slot in pool.slots)
    assert any("given up" in line for line in pool.summary())


@pytest.mark.slow
def test_the_last_collector_given_up_leaves_no_active_slot():
    logs = []
    pool = CollectorPool(
        torch_mp.get_context("spawn"),
        die_or_deliver,
        args=((0,),),
        count=1,
        queue_size=1,
        log=logs.append,
        backoff_s=(0.0,),
        max_restarts=1,
    )
    pool.start()
    try:
        deadline = time.monotonic() + 30
        while pool.active_count() and time.monotonic() < deadline:
            pool.check(stall_timeout_s=60)
            assert pool.get_rollout(timeout_s=0.05) is None
        assert pool.active_count() == 0 and pool.slots[0].restarts == 1
        assert any("no collector is left" in line for line in logs)
    finally:
        pool.stop()


@pytest.mark.slow
def test_a_collector_killed_mid_send_logs_the_broken_queue_once_however_often_it_is_polled():
    logs = []
    pool = CollectorPool(
        torch_mp.get_context("spawn"), put_one_large_item_then_idle, (64 * 1024 * 1024,), count=1, queue_size=2, log=logs.append
    )
    pool.start()
    try:
        kill_mid_write(pool, 64 * 1024 * 1024)  # once it is known to be writing, the pipe full and the writer waiting
        for _ in range(215):
            assert pool.get_rollout(timeout_s=0.0) is None
        assert sum("queue is broken" in line for line in logs) == 1
        assert pool.check(stall_timeout_s=60) == [0]
        got = pool.get_rollout(timeout_s=50)  # the new collector's whole item arrives
        assert got is not None and len(got[1]) == 64 * 1024 * 1024
    finally:
        pool.stop()


def _in_thread(function, timeout_s):
    done = threading.Event()
    thread = threading.Thread(target=lambda: (function(), done.set()), daemon=True)
    start = time.monotonic()
    thread.start()
    thread.join(timeout_s)
    return done.is_set(), time.monotonic() - start


@pytest.mark.slow
def test_publish_breaks_the_lock_of_a_collector_killed_while_holding_it():
    ctx = torch_mp.get_context("spawn")
    shared = SharedNetwork(torch.nn.Linear(3, 2), ctx, lock_step_s=1.0)
    shared.publish(1, torch.nn.Linear(3, 2).state_dict())
    inside = ctx.Event()
    holder = ctx.Process(target=fetch_with_a_slow_copy, args=(shared, inside, 600.0))
    holder.start()
    try:
        assert inside.wait(60), "the child never got inside fetch_into's copy"
        assert shared.holder == holder.pid
        os.kill(holder.pid, signal.SIGKILL)
        time.sleep(0.2)
        assert not pid_alive(holder.pid)  # a zombie until joined: not taken for alive
        weights = {k: torch.full_like(v, 0.25) for k, v in torch.nn.Linear(3, 2).state_dict().items()}
        finished, took = _in_thread(lambda: shared.publish(2, weights), timeout_s=20)
        assert finished, "publish blocked on the lock of a dead collector"
        assert took < 5.0 and shared.version == 2 and shared.locks_broken == 1 and shared.holder == 0
        finished, _ = _in_thread(lambda: shared.publish(3, weights), timeout_s=5)  # the lock works as before
        assert finished and shared.version == 3
    finally:
        holder.join(10)
    results = ctx.Queue()
    reader = ctx.Process(target=fetch_and_report, args=(shared, results))
    reader.start()
    version, weight = results.get(timeout=60)
    reader.join(10)
    assert version == 3 and (weight == 0.25).all()


@pytest.mark.slow
def test_publish_waits_for_a_live_slow_holder_in_bounded_steps(capsys):
    ctx = torch_mp.get_context("spawn")
    shared = SharedNetwork(torch.nn.Linear(3, 2), ctx, lock_step_s=0.5)
    shared.publish(1, torch.nn.Linear(3, 2).state_dict())
    inside = ctx.Event()
    holder = ctx.Process(target=fetch_with_a_slow_copy, args=(shared, inside, 2.0))
    holder.start()
    try:
        assert inside.wait(60)
        finished, took = _in_thread(lambda: shared.publish(2, torch.nn.Linear(3, 2).state_dict()), timeout_s=20)
        assert finished and 0.5 < took < 10 and shared.locks_broken == 0 and shared.version == 2
        assert "still waiting for the lock" in capsys.readouterr().out
    finally:
        holder.join(10)
    assert holder.exitcode == 0


@pytest.mark.slow
def test_a_collector_restarted_while_the_config_is_broken_starts_with_the_last_good_config(tmp_path, capfd):
    from trackmania_rl.agents.iqn import make_network
    from trackmania_rl.config.loader import load_config
    from trackmania_rl.games import float_layout_for
    from trackmania_rl.rollouts.local.collector import collector_main

    config_path = write_config(tmp_path, SHORT_RACES, name="config_live.py")
    cfg = load_config(config_path, game_backend="carracing")
    layout = float_layout_for(cfg)
    ctx = torch_mp.get_context("spawn")
    shared = SharedNetwork(make_network(cfg, layout, len(cfg.inputs)), ctx)
    shared.publish(1, make_network(cfg, layout, len(cfg.inputs)).state_dict())
    args = (str(config_path), "carracing", 1, shared, ctx.Value("q", 0, lock=False), ctx.Event())
    logs = []
    pool = CollectorPool(ctx, collector_main, args=args, count=1, queue_size=1, log=logs.append, max_restarts=3)
    pool.start()

    def next_race(timeout_s=90):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pool.check(stall_timeout_s=120)
            got = pool.get_rollout(timeout_s=0.5)
            if got is not None:
                return got
        return None

    try:
        assert next_race() is not None
        assert last_good_path_for(config_path).read_text() == config_path.read_text()
        config_path.write_text(config_path.read_text() + "\nbatch_size = (\n")  # the user's broken edit
        first = pool.slots[0].process
        os.kill(first.pid, signal.SIGKILL)
        first.join(10)
        got = next_race()
        assert got is not None, "the restarted collector did not deliver while the config is broken"
        assert pool.slots[0].restarts == 1 and pool.slots[0].process is not first and pool.slots[0].process.is_alive()
        assert pool.active_count() == 1
    finally:
        pool.stop()
    out = capfd.readouterr().out
    assert "config file refused" in out and "does not parse" in out and "starting with the last config that loaded" in out
