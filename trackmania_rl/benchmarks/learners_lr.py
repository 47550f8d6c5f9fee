"""The learning-rate rule of a learner group (issue 29, point 5), measured on a proxy that fits 2 cores.

A group of N ranks steps on an effective batch of N x batch_size: for the same transitions learned it takes N times
fewer steps. `learners_lr_scaling` multiplies the lr of every rank's steps by 1 ("none"), sqrt(N) ("sqrt") or N
("linear"). This suite trains on the same recorded races (benchmarks/absorb.py's ReplaySource, buffers filled once,
float32, one torch thread per process) until the same number of transitions is learned: one learner alone at batch
B, then two ranks at B each under each rule; then it takes the hidden-test loss of the weights (the quantile Huber
loss of rank 0's hidden-test buffer, 16 batches drawn with a fixed seed, fixed quantile fractions: the same
transitions for every configuration of a seed, none of them trained on). Lower is better; each figure is the mean
over the seeds, with each seed's value.
- `learners.lr_rule_loss_test_one`: the learner alone; `learners.lr_rule_loss_test_none|sqrt|linear`: the group.
- `learners.lr_rule_loss_test_start`: the loss of the initial weights (how far training moved them).
This proxy measures the optimisation of the TD loss per transition learned, not the race score: the held-out curves
of point 7 (docs/cluster.md) are the measure of the rule in a run.
"""

from __future__ import annotations

import multiprocessing
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from trackmania_rl.benchmarks.absorb import RECORDING_FRAMES_PLAYED, ReplaySource, _fill_once
from trackmania_rl.benchmarks.learners import HOST, TIMEOUT_S, UNLIMITED_REPLAY_RATIO, _quiet, start_learner
from trackmania_rl.benchmarks.pipeline import GAME_BACKEND, default_config_copy
from trackmania_rl.benchmarks.recorded_races import SHIPPED_WEIGHTS, record_races
from trackmania_rl.config.live import LiveConfig
from trackmania_rl.games import float_layout_for
from trackmania_rl.learner_group.rendezvous import StoreServer

EVAL_BATCHES = 16
EVAL_SEED = 20_260_101


@torch.no_grad()
def hidden_test_loss(learner) -> float:
    """The loss of the online weights on EVAL_BATCHES batches of the hidden-test buffer drawn with a fixed seed."""
    buffer = learner.buffer_test
    buffer.sampler.rng = np.random.default_rng(EVAL_SEED)
    buffer.mini_race_transform.rng = np.random.default_rng(EVAL_SEED + 1)
    taus = torch.Generator().manual_seed(EVAL_SEED)
    losses = []
    for _ in range(EVAL_BATCHES):
        batch = buffer.sample_batch()
        batch.update(learner.trainer.draw_taus(len(batch["action"]), taus))
        loss, _ = learner.trainer.compute_loss(batch)
        losses.append(float(loss))
    return float(np.mean(losses))


def lr_process(rank: int, ranks: int, port: int, config_path: str, races: list, workdir: str, batches: int, replies) -> None:
    """Train `batches` learning batches (the group: together), then rank 0 replies (start loss, end loss, batches)."""
    torch.set_num_threads(1)
    live = LiveConfig(Path(config_path), game_backend=GAME_BACKEND, log=_quiet)
    layout, device, source = float_layout_for(live.current), torch.device("cpu"), ReplaySource(races)
    folder = Path(workdir) / f"lr_{ranks}_{rank}_{time.monotonic_ns()}"
    learner, thread, _ = start_learner(rank, ranks, port, live, layout, device, folder, source)
    _fill_once(learner, source)
    start_loss = hidden_test_loss(learner) if rank == 0 else None
    thread.start()
    while learner.stats.batches_done < batches:
        thread.check()
        time.sleep(0.005)
    thread.stop()
    thread.check()
    learner.batches.close()
    if rank == 0:
        replies.put((start_loss, hidden_test_loss(learner), learner.stats.batches_done))


def _train(ranks: int, config_path: Path, races: list, workdir: Path, batches: int) -> tuple[float, float, int]:
    context = multiprocessing.get_context("spawn")
    server = StoreServer(HOST, ranks, TIMEOUT_S) if ranks > 1 else None
    replies = context.Queue()
    port = server.port if server is not None else 0
    processes = [
        context.Process(target=lr_process, args=(k, ranks, port, str(config_path), races, str(workdir), batches, replies))
        for k in range(ranks)
    ]
    try:
        for process in processes:
            process.start()
        return replies.get(timeout=TIMEOUT_S + 600)
    finally:
        for process in processes:
            process.join(60)
            if process.is_alive():
                process.kill()
        if server is not None:
            server.close()


def run(args):
    quick = args.quick
    seeds = (0,) if quick else (0, 1)
    single_batches = 128 if quick else 256  # the learner alone; the pair takes half as many, on batches twice as large
    workdir = Path(tempfile.mkdtemp(prefix="learners_lr_benchmark_"))
    try:
        config_path, live = default_config_copy(workdir)
        races, _ = record_races(live.current, GAME_BACKEND, 3 if quick else 6, SHIPPED_WEIGHTS, RECORDING_FRAMES_PLAYED)
        base = (
            config_path.read_text()
            + f'\nnumber_times_single_memory_is_used_before_discard = {UNLIMITED_REPLAY_RATIO}\ntraining_precision = "float32"\n'
        )
        losses: dict[str, list[float]] = {"start": [], "one": [], "none": [], "sqrt": [], "linear": []}
        for seed in seeds:
            for name, ranks, rule in (("one", 1, "none"), ("none", 2, "none"), ("sqrt", 2, "sqrt"), ("linear", 2, "linear")):
                path = workdir / f"config_{name}_{seed}.py"
                path.write_text(base + f'seed = {seed}\nlearners_lr_scaling = "{rule}"\n')
                start, end, _ = _train(ranks, path, races, workdir, single_batches // ranks)
                losses[name].append(end)
                if name == "one":
                    losses["start"].append(start)
        batch_size = live.current.batch_size
        for name, values in losses.items():
            yield {
                "figure": f"learners.lr_rule_loss_test_{name}",
                "value": round(statistics.mean(values), 4),
                "unit": "quantile Huber loss",
                "seeds": [round(v, 4) for v in values],
                "transitions_learned": single_batches * batch_size if name != "start" else 0,
            }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
