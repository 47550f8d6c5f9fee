"""The ranks' training threads on hand-made races: they step in lockstep at the credit of the rank owed least, hold
still together while one rank pauses, stop together, add up their frames, and a rank that dies fails the others'
collective at once. Real learners and gloo groups on loopback, rank 1 in a spawned process."""

import multiprocessing
import os
import signal
import time

import pytest

from tests.learner_group import helpers
from trackmania_rl.learner_group.rendezvous import GroupCommunicationError, StoreServer

pytestmark = pytest.mark.slow


class _Rank1:
    def __init__(self, tmp_path, port):
        context = multiprocessing.get_context("spawn")
        self.commands, self.replies = context.Queue(), context.Queue()
        self.process = context.Process(target=helpers.serve_rank1, args=(port, str(tmp_path / "rank1"), self.commands, self.replies))
        self.process.start()

    def ask(self, command, value=None):
        self.commands.put((command, value))
        if command in ("report", "exit"):
            kind, reply = self.replies.get(timeout=120)
            return reply
        return None

    def close(self):
        self.process.join(30)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(10)


def _start(tmp_path):
    server = StoreServer(helpers.HOST, 2, helpers.TIMEOUT_S)
    rank1 = _Rank1(tmp_path, server.port)
    learner = helpers.rank_learner(helpers.tiny_cfg(), 0, 2, tmp_path / "rank0")
    thread = helpers.group_of(learner, server.store, 0)
    thread.start()
    assert rank1.replies.get(timeout=120)[0] == "ready"
    return server, rank1, learner, thread


def test_ranks_step_in_lockstep_pause_together_and_stop_together(tmp_path):
    server, rank1, learner, thread = _start(tmp_path)
    try:
        helpers.feed(learner, 6, seed=0)  # rank 0 is owed ~10 batches of 32, rank 1 ~3
        thread.data_stored()
        rank1.ask("feed", 2)
        helpers.settle(learner)
        other = rank1.ask("report")
        assert learner.stats.batches_done == other["batches_done"] > 0
        assert learner.stats.batches_done <= 4  # rank 1's credit bounded the group's
        assert other["credit_batches"] == 0 < learner.credit_batches()  # rank 0 is still owed batches it could not take
        assert helpers.report(learner, thread)["digest"] == other["digest"]  # the same weights on both ranks

        with thread.paused():  # rank 0 pauses: rank 1, owed batches now, takes none either
            rank1.ask("feed", 6)
            fed = rank1.ask("report")  # rank 1 answers its commands in order: fed by now
            assert fed["credit_batches"] > 0 and learner.credit_batches() > 0, fed  # both ranks owed batches
            with thread._state:
                asked = thread._rounds_started
            # two rounds more: the second started on rank 1 after the first ended, so after rank 1 was fed; it carried
            # both ranks' credit and rank 0's pause, and agreed no step (one round per idle wait: the bound is a hang's)
            with thread._state:
                assert thread._state.wait_for(lambda: thread._paused_round_done >= asked + 2, helpers.TIMEOUT_S), "no rounds"
            assert rank1.ask("report")["batches_done"] == learner.stats.batches_done == other["batches_done"]
        helpers.settle(learner)
        moved = rank1.ask("report")
        assert moved["batches_done"] == learner.stats.batches_done > other["batches_done"]
        assert moved["digest"] == helpers.report(learner, thread)["digest"]

        rank1.ask("frames")  # each rank's count of the run's frames holds the other rank's races
        assert rank1.ask("report")["frames_played"] == learner.stats.frames_played + thread.take_frames_of_others() == 60 * 14

        thread.stop()  # rank 0 stops: rank 1's thread ends on the same round
        assert thread.stop_agreed.is_set()
        assert rank1.ask("exit")["stop_agreed"]
    finally:
        thread.stop()
        rank1.close()
        server.close()
    assert thread.error is None and thread.failure is None


def test_a_rank_that_dies_fails_the_collective_of_the_others_at_once(tmp_path):
    server, rank1, learner, thread = _start(tmp_path)
    try:
        pid = rank1.ask("report") and rank1.process.pid
        os.kill(pid, signal.SIGKILL)
        # within half the group's own timeout: a failure by then is the closed connection, not a timeout
        assert thread.connection.timeout_s == helpers.TIMEOUT_S
        deadline = time.monotonic() + thread.connection.timeout_s / 2
        while thread.failure is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert isinstance(thread.failure, GroupCommunicationError), thread.failure
        assert not thread._thread.is_alive() and thread.error is None
    finally:
        thread.stop()
        rank1.close()
        server.close()
