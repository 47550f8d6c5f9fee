"""The process that plays the held-out evaluation's races (learner/held_out.py), so that the learner's threads go on
taking races and training while it plays.

`HeldOutWorker.submit(values, weights, maps)` hands it one evaluation: the config's values (config/values.py), a
snapshot of the online weights as numpy arrays and the maps (MapSpecs, or track seeds). The process (spawned at the first evaluation, one
torch thread, its own game kept between evaluations while the config's values stay the same) plays one greedy race
per track, ended by the config's `held_out_rules`, and answers with the records, or with why it could not. `result()` collects the answer
without waiting; a process that died is reported there as a failed evaluation, and the next one starts a fresh
process. One evaluation at a time.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import time
from dataclasses import dataclass

import numpy as np
import torch

from trackmania_rl.agents.iqn import make_network
from trackmania_rl.config.values import config_from_values
from trackmania_rl.games import float_layout_for, make_game_instance
from trackmania_rl.games.base import GameCrashed, MapSpec
from trackmania_rl.rollouts.greedy import GreedyPolicy, evaluate_maps
from trackmania_rl.rollouts.local.collector import die_with_parent, parent_alive

STOP_WAIT_S = 5.0  # for the process to end after being asked, before it is killed
# The process's niceness above the learner's: its races take the cycles the learner and the collectors leave. At the
# same priority, 100 held-out races (~50 s of one core every 5 minutes) slowed the training thread to 36-41 % of its
# rate while they played (2 cores, docs/results.md); lower, they play in the gaps and take longer.
NICENESS = 10
PARENT_CHECK_S = 1.0  # how often an idle evaluation process checks that the learner is still there


@dataclass
class Answer:
    """One evaluation's outcome: the race records, or `failure` (why there are none)."""

    records: list | None
    failure: str | None
    seconds: float  # from submission to answer


class HeldOutWorker:
    def __init__(self, game_backend: str):
        self.game_backend = game_backend
        self._ctx = multiprocessing.get_context("spawn")
        self._process = None
        self._jobs = self._answers = None
        self._submitted_at: float | None = None  # the evaluation in the process, if any
        self.clock = time.perf_counter  # what its seconds are measured with (tests give it a clock of their own)

    @property
    def busy(self) -> bool:
        return self._submitted_at is not None

    @property
    def seconds_busy(self) -> float:
        """How long the evaluation in the process has been playing (0 when none is)."""
        return self.clock() - self._submitted_at if self._submitted_at is not None else 0.0

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def submit(self, values: dict, weights: dict[str, np.ndarray], maps: list[MapSpec | int]) -> None:
        if self.busy:
            raise RuntimeError("an evaluation is still being played")
        if self._process is None or not self._process.is_alive():
            self._start_process()
        self._jobs.put((values, weights, list(maps)))
        self._submitted_at = self.clock()

    def result(self, wait_s: float = 0.0) -> Answer | None:
        """The submitted evaluation's answer once there is one (waiting up to `wait_s`), else None."""
        if not self.busy:
            return None
        try:
            records, failure = self._answers.get(timeout=wait_s) if wait_s > 0 else self._answers.get_nowait()
        except queue.Empty:
            if self._process.is_alive():
                return None
            try:  # it may have answered just before it ended
                records, failure = self._answers.get(timeout=0.5)
            except (queue.Empty, EOFError, OSError):
                records, failure = None, self._ended()
        except (EOFError, OSError):  # the pipe's only writer is gone, in the middle of an answer or not
            records, failure = None, self._ended()
        seconds = self.clock() - self._submitted_at
        self._submitted_at = None
        return Answer(records, failure, seconds)

    def cancel(self) -> None:
        """Drop the evaluation being played (its process goes; the next evaluation starts another)."""
        if self.busy:
            self._submitted_at = None
            self._discard_process()

    def close(self) -> None:
        self._submitted_at = None
        if self._process is not None and self._process.is_alive():
            try:
                self._jobs.put(None)
            except (OSError, ValueError):
                pass
            self._process.join(STOP_WAIT_S)
        self._discard_process()

    def _ended(self) -> str:
        """Why there is no answer from a process that ended (waited for, for its exit code), which is then let go."""
        self._process.join(STOP_WAIT_S)
        why = f"the evaluation process ended (exit code {self._process.exitcode})"
        self._discard_process()
        return why

    def _start_process(self) -> None:
        self._discard_process()
        self._jobs, self._answers = self._ctx.Queue(), self._ctx.Queue()
        self._process = self._ctx.Process(
            target=play_evaluations, args=(self._jobs, self._answers, self.game_backend), name="held-out-evaluation", daemon=True
        )
        self._process.start()
        # the process is the answers' only writer: should it die in the middle of one, a read ends with EOFError
        # instead of waiting forever for the rest (this process's copy of the write end would keep the pipe open)
        self._answers._writer.close()

    def _discard_process(self) -> None:
        if self._process is not None:
            if self._process.is_alive():
                self._process.kill()
            self._process.join(STOP_WAIT_S)
        for q in (self._jobs, self._answers):
            if q is not None:
                q.cancel_join_thread()  # nothing left in them is wanted
                q.close()
        self._process = self._jobs = self._answers = None


def play_evaluations(jobs, answers, game_backend: str) -> None:
    """The process: (values, weights, maps) in, (records, None) or (None, why) out, until None comes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the learner's: it ends this process
    die_with_parent()  # Linux: a learner killed by SIGKILL takes this process with it
    os.nice(NICENESS)
    torch.set_num_threads(1)
    game, game_values = None, None
    while True:
        try:
            job = jobs.get(timeout=PARENT_CHECK_S)
        except queue.Empty:
            if parent_alive():
                continue
            break  # elsewhere: the learner is gone
        if job is None:
            break
        values, weights, maps = job
        try:
            cfg = config_from_values(values, game_backend)
            if game is None or values != game_values:  # the races' cut-offs come from the config
                if game is not None:
                    game.close()
                game, game_values = make_game_instance(cfg, game_backend, cfg.held_out_rules), values
            layout = float_layout_for(cfg, game_backend)
            network = make_network(cfg, layout, len(cfg.inputs), "cpu")
            network.load_state_dict({name: torch.from_numpy(array) for name, array in weights.items()})
            answers.put((list(evaluate_maps(game, GreedyPolicy(cfg, network, layout), maps)), None))
        except GameCrashed as e:
            game = None
            answers.put((None, f"the game failed twice on one map ({e})"))
        except Exception as e:  # noqa: BLE001 - reported to the learner, which goes on training
            answers.put((None, f"{type(e).__name__}: {e}"))
    if game is not None:
        game.close()
