"""The learner's thread count: the cores the games on this machine leave, plus those of collectors idle in a pause; and
its interpreter switch interval."""

import sys

import pytest
import torch

from trackmania_rl.learner.cores import (
    CUDA_SWITCH_INTERVAL_S,
    PYTHON_SWITCH_INTERVAL_S,
    LearnerThreads,
    auto_collectors,
    set_switch_interval,
)


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("cores", "games", "idle", "threads"),
    [(2, 1, 0, 1), (2, 1, 1, 2), (2, 2, 1, 1), (2, 2, 2, 2), (4, 1, 0, 3), (1, 1, 0, 1), (2, 0, 0, 2), (2, 1, 5, 2)],
)
def test_threads_are_the_cores_left_by_the_games_that_play(cores, games, idle, threads, restore_threads):
    assert LearnerThreads(cores, games).wanted(idle) == threads


def test_update_keeps_the_count_for_the_training_thread_and_the_mean_is_weighted_by_time(restore_threads):
    """The count is the training thread's to apply: the thread calling update keeps its own (one, the main thread's)."""
    now = [100.0]
    torch.set_num_threads(1)
    threads = LearnerThreads(cores=2, games_here=1, clock=lambda: now[0])
    assert threads.current == 1
    now[0] += 5.0  # before the first take: not in the next mean
    threads.take_mean_threads()
    now[0] += 0.2
    assert threads.update(idle_games=1) == 2 and threads.current == 2 and torch.get_num_threads() == 1
    now[0] += 0.3
    assert threads.update(idle_games=1) == 2  # no change: the 2-thread stretch goes on
    now[0] += 0.3
    assert threads.update(idle_games=0) == 1 and threads.current == 1 and torch.get_num_threads() == 1
    now[0] += 0.2
    assert threads.take_mean_threads() == pytest.approx((0.2 * 1 + 0.6 * 2 + 0.2 * 1) / 1.0)
    now[0] += 1.0
    assert threads.take_mean_threads() == pytest.approx(1.0)  # a fresh window: one thread all along
    assert threads.take_mean_threads() == 1.0  # no time passed: the current count


@pytest.mark.parametrize(
    # raised: the ranks' need for a collector each, not the cores, set the count (the log says so)
    ("device", "cores", "other_games", "other_sources", "collectors", "learners", "raised"),
    [
        ("cpu", 2, 0, False, 1, 1, False),  # the 2-core default: one plays, one trains
        ("cpu", 16, 0, False, 8, 1, False),
        ("cpu", 1, 0, False, 1, 1, False),  # at least one collector when nothing else plays
        ("cuda", 16, 0, False, 14, 1, False),  # the learner keeps its training thread's and its intake thread's cores
        ("cuda", 2, 0, False, 1, 1, False),
        ("cuda", 16, 4, True, 10, 1, False),  # the actors of a `--ray auto` cluster on this machine count against it
        ("cpu", 2, 2, True, 0, 1, False),  # another source plays on these cores: no collector needed
        ("cpu", 2, 0, False, 2, 2, True),  # --learners 2 on 2 cores: every rank learns from a collector of its own
        ("cpu", 16, 0, False, 8, 4, False),  # enough for 4 ranks already
        ("cpu", 2, 1, True, 1, 2, True),  # rank 0 has another source: only rank 1 needs a collector
        ("cpu", 4, 0, False, 4, 4, True),
    ],
)
def test_auto_collectors_take_the_cores_the_learner_does_not_need(device, cores, other_games, other_sources, collectors, learners, raised):
    count, why = auto_collectors(torch.device(device), cores, other_games, other_sources, learners)
    assert count == collectors
    assert why.startswith(f"collectors_count auto: {collectors} collector(s) ({cores} cores")
    assert ("raised to one per rank" in why) == raised, why


def test_a_cuda_learner_shortens_the_interpreter_switch_interval_and_a_cpu_learner_keeps_pythons():
    before = sys.getswitchinterval()
    try:
        line = set_switch_interval(torch.device("cuda"))  # only the device's type is read: no GPU needed
        assert sys.getswitchinterval() == pytest.approx(CUDA_SWITCH_INTERVAL_S)
        assert CUDA_SWITCH_INTERVAL_S < PYTHON_SWITCH_INTERVAL_S
        assert "0.5 ms" in line
        set_switch_interval(torch.device("cpu"))
        assert sys.getswitchinterval() == pytest.approx(PYTHON_SWITCH_INTERVAL_S)
    finally:
        sys.setswitchinterval(before)
