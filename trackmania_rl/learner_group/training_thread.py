"""A rank's training thread: agree with the other ranks, then take the agreed learning steps (learner/training_thread.py
for one learner).

The loop: one agreement round (learner_group/agreement.py), then either the agreed number of learning steps (each
with its gradient all_reduce; the rank's hidden-test batches fall between them as its batch feed draws them) or, with
nothing agreed, a short wait for new races. While this rank's main thread asks for a pause (a save, the held-out
evaluation, a buffer resize), the thread keeps taking part in rounds with its pause flag up, so that no rank steps and
no rank waits on it: `paused()` returns once a round carrying the flag has completed everywhere.

Between chunks the thread sets what the next steps use on this rank (the pinned config, the group's frame count:
rank_learner.StepSettings), takes a new config from rank 0 when its generation moved (broadcast in the same round),
hands rank 0's save requests to the main thread, and on digest rounds compares the ranks' weights (unequal: every
rank takes rank 0's weights and optimizer state again, logged). A failed collective (a peer died or answered nothing
within the group's timeout) ends the thread with `failure` set; the main thread reports it (learner_group/coordinator.py
names the rank).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import torch

from trackmania_rl.config.values import config_from_values, config_to_values
from trackmania_rl.learner import checkpoint as ckpt
from trackmania_rl.learner.training_thread import IDLE_WAIT_S, TrainingThread
from trackmania_rl.learner_group.agreement import DIGEST_EVERY_BATCHES, Agreement, digest_as_int
from trackmania_rl.learner_group.channel import broadcast_bytes
from trackmania_rl.learner_group.rendezvous import GroupCommunicationError, LearnerGroupError, wait

MAX_CHUNK_STEPS = 4  # learning steps between two agreements: a pause waits for at most this many
# between rounds while a rank is paused: a round every 20 ms (IDLE_WAIT_S) cost each rank ~4.5 % of a core; the rank
# whose pause ends looks at once (paused() wakes it), the others within this
PAUSED_ROUND_WAIT_S = 0.2


class GroupTrainingThread(TrainingThread):
    def __init__(
        self,
        learner,
        connection,
        wanted_threads: Callable[[], int] | None = None,
        config_source: Callable[[], object] | None = None,
        log: Callable[[str], None] = print,
    ):
        super().__init__(learner, wanted_threads)
        self.connection = connection
        self.rank, self.ranks = connection.rank, connection.ranks
        self.agreement = Agreement(connection.training, self.rank, self.ranks, MAX_CHUNK_STEPS)
        self.config_source = config_source  # rank 0: its current (group-adjusted) config; None elsewhere
        self.log = log
        self.failure: GroupCommunicationError | LearnerGroupError | None = None
        self.stop_agreed = threading.Event()
        self.config_generation = 1  # rank 0: its config's generation (1: the config every rank started with)
        self._generation_pinned = 1  # the generation the steps use
        self.new_config_values: dict | None = None  # rank k: the newest config rank 0 sent, for the rank's config file
        self._config_sent = config_source() if config_source is not None else None
        self.frames_at_start = learner.stats.frames_played
        self._own_frames_sent = 0
        self._others_frames_seen = 0
        self._others_frames_pending = 0
        self._frames_lock = threading.Lock()
        self.save_number = 0  # rank 0: saves asked for; elsewhere: the newest rank 0 asked for
        self._rounds_started = 0
        self._paused_round_done = 0
        self._next_digest_at = learner.stats.batches_done + DIGEST_EVERY_BATCHES
        self.digest_mismatches = 0

    # ------------------------------------------------------------------------------ the main thread's side
    def take_frames_of_others(self) -> int:
        """Frames the other ranks stored since the previous call (the main thread adds them to the run's count)."""
        with self._frames_lock:
            frames, self._others_frames_pending = self._others_frames_pending, 0
        return frames

    def request_shards(self) -> None:
        """Rank 0: the next round asks every rank for its buffer shard (a periodic save, the group paused)."""
        self.save_number += 1
        self._new_data.set()

    # paused(): no rank takes a learning step inside the block (every step in progress finished first); stop(): every
    # rank's training thread stops (the next round carries the stop), this one within the group's timeout
    PAUSING = "the learner group"

    def _pause_reached(self) -> Callable[[], bool]:
        since = self._rounds_started  # a round started after the request carries the pause to every rank
        return lambda: self._paused_round_done > since

    def _stop_timeout_s(self) -> float:
        return self.connection.timeout_s + 10

    # ------------------------------------------------------------------------------ the thread
    def _run(self) -> None:
        try:
            while True:
                with self._state:
                    self._rounds_started += 1
                    round_id = self._rounds_started
                    pausing = self._pause_requests > 0
                    stopping = self._stopping
                plan = self.agreement.round(self._mine(pausing, stopping))
                self._follow(plan)
                if pausing:
                    with self._state:
                        self._paused_round_done = round_id
                        self._state.notify_all()
                if plan.stop:
                    self.stop_agreed.set()
                    return
                if plan.steps:
                    self._take_steps(plan.steps)
                else:
                    idle_since = time.perf_counter()
                    self._new_data.wait(PAUSED_ROUND_WAIT_S if plan.paused else IDLE_WAIT_S)
                    self._new_data.clear()
                    self.learner.note_waiting(time.perf_counter() - idle_since)
        except (GroupCommunicationError, LearnerGroupError) as e:
            self.failure = e
        except BaseException as e:  # noqa: BLE001 - handed to the main thread by check()
            self.error = e
        finally:
            with self._state:
                self._is_paused = True
                self._state.notify_all()

    def _mine(self, pausing: bool, stopping: bool) -> dict:
        learner = self.learner
        if self.config_source is not None:  # rank 0: a live edit makes a new generation, broadcast in this round
            current = self.config_source()
            if current is not self._config_sent:
                self._config_sent = current
                self.config_generation += 1
        digest = 0
        if learner.stats.batches_done >= self._next_digest_at:
            digest = digest_as_int(ckpt.weights_digest(learner.online.state_dict()))
        self._own_frames_sent = learner.own_frames
        return {
            "credit_batches": learner.credit_batches(),
            "pause": pausing,
            "stop": stopping,
            "frames": self._own_frames_sent,
            "config_generation": self.config_generation if self.rank == 0 else 0,
            "save_number": self.save_number if self.rank == 0 else 0,
            "digest": digest,
            "batches_done": learner.stats.batches_done,
        }

    def _follow(self, plan) -> None:
        learner = self.learner
        others = plan.frames - self._own_frames_sent
        with self._frames_lock:
            self._others_frames_pending += others - self._others_frames_seen
            self._others_frames_seen = others
        if plan.config_generation > self._generation_pinned:
            self._take_config(plan.config_generation)
        if self.rank != 0 and plan.save_number > self.save_number:
            self.save_number = plan.save_number  # the main thread sends its shard (rank.py)
        if plan.digests is not None:
            self._next_digest_at = learner.stats.batches_done + DIGEST_EVERY_BATCHES
            if len(set(plan.digests)) > 1:
                self._resynchronise(plan.digests)
        learner.settings.frames = self.frames_at_start + plan.frames

    def _take_config(self, generation: int) -> None:
        data = json.dumps(config_to_values(self._config_sent)).encode() if self.rank == 0 else None
        values = json.loads(broadcast_bytes(self.connection.training, data, 0, self.rank))
        if self.rank == 0:
            cfg = self._config_sent
        else:
            cfg = config_from_values(values, self.learner.cfg.game_backend, source="rank 0's config", inputs=self.learner.cfg.inputs_file())
            self.new_config_values = values
        self._generation_pinned = generation
        self.learner.settings.cfg = cfg

    def _take_steps(self, steps: int) -> None:
        if self.wanted_threads is not None:
            wanted = self.wanted_threads()
            if wanted != torch.get_num_threads():
                torch.set_num_threads(wanted)
        learner, done = self.learner, 0
        while done < steps:
            before = learner.stats.batches_done
            if not learner.train_step():
                raise LearnerGroupError(f"rank {self.rank}: the agreed credit was not there for a train step")
            done += learner.stats.batches_done - before

    def _resynchronise(self, digests: list[int]) -> None:
        """Every rank takes rank 0's online and target weights and optimizer state (a collective)."""
        self.digest_mismatches += 1
        self.log(
            f"the ranks' weights differ at batch {self.learner.stats.batches_done} (digests {digests}): every rank takes "
            "rank 0's weights and optimizer state"
        )
        take_rank0_state(self.learner, self.connection)


def take_rank0_state(learner, connection) -> None:
    """Every rank's online and target weights and optimizer state become rank 0's (a collective of every rank's training
    thread, or of their main threads before the training threads start). The optimizer state must have the same
    entries on every rank (it has: equal steps)."""
    tensors = list(learner.online.state_dict().values()) + list(learner.target.state_dict().values())
    for parameter in learner.online.parameters():
        tensors += [value for _, value in sorted(learner.optimizer.state.get(parameter, {}).items()) if torch.is_tensor(value)]
    options = torch.distributed.BroadcastOptions()
    options.rootRank = 0
    with torch.no_grad():
        for tensor in tensors:
            pg = connection.gradients if tensor.device.type == "cuda" else connection.training
            wait(pg.broadcast([tensor], options), "taking rank 0's weights")
