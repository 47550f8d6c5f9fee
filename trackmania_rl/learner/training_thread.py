"""The learner's training thread: train steps, kept apart from taking and storing races (DESIGN §2).

The main thread takes envelopes from the rollout sources, validates and stores them, publishes, logs and saves; this
thread runs `Learner.train_step` whenever the replay-ratio credit allows, so that ingest never holds up a step (on a
GPU box, 14 collectors' races are ~2,200 actions/s to store). What must not run beside a step (a checkpoint save,
the held-out evaluation, growing the buffers) runs inside `paused()`. torch's thread count is per OS thread, so the
count the learner wants (learner/cores.py) is applied here, before each step. An error in a step stops the thread
and comes out of `check()` in the main thread: the run then stops as it would have with one thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

IDLE_WAIT_S = 0.02  # no credit: look again this much later (or when a race was stored)
PAUSE_TIMEOUT_S = 600.0  # a step never takes this long; a thread that does not pause by then is reported


class TrainingThreadError(RuntimeError):
    """The training thread stopped on an error (chained) or did not pause."""


class TrainingThread:
    def __init__(self, learner, wanted_threads: Callable[[], int] | None = None):
        self.learner = learner
        self.wanted_threads = wanted_threads
        self.error: BaseException | None = None
        self._state = threading.Condition()
        self._pause_requests = 0  # guarded by _state, as the two flags below
        self._is_paused = False
        self._stopping = False
        self._new_data = threading.Event()
        self._thread = threading.Thread(target=self._run, name="training", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def data_stored(self) -> None:
        """A race was stored: credit may be there now."""
        self._new_data.set()

    def _wait_while_paused(self) -> bool:
        """Park while a pause is asked for; False once the thread must end."""
        with self._state:
            while self._pause_requests and not self._stopping:
                self._is_paused = True
                self._state.notify_all()
                self._state.wait()
            self._is_paused = False
            return not self._stopping

    def _run(self) -> None:
        try:
            while self._wait_while_paused():
                if self.wanted_threads is not None:
                    wanted = self.wanted_threads()
                    if wanted != torch.get_num_threads():  # this thread's own count (OpenMP keeps one per thread)
                        torch.set_num_threads(wanted)
                if not self.learner.train_step():
                    idle_since = time.perf_counter()
                    self._new_data.wait(IDLE_WAIT_S)
                    self._new_data.clear()
                    self.learner.note_waiting(time.perf_counter() - idle_since)
        except BaseException as e:  # noqa: BLE001 - handed to the main thread by check()
            self.error = e
        finally:
            with self._state:  # nobody waits for the pause of a thread that has ended
                self._is_paused = True
                self._state.notify_all()

    def check(self) -> None:
        """TrainingThreadError (from the step's error) when the thread stopped on one."""
        if self.error is not None:
            raise TrainingThreadError(f"the training thread stopped: {type(self.error).__name__}: {self.error}") from self.error

    # what pauses: named in the error of a pause that does not come
    PAUSING = "the training thread"

    def _pause_reached(self) -> Callable[[], bool]:
        """Called under the lock as a pause is asked for: what says that the pause has been reached."""
        return lambda: self._is_paused

    def _stop_timeout_s(self) -> float:
        return PAUSE_TIMEOUT_S  # bounded by the step in progress

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No train step runs inside this block (the step in progress is finished first)."""
        with self._state:
            self._pause_requests += 1
            reached = self._pause_reached()
            self._new_data.set()  # an idle thread looks at once
            if not self._state.wait_for(lambda: reached() or not self._thread.is_alive(), PAUSE_TIMEOUT_S):
                self._pause_requests -= 1
                raise TrainingThreadError(f"{self.PAUSING} did not pause within {PAUSE_TIMEOUT_S:g} s")
        try:
            yield
        finally:
            with self._state:
                self._pause_requests -= 1
                self._state.notify_all()
            self._new_data.set()  # a thread idling between rounds (a learner group's) looks at once

    def stop(self) -> None:
        """End the thread after its current step; returns once it has ended (or after `_stop_timeout_s`)."""
        with self._state:
            self._stopping = True
            self._state.notify_all()
        self._new_data.set()
        if self._thread.is_alive():
            self._thread.join(self._stop_timeout_s())
