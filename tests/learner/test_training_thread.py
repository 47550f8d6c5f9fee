"""The learner's training thread (learner/training_thread.py) and its batches (learner/batches.py): steps while the
credit lasts, no step inside a pause, the thread count applied in the thread, errors handed to the main thread."""

import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest
import torch
import torch.multiprocessing as torch_mp

from tests.learner.test_learner import META, _config_file, _learner, _race
from trackmania_rl.agents.iqn import make_network
from trackmania_rl.config.live import LiveConfig
from trackmania_rl.games import float_layout_for
from trackmania_rl.learner.batches import BatchFeed
from trackmania_rl.learner.training_thread import TrainingThread, TrainingThreadError
from trackmania_rl.replay.buffers import make_buffer
from trackmania_rl.rollouts.local.shared_network import SharedNetwork


def _wait_until(condition, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


@contextmanager
def running(learner, **options):
    """A started TrainingThread, stopped at the end; an error of its steps fails the test."""
    training = TrainingThread(learner, **options)
    training.start()
    try:
        yield training
    finally:
        training.stop()
    training.check()


@pytest.fixture
def learner(tmp_path):
    learner, _ = _learner(tmp_path)
    for seed in range(3):
        learner.ingest(*_race(learner, 60, seed=seed), META)
    yield learner
    learner.batches.close()


def test_the_thread_trains_until_the_credit_is_spent_then_again_when_races_come(learner):
    credit = learner.stats.single_memories_should_have_been_used
    with running(learner) as training:
        _wait_until(lambda: not learner.can_train())
        assert learner.stats.batches_done == credit // learner.cfg.batch_size
        learner.ingest(*_race(learner, 60, seed=7), META)
        training.data_stored()
        _wait_until(lambda: not learner.can_train())
        assert learner.stats.batches_done == learner.stats.single_memories_should_have_been_used // learner.cfg.batch_size


class _WatchedState(threading.Condition):
    """The thread's lock and condition, noting who waits on it: `parked` when the training thread does (it found a
    pause asked for and waits for its end, no step begun), `pause_waiting` when another thread does (a pause asked
    for, waiting for the thread to pause)."""

    def __init__(self, training):
        super().__init__()
        self.training, self.parked, self.pause_waiting = training, threading.Event(), threading.Event()

    def wait(self, timeout=None):
        (self.parked if threading.current_thread() is self.training._thread else self.pause_waiting).set()
        return super().wait(timeout)


def test_no_step_runs_inside_a_pause(learner):
    inside_pause = threading.Event()  # set by whoever holds a pause, inside the block only
    began_inside = []  # per step, at its start: whether a pause was being held
    stepped = threading.Condition()
    gate, held = threading.Event(), threading.Event()  # a step held in progress: held once it is, until the gate opens
    hold = threading.Event()  # the next step holds on the gate
    order = []
    train_step = learner.train_step

    def recorded_step():
        with stepped:
            began_inside.append(inside_pause.is_set())
            stepped.notify_all()
        result = train_step()
        if hold.is_set():
            hold.clear()
            held.set()
            assert gate.wait(60)
            order.append("step ended")
        return result

    def wait_for_steps(count):
        with stepped:
            assert stepped.wait_for(lambda: len(began_inside) >= count, 60), "the thread stopped stepping"
        return len(began_inside)

    learner.train_step = recorded_step
    learner.stats.single_memories_should_have_been_used += 10**6  # credit for the whole test
    training = TrainingThread(learner)
    training._state = state = _WatchedState(training)
    training.start()
    try:
        wait_for_steps(3)
        for _ in range(5):
            state.parked.clear()
            with training.paused():
                inside_pause.set()
                # the thread parks (its decision not to step, taken with the pause asked for), or a step begins
                _wait_until(lambda: state.parked.is_set() or any(began_inside))
                assert not any(began_inside), "a step began inside a pause"
                inside_pause.clear()
                inside = len(began_inside)
            wait_for_steps(inside + 1)  # and it trains again after
        assert not any(began_inside), began_inside  # not one step began while paused

        # a pause waits for the step in progress
        hold.set()
        assert held.wait(60), "no step was held"
        entered, state.pause_waiting = threading.Event(), threading.Event()

        def pause():
            with training.paused():
                inside_pause.set()
                order.append("pause entered")
                entered.set()
                inside_pause.clear()

        pauser = threading.Thread(target=pause)
        pauser.start()
        _wait_until(lambda: state.pause_waiting.is_set() or entered.is_set())
        assert not entered.is_set() and order == [], "the pause was entered while a step was in progress"
        with state:
            assert training._pause_requests == 1  # asked for, waiting
        gate.set()
        pauser.join(60)
        assert order == ["step ended", "pause entered"]
        wait_for_steps(len(began_inside) + 1)
        assert not any(began_inside), began_inside
    finally:
        gate.set()
        training.stop()
    training.check()


def test_the_wanted_thread_count_is_set_in_the_training_thread(learner):
    seen = []
    train_step = learner.train_step
    learner.train_step = lambda: seen.append(torch.get_num_threads()) or train_step()
    wanted = {"threads": 2}
    main_threads = torch.get_num_threads()
    with running(learner, wanted_threads=lambda: wanted["threads"]):
        _wait_until(lambda: len(seen) >= 2)
        wanted["threads"] = 1
        count = len(seen)
        _wait_until(lambda: len(seen) >= count + 2)
    assert seen[0] == 2 and seen[-1] == 1
    assert torch.get_num_threads() == main_threads  # the main thread's own count is not touched


def test_an_error_in_a_step_reaches_the_main_thread_and_pauses_do_not_hang(learner):
    def broken_step():
        raise FloatingPointError("weights went bad")

    learner.train_step = broken_step
    training = TrainingThread(learner)
    training.start()
    _wait_until(lambda: training.error is not None)
    with pytest.raises(TrainingThreadError, match="FloatingPointError: weights went bad"):
        training.check()
    with training.paused():  # the thread has ended: nothing to wait for
        pass
    training.stop()


def test_a_batch_comes_from_the_test_buffer_at_its_ratio(learner):
    feed = BatchFeed(
        learner.buffer, learner.buffer_test, learner.trainer, torch.device("cpu"), np.random.default_rng(0), lambda: learner.cfg
    )
    assert len(learner.buffer_test) > 0
    draws = [feed.next()[0] for _ in range(400)]
    ratio = learner.cfg.buffer_test_ratio
    assert abs(np.mean(draws) - ratio) < 4 * np.sqrt(ratio * (1 - ratio) / len(draws))
    is_test, batch = feed.next()
    assert batch["state_img"].shape[0] == learner.cfg.batch_size and "taus" not in batch  # the CPU step draws its own
    empty_test = make_buffer(learner.cfg, learner.layout, 100, rng=np.random.default_rng(1))
    feed = BatchFeed(learner.buffer, empty_test, learner.trainer, "cpu", np.random.default_rng(0), lambda: learner.cfg)
    assert not any(feed.next()[0] for _ in range(50))  # an empty test buffer is never asked


CUDA_DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"))]


@pytest.mark.parametrize("device", CUDA_DEVICES)  # on CUDA: prefetched packed batches, weights left as an async copy
def test_publications_left_by_the_thread_are_published_by_the_main_thread(tmp_path, device):
    cfg = LiveConfig(_config_file(tmp_path)).current
    shared = SharedNetwork(make_network(cfg, float_layout_for(cfg), len(cfg.inputs)), torch_mp.get_context("spawn"))
    learner, _ = _learner(tmp_path, shared=shared, device=device)
    for seed in range(3):
        learner.ingest(*_race(learner, 60, seed=seed), META)
    left = []  # the online weights each time the thread leaves a copy to publish
    leave = learner._leave_weights_to_publish
    learner._leave_weights_to_publish = lambda: left.append({k: v.clone() for k, v in learner.online.state_dict().items()}) or leave()
    publishers = []
    publish = shared.publish
    shared.publish = lambda version, weights: publishers.append(threading.current_thread()) or publish(version, weights)
    with running(learner):
        _wait_until(lambda: not learner.can_train())
    assert len(left) == learner.stats.batches_done // 2 >= 2
    assert shared.version == 1  # the thread only left copies
    assert learner.publish_pending() and shared.version == 2 and publishers == [threading.current_thread()]
    for name, tensor in shared.network.state_dict().items():  # the newest copy, whatever the batches done since
        assert torch.equal(tensor, left[-1][name].cpu()), name
    assert not learner.publish_pending()
    learner.batches.close()
