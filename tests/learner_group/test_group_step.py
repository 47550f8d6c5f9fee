"""One step of a learner group: the ranks' averaged gradients make the step of one learner on both batches, every rank
ends with the same weights bit for bit, a non-finite gradient on one rank makes every rank skip the step, and the
group's sockets listen on its address only and are released once. Real gloo groups on
loopback, rank 1 in a spawned process."""

import gc
import ipaddress
import multiprocessing
import os
import socket
from pathlib import Path

import pytest
import torch

from tests.learner_group import helpers
from trackmania_rl.learner import checkpoint as ckpt
from trackmania_rl.learner_group.agreement import plan_of
from trackmania_rl.learner_group.coordinator import split_collectors
from trackmania_rl.learner_group.gradients import OverlappedExchange, make_gradient_exchange
from trackmania_rl.learner_group.rendezvous import GroupConnection, LearnerGroupError, StoreServer, connect_store


def _listening(pid: int) -> set[str]:
    """The addresses the TCP sockets of process `pid` listen on (Linux /proc)."""
    return {address for address, _ in listening_sockets(pid)}


def listening_sockets(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket of process `pid` that listens (Linux /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                raw = bytes.fromhex(fields[1].split(":")[0])
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # per 32-bit word, host order
                address = ipaddress.ip_address(words if family == socket.AF_INET6 else raw[::-1])
                mapped = getattr(address, "ipv4_mapped", None)
                found.add((str(mapped or address), int(fields[1].split(":")[1], 16)))
    return found


@pytest.mark.parametrize("kind", ["overlap", "after_backward"])
def test_two_ranks_step_as_one_learner_on_both_batches_skip_a_non_finite_step_together_and_listen_on_loopback_only(kind):
    cfg = helpers.tiny_cfg()
    before = _listening(os.getpid())
    server = StoreServer(helpers.HOST, 2, helpers.TIMEOUT_S)
    context = multiprocessing.get_context("spawn")
    replies, done = context.Queue(), context.Event()
    child = context.Process(target=helpers.step_as_rank, args=(1, server.port, replies, done, kind))
    child.start()
    try:
        connection = GroupConnection.join(server.store, 0, 2, helpers.HOST, helpers.TIMEOUT_S, "cpu")
        rank0 = helpers.trainer(cfg)
        exchange = make_gradient_exchange(kind, connection.gradients, 2, rank0.online.parameters(), helpers.SMALL_BUCKET_BYTES)
        rank0.gradient_exchange = exchange
        # a backward outside a train step (a probe, a tool) starts no collective: rank 1 takes part in none
        probe_loss, _ = rank0.compute_loss(helpers.batch(cfg, seed=7))
        probe_loss.backward()
        rank0.optimizer.zero_grad(set_to_none=True)
        if isinstance(exchange, OverlappedExchange):
            assert exchange.next_bucket == 0 and all(bucket.work is None for bucket in exchange.buckets)
        own = helpers.batch(cfg, seed=100)
        rank0.train_on_tensors(own)
        after_one = ckpt.weights_digest(rank0.online.state_dict())
        rank0.train_on_tensors(helpers.batch(cfg, seed=200))  # a fine batch here, rank 1's holds a NaN
        child_pid, child_digest, child_after_two, child_skipped = replies.get(timeout=120)

        # every rank holds the same weights, bit for bit
        assert after_one == child_digest
        # one rank's non-finite gradient reaches every rank through the average: every rank skips that step
        assert rank0.nonfinite_steps_skipped == child_skipped == 1
        assert ckpt.weights_digest(rank0.online.state_dict()) == child_after_two == after_one
        # ... those of one learner's step on both ranks' batches (the mean loss over 2 x 8 transitions)
        other = helpers.batch(cfg, seed=101)
        one = helpers.trainer(cfg)
        one.train_on_tensors({key: torch.cat([own[key], other[key]]) for key in own})
        alone = helpers.trainer(cfg)
        alone.train_on_tensors(own)
        grouped, single, own_only = (list(t.online.parameters()) for t in (rank0, one, alone))
        assert all(torch.allclose(g, o, rtol=1e-5, atol=1e-6) for g, o in zip(grouped, single, strict=True))
        assert not all(torch.allclose(g, a, rtol=1e-5, atol=1e-6) for g, a in zip(grouped, own_only, strict=True))
        assert exchange.exchanges == 2
        if isinstance(exchange, OverlappedExchange):  # the buckets' all_reduces began while backward went on
            assert len(exchange.buckets) > 2
            assert exchange.started_during_backward >= 2 * (len(exchange.buckets) - 1)
        assert rank0.phases.learning_steps == 2 and rank0.phases.exchange > 0

        # the store, both ranks' gloo devices: on the loopback address the group was given, never on every interface
        opened = (_listening(os.getpid()) - before) | _listening(child_pid)
        assert opened == {helpers.HOST}, opened
    finally:
        done.set()
        child.join(30)
        if child.is_alive():
            child.kill()
        server.close()
    assert child.exitcode == 0


def _table(*rows):
    # credit, pause, stop, frames, config generation, save number, digest, batches done
    return [list(row) for row in rows]


def test_the_agreement_takes_the_least_credit_and_holds_every_rank_on_a_pause_or_stop():
    plan = plan_of(_table((9, 0, 0, 100, 3, 2, 0, 40), (2, 0, 0, 50, 0, 0, 0, 40)), max_chunk=4)
    assert (plan.steps, plan.frames, plan.config_generation, plan.save_number, plan.digests) == (2, 150, 3, 2, None)
    assert plan_of(_table((9, 0, 0, 0, 1, 0, 0, 7), (9, 0, 0, 0, 0, 0, 0, 7)), max_chunk=4).steps == 4
    assert plan_of(_table((9, 0, 0, 0, 1, 0, 0, 7), (9, 1, 0, 0, 0, 0, 0, 7)), max_chunk=4).steps == 0  # rank 1 pauses
    stopped = plan_of(_table((9, 0, 1, 0, 1, 0, 0, 7), (9, 0, 0, 0, 0, 0, 0, 7)), max_chunk=4)
    assert stopped.stop and stopped.steps == 0
    assert plan_of(_table((1, 0, 0, 0, 1, 0, 11, 7), (1, 0, 0, 0, 0, 0, 12, 7)), max_chunk=4).digests == [11, 12]
    try:
        plan_of(_table((1, 0, 0, 0, 1, 0, 0, 7), (1, 0, 0, 0, 0, 0, 0, 8)), max_chunk=4)
    except LearnerGroupError as e:
        assert "out of step" in str(e)
    else:
        raise AssertionError("ranks with different batch counts were not refused")


def test_local_collectors_are_split_between_ranks_others_first_when_rank0_has_a_remote_source():
    assert split_collectors(5, 2, rank0_has_remote=False) == [3, 2]
    assert split_collectors(1, 2, rank0_has_remote=False) == [1, 0]
    assert split_collectors(1, 2, rank0_has_remote=True) == [0, 1]
    assert split_collectors(4, 3, rank0_has_remote=True) == [1, 2, 1]


def test_the_store_server_releases_its_listening_socket_once_when_the_store_is_no_longer_used():
    # torch's store closes the descriptor it is handed; a server that closed it too pulled the socket from under a
    # store still in use, and the store's own close later hit whatever file had taken the number (another test's pipe)
    server = StoreServer(helpers.HOST, 2, helpers.TIMEOUT_S)
    store = server.store  # a rank's groups still hold the store
    server.close()
    late = connect_store(helpers.HOST, server.port, 2, 5.0)  # still listening: a rank may still join
    late.set("joined", "1")
    assert store.get("joined") == b"1"
    read_end, write_end = os.pipe()  # another file, which may take any free number
    try:
        del store, late
        gc.collect()
        assert (helpers.HOST, server.port) not in listening_sockets(os.getpid())
        os.fstat(read_end), os.fstat(write_end)  # the store closed its own socket, not the pipe
    finally:
        os.close(read_end), os.close(write_end)


def test_the_ranks_take_their_hidden_test_batches_at_the_same_steps_and_their_training_batches_each_its_own(tmp_path):
    cfg = helpers.tiny_cfg(buffer_test_ratio=0.3)
    learners = [helpers.rank_learner(cfg, rank, 2, tmp_path / f"rank{rank}") for rank in (0, 1)]
    for rank, learner in enumerate(learners):
        helpers.feed(learner, 4, seed=100 * rank)
        assert len(learner.buffer_test) > 0
    draws = [[learner.batches.next() for _ in range(60)] for learner in learners]
    kinds = [[is_test for is_test, _ in ranks_draws] for ranks_draws in draws]
    # a rank's test batch would hold the other at the next exchange: every rank tests at the same steps
    assert kinds[0] == kinds[1] and 3 < sum(kinds[0]) < 57
    # ... while each rank samples its own transitions
    first_training = [next(batch for is_test, batch in ranks_draws if not is_test) for ranks_draws in draws]
    assert not torch.equal(first_training[0]["index"], first_training[1]["index"])
    for learner in learners:
        learner.batches.close()
