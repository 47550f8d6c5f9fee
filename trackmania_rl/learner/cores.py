"""How many torch threads the learner runs: the cores this machine's games leave it, and more while they sit idle.

Each game on the learner's machine (a local collector, an actor of a `--ray auto` cluster, a loopback HTTP
client) wants a core; oversubscribed cores make train steps tens of times slower (measured: 8 ms -> 450 ms p90
for a tiny step with 2 threads beside a collector). But a local collector paused by pacing sits between races,
and its core would idle while the learner catches up: the learner takes it until the pause ends (measured on
2 cores, AMD EPYC: a batch-128 train step 1.52x faster on 2 threads than on 1).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch

# a CUDA learner's own cores: its training thread (the GPU's feeder) and the thread taking races and preparing batches
CUDA_LEARNER_CORES = 2
# The interpreter switch interval of a CUDA learner. Its training thread waits for the GPU with the interpreter lock
# released, ~1.5-2.5 ms a step as a graph; when the wait ends, the batch-prefetch thread or the main thread's ingest may
# hold the lock, and Python takes it back from them only after the switch interval: 5 ms by default, longer than the
# step. A shorter one bounds that wait (docs/performance.md, learner.overhead_ratio_graph: on an H100 1.455 at 5 ms,
# 1.086 at 0.5 ms, in one run).
CUDA_SWITCH_INTERVAL_S = 0.0005
PYTHON_SWITCH_INTERVAL_S = 0.005
SWITCH_INTERVAL_CANDIDATES_S = (0.005, 0.0005, 0.0001)  # what the learner and absorb benchmarks compare


def auto_collectors(device: torch.device, cores: int, other_games_here: int, other_sources: bool, learners: int = 1) -> tuple[int, str]:
    """`collectors_count = "auto"`: the cores the learner and the other games on this machine leave, and why (for the
    log). A CPU learner trains on threads of its own and keeps half the cores (on 2 cores: 1 collector, the measured
    default); a CUDA learner needs CUDA_LEARNER_CORES. At least one collector unless another source plays; with
    `learners` > 1 ranks, at least one per rank that learns only from local collectors (every rank above 0, and rank 0
    too unless another source feeds it)."""
    cores = max(1, int(cores))
    if torch.device(device).type == "cuda":
        budget, rule = cores - CUDA_LEARNER_CORES, f"{cores} cores, {CUDA_LEARNER_CORES} kept by the CUDA learner"
    else:
        budget, rule = cores // 2, f"{cores} cores, half kept by the CPU learner"
    if other_games_here:
        rule += f", {other_games_here} used by other games here"
    count = budget - max(0, int(other_games_here))
    needed = max(1, int(learners)) - (1 if other_sources else 0)
    if count < needed and learners > 1:
        rule += f"; raised to one per rank of the {learners} learners that has no other source"
    count = max(needed, count)
    return count, f"collectors_count auto: {count} collector(s) ({rule})"


def learner_switch_interval(device: torch.device) -> float:
    """The interpreter switch interval of a learner on `device`: CUDA_SWITCH_INTERVAL_S on CUDA, Python's default elsewhere."""
    return CUDA_SWITCH_INTERVAL_S if torch.device(device).type == "cuda" else PYTHON_SWITCH_INTERVAL_S


def set_switch_interval(device: torch.device) -> str:
    """Set the learner's interpreter switch interval for `device`; returns the line for the log."""
    interval_s = learner_switch_interval(device)
    sys.setswitchinterval(interval_s)
    return f"interpreter switch interval {1000 * interval_s:g} ms (Python's default: {1000 * PYTHON_SWITCH_INTERVAL_S:g} ms)"


def keep_main_thread_single() -> None:
    """One torch thread for the calling (main) thread, set before it runs any torch work: its own work (taking races,
    publishing) is light, and the learner's training thread applies the count `LearnerThreads` wants itself.

    Why not more: torch's CPU parallelism is GNU OpenMP, which gives each thread that runs a parallel region a team of
    its own. Once the threads of all teams outnumber the cores, its idle workers stop spinning and sleep, and every
    parallel region (each of a train step's hundreds of ops) pays a wake-up. On 2 cores that left a 2-thread train step
    in the training thread no faster than a 1-thread one (seen when commit 7db9a08 made this change; the timings' raw
    output was not kept, so none is quoted here)."""
    torch.set_num_threads(1)


class LearnerThreads:
    """`update(idle_games)` computes the torch thread count the training thread wants (`current`): the cores left by
    the games that play now; the training thread applies it before its steps (torch's count is per OS thread), never
    the thread that calls `update`. `take_mean_threads` gives the time-weighted mean since its previous call, for the
    aggregate log (`clock`: seconds, tests give their own)."""

    def __init__(self, cores: int, games_here: int, clock: Callable[[], float] = time.perf_counter):
        self.cores = max(1, int(cores))
        self.games_here = max(0, int(games_here))
        self.clock = clock
        self.current = 0
        self._since = clock()
        self._thread_seconds = 0.0
        self._seconds = 0.0
        self.update(0)

    def wanted(self, idle_games: int) -> int:
        playing = max(0, self.games_here - max(0, int(idle_games)))
        return max(1, self.cores - playing)

    def update(self, idle_games: int) -> int:
        threads = self.wanted(idle_games)
        if threads != self.current:
            self._account()
            self.current = threads
        return threads

    def _account(self) -> None:
        now = self.clock()
        if self.current:
            self._thread_seconds += self.current * (now - self._since)
            self._seconds += now - self._since
        self._since = now

    def take_mean_threads(self) -> float:
        self._account()
        mean = self._thread_seconds / self._seconds if self._seconds > 0 else float(self.current)
        self._thread_seconds = self._seconds = 0.0
        return mean
