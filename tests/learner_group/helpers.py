"""Ranks of a learner group inside tests: tiny learners on hand-made races, rank 1 in a spawned process driven by
commands over a queue, both on loopback."""

from __future__ import annotations

import os
import time
import types
from pathlib import Path

import numpy as np
import torch

from tests.helpers import RACE_META as META
from tests.helpers import TINY_NETWORK, make_rollout
from trackmania_rl.agents.iqn import make_network
from trackmania_rl.agents.training import Trainer, make_optimizer
from trackmania_rl.config.loader import default_config
from trackmania_rl.games import float_layout_for
from trackmania_rl.learner import checkpoint as ckpt
from trackmania_rl.learner_group.gradients import make_gradient_exchange
from trackmania_rl.learner_group.rank_learner import RankLearner
from trackmania_rl.learner_group.rendezvous import GroupConnection, connect_store
from trackmania_rl.learner_group.training_thread import GroupTrainingThread, take_rank0_state

HOST = "127.0.0.1"
TIMEOUT_S = 30.0
OVERRIDES = dict(
    TINY_NETWORK,
    memory_size_schedule=[(0, (2_000, 50))],
    number_times_single_memory_is_used_before_discard=1,
    training_precision="float32",
    training_cuda_graphs="off",
)
END = {"race_finished": False, "race_time": 1000, "native_score": 1.0, "progress_fraction": 0.5, "race_time_for_ratio": 1000}


def tiny_cfg(**overrides):
    return default_config(**{**OVERRIDES, **overrides})


# ------------------------------------------------------------------------------------------- one step, two ranks
def trainer(cfg, seed: int = 3) -> Trainer:
    """The same initial network on every rank (as a group starts: rank 0's weights)."""
    torch.manual_seed(seed)
    layout = float_layout_for(cfg)
    online, target = make_network(cfg, layout, len(cfg.inputs)), make_network(cfg, layout, len(cfg.inputs))
    target.load_state_dict(online.state_dict())
    return Trainer(online, target, make_optimizer(online, cfg, 1e-3), cfg, "cpu")


def batch(cfg, seed: int, size: int = 8) -> dict:
    """A replay batch of random states (the rank's own data), with its quantile fractions."""
    g = torch.Generator().manual_seed(seed)
    dim = float_layout_for(cfg).dim
    frames = (size, 1, cfg.H_downsized, cfg.W_downsized)
    out = {
        "state_img": torch.randint(0, 256, frames, generator=g, dtype=torch.uint8),
        "state_float": torch.randn(size, dim, generator=g),
        "action": torch.randint(0, len(cfg.inputs), (size,), generator=g),
        "reward": torch.randn(size, generator=g),
        "next_state_img": torch.randint(0, 256, frames, generator=g, dtype=torch.uint8),
        "next_state_float": torch.randn(size, dim, generator=g),
        "gamma_eff": torch.full((size,), 0.99),
    }
    out.update(trainer(cfg).draw_taus(size, g))
    return out


def poisoned(cfg, seed: int) -> dict:
    """A batch whose loss is not finite (a NaN reward)."""
    out = batch(cfg, seed)
    out["reward"][0] = float("nan")
    return out


SMALL_BUCKET_BYTES = 4096  # the tiny network's gradients in several buckets


def step_as_rank(rank: int, port: int, replies, done, kind: str = "overlap") -> None:
    """A spawned rank: one averaged step on its own batch, then one on a batch with a NaN (rank 1 only: rank 0's is
    fine); replies its pid, its weights' digest after each step and its skipped steps, then waits for `done`."""
    torch.set_num_threads(1)
    cfg = tiny_cfg()
    store = connect_store(HOST, port, 2, TIMEOUT_S)
    connection = GroupConnection.join(store, rank, 2, HOST, TIMEOUT_S, "cpu")
    t = trainer(cfg)
    t.gradient_exchange = make_gradient_exchange(kind, connection.gradients, 2, t.online.parameters(), SMALL_BUCKET_BYTES)
    t.train_on_tensors(batch(cfg, seed=100 + rank))
    first = ckpt.weights_digest(t.online.state_dict())
    t.train_on_tensors(poisoned(cfg, seed=200 + rank))
    replies.put((os.getpid(), first, ckpt.weights_digest(t.online.state_dict()), t.nonfinite_steps_skipped))
    done.wait(TIMEOUT_S)


# ------------------------------------------------------------------------------------------- learners and threads
def rank_learner(cfg, rank: int, ranks: int, folder: Path) -> RankLearner:
    live = types.SimpleNamespace(current=cfg)
    layout = float_layout_for(cfg)
    learner = RankLearner(live, layout, torch.device("cpu"), Path(folder), rank=rank, ranks=ranks, log=lambda m: None, resume=False)
    return learner


def feed(learner, races: int, seed: int) -> None:
    for k in range(races):
        rollout = make_rollout(learner.cfg, learner.layout, 60, False, rng=np.random.default_rng(seed + k))
        learner.ingest(rollout, dict(END), dict(META))


def group_of(learner, store, rank: int) -> GroupTrainingThread:
    """The rank's training thread in a group of 2, from rank 0's weights (as a group starts)."""
    connection = GroupConnection.join(store, rank, 2, HOST, TIMEOUT_S, "cpu")
    learner.trainer.gradient_exchange = make_gradient_exchange("overlap", connection.gradients, 2, learner.online.parameters())
    take_rank0_state(learner, connection)
    return GroupTrainingThread(learner, connection, log=lambda m: None)


def report(learner, thread) -> dict:
    return {
        "batches_done": learner.stats.batches_done,
        "credit_batches": learner.credit_batches(),
        "digest": ckpt.weights_digest(learner.online.state_dict()),
        "stop_agreed": thread.stop_agreed.is_set(),
        "failure": repr(thread.failure) if thread.failure else None,
        "error": repr(thread.error) if thread.error else None,
        "frames_played": learner.stats.frames_played,
    }


def serve_rank1(port: int, folder: str, commands, replies, timeout_s: float = TIMEOUT_S) -> None:
    """A spawned rank 1: a tiny RankLearner in a group with the test's rank 0, doing what `commands` say."""
    torch.set_num_threads(1)
    cfg = tiny_cfg(learner_group_timeout_s=timeout_s)
    learner = rank_learner(cfg, 1, 2, Path(folder))
    store = connect_store(HOST, port, 2, TIMEOUT_S)
    thread = group_of(learner, store, 1)
    thread.start()
    replies.put(("ready", os.getpid()))
    while True:
        command, value = commands.get(timeout=120)
        if command == "feed":
            feed(learner, value, seed=1_000)
            thread.data_stored()
        elif command == "frames":
            learner.stats.frames_played += thread.take_frames_of_others()
        elif command == "report":
            replies.put(("report", report(learner, thread)))
        elif command == "exit":
            thread.stop()
            replies.put(("report", report(learner, thread)))
            return


def settle(learner, seconds: float = 1.5, timeout_s: float = 60) -> None:
    """Until the learner's batch count has not moved for `seconds`."""
    deadline = time.monotonic() + timeout_s
    last, since = learner.stats.batches_done, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if learner.stats.batches_done != last:
            last, since = learner.stats.batches_done, time.monotonic()
        elif time.monotonic() - since >= seconds:
            return
    raise AssertionError("the group never stopped stepping")
