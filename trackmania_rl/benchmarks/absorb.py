"""Learner capacity without a game (DESIGN §5, issue 28): how many collectors' races one learner takes, stores and
learns from, on this machine and device.

Races are recorded first: real CarRacing races played by a RacePlayer (the loop every collector runs) with the
shipped model's weights and the default config's exploration at 300,000 frames, which also gives one collector's
pace on this machine (`absorb.collector_actions_per_s`, one core, the JIT compilation left out). A `ReplaySource`
then hands them to a real Learner (default config, `--device`) as fast as it takes them, each unpickled from the
bytes a collector's queue would carry (its per-step lists packed into arrays: rollouts/packed_race.py) and stamped
with the learner's current policy version (never stale), every race stored (the map cycle's blind tracks included).
Figures:
- `absorb.ingest_actions_per_s`: training off, the main thread taking and storing races (unpickling, validation,
  n-step transitions, buffer writes) as fast as it can, after the buffers' memory was written once; median of windows.
  `absorb.ingest_actions_per_s_unpacked` beside it, windows taking turns: the same races carried as plain per-step
  lists (the queue's format before packed_race.py).
- `absorb.learned_transitions_per_s` (batches x batch size per second) and `absorb.absorbed_actions_per_s`: training
  on, in its thread, at the config's replay ratio, the source paced as in a run (paused while the learner owes more
  than max_training_backlog_batches); `absorb.collectors_absorbed` = absorbed actions/s ÷ one collector's.
- `absorb.training_thread_ingest_fraction`: how much taking and storing 2,200 actions/s (14 collectors of a 16-core
  box) slows the training thread, which is given unlimited credit here: 1 - (steps/s with that intake ÷ steps/s
  without), median of alternated windows. Target <= 0.02 (DESIGN §5). At the learner's interpreter switch interval
  (learner/cores.py); `…_by_switch_interval` gives it at every candidate interval, the intervals taking turns within
  each round: the measurement behind the learner's.
The training thread runs cores - 1 torch threads on the CPU (one core is the main thread's), one with CUDA.
"""

from __future__ import annotations

import os
import pickle
import shutil
import statistics
import sys
import tempfile
import time
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import torch

from trackmania_rl.benchmarks.pipeline import GAME_BACKEND, default_config_copy
from trackmania_rl.benchmarks.recorded_races import SHIPPED_WEIGHTS, record_races
from trackmania_rl.config.live import LiveConfig
from trackmania_rl.device import choose_device
from trackmania_rl.games import float_layout_for
from trackmania_rl.learner.cores import SWITCH_INTERVAL_CANDIDATES_S, learner_switch_interval, set_switch_interval
from trackmania_rl.learner.learner import Learner
from trackmania_rl.learner.sources import Pacing
from trackmania_rl.learner.training_thread import TrainingThread
from trackmania_rl.rollouts.contract import POLICY_VERSION
from trackmania_rl.rollouts.packed_race import pack_race, unpack_race
from trackmania_rl.rollouts.source import RolloutSource, SourceHealth

RECORDING_FRAMES_PLAYED = 300_000  # the exploration of a run that far in (epsilon ~0.04): full laps, some mistakes
GPU_BOX_ACTIONS_PER_S = 2_200  # 14 collectors of a 16-core GPU box at ~160 actions/s each (the H200 box measured ~121: 1,700)
UNLIMITED_REPLAY_RATIO = 1_000_000  # the fraction's training thread never runs out of credit


class ReplaySource(RolloutSource):
    """Recorded races, handed out in turn without end (at most `actions_per_s` actions per second when given)."""

    name = "replay"

    def __init__(self, races: list, actions_per_s: float | None = None, packed: bool = True):
        for race in races:
            race[2]["fill_buffer"] = True
        self.packed = packed
        # what a collector's queue carries
        self.bodies = [bytes(ForkingPickler.dumps((pack_race(r) if packed else r, stats, meta))) for r, stats, meta in races]
        self.actions_per_s = actions_per_s
        self.version = 0
        self.paused = False
        self.races = 0
        self.actions = 0
        self._allowed_at = time.perf_counter()

    def start(self) -> None:
        self._allowed_at = time.perf_counter()

    def get(self, timeout_s: float):
        now = time.perf_counter()
        if self.paused or now < self._allowed_at:
            wait = timeout_s if self.paused else min(timeout_s, self._allowed_at - now)
            if wait > 0:
                time.sleep(wait)
            return None
        rollout_results, end_race_stats, meta = pickle.loads(self.bodies[self.races % len(self.bodies)])
        if self.packed:
            rollout_results = unpack_race(rollout_results)
        actions = len(rollout_results["actions"])
        rollout_results[POLICY_VERSION] = [self.version] * actions
        meta["put_time"] = time.time()
        self.races += 1
        self.actions += actions
        if self.actions_per_s:
            self._allowed_at = max(self._allowed_at, now - 0.5) + actions / self.actions_per_s
        return rollout_results, end_race_stats, meta

    def publish(self, version: int, weights: dict) -> None:
        self.version = version

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def health(self) -> SourceHealth:
        return SourceHealth(self.name, 1, 1, paused=self.paused)

    def stop(self) -> None:
        return None


def _learner(config_path: Path, workdir: Path, device: torch.device, source: ReplaySource, name: str) -> Learner:
    live = LiveConfig(config_path, game_backend=GAME_BACKEND, log=lambda m: None)
    return Learner(live, float_layout_for(live.current), device, workdir / name, source=source, log=lambda m: None, resume=False)


def _fill_once(learner: Learner, source: ReplaySource) -> None:
    """Store races until both buffers have wrapped: their memory is written once (page faults paid) before timing."""
    needed = 1.2 * (learner.buffer.capacity + learner.buffer_test.capacity / learner.cfg.buffer_test_ratio)
    while learner.stats.frames_played < needed:
        learner.ingest_envelope(source.get(0.0))


def ingest_ceiling(learner: Learner, sources: dict, windows: int, window_s: float) -> dict:
    """{label: actions/s taken and stored by this thread, training off, per window} for each of `sources` (label:
    ReplaySource), their windows taking turns."""
    _fill_once(learner, next(iter(sources.values())))
    rates = {label: [] for label in sources}
    for _ in range(windows):
        for label, source in sources.items():
            start, frames = time.perf_counter(), learner.stats.frames_played
            while time.perf_counter() - start < window_s:
                learner.ingest_envelope(source.get(0.0))
            rates[label].append((learner.stats.frames_played - frames) / (time.perf_counter() - start))
    return rates


def _intake(learner: Learner, training: TrainingThread, source: ReplaySource, seconds: float, pacing: Pacing | None) -> None:
    """The main thread of a run (train_loop) for `seconds`: take, store, publish, pace."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        training.check()
        envelope = source.get(0.01)
        if envelope is not None:
            learner.ingest_envelope(envelope)
            training.data_stored()
        learner.publish_pending()
        if pacing is not None:
            pacing.update(learner.training_backlog_batches(), learner.cfg.max_training_backlog_batches)


def learning_rate(learner: Learner, source: ReplaySource, threads: int, warmup_s: float, window_s: float) -> tuple[float, float]:
    """(learned transitions/s, absorbed actions/s) with the training thread on at the config's replay ratio."""
    training = TrainingThread(learner, wanted_threads=lambda: threads)
    pacing = Pacing(source, log=lambda m: None)
    training.start()
    try:
        _intake(learner, training, source, warmup_s, pacing)
        start, batches, frames = time.perf_counter(), learner.stats.batches_done, learner.stats.frames_played
        _intake(learner, training, source, window_s, pacing)
        elapsed = time.perf_counter() - start
    finally:
        training.stop()
    training.check()
    learned = (learner.stats.batches_done - batches) * learner.cfg.batch_size / elapsed
    return learned, (learner.stats.frames_played - frames) / elapsed


def ingest_slowdown(learner: Learner, source: ReplaySource, threads: int, rounds: int, window_s: float, intervals: list[float]) -> dict:
    """Per interpreter switch interval, per round: 1 - (training steps/s while the main thread takes `source`'s paced
    races ÷ steps/s while it idles). The intervals take turns within each round (one machine state for all)."""
    training = TrainingThread(learner, wanted_threads=lambda: threads)
    training.start()
    ratios: dict = {interval: [] for interval in intervals}
    try:
        _intake(learner, training, source, window_s, None)  # warm-up with intake on
        for _ in range(rounds):
            for interval in intervals:
                sys.setswitchinterval(interval)
                rates = {}
                for intake in (False, True):
                    steps = learner.stats.batches_done + learner.stats.test_batches_done
                    start = time.perf_counter()
                    if intake:
                        source.start()  # the pace counts from now
                        _intake(learner, training, source, window_s, None)
                    else:
                        while time.perf_counter() - start < window_s:
                            training.check()
                            time.sleep(0.01)
                            learner.publish_pending()
                    rates[intake] = (learner.stats.batches_done + learner.stats.test_batches_done - steps) / (time.perf_counter() - start)
                ratios[interval].append(1 - rates[True] / rates[False])
    finally:
        training.stop()
        sys.setswitchinterval(intervals[0])
    training.check()
    return ratios


def run(args):
    device = choose_device(getattr(args, "device", "cpu"))
    quick = args.quick
    cores = os.cpu_count() or 1
    threads = max(1, cores - 1) if device.type == "cpu" else 1
    torch.set_num_threads(1)  # the main thread's; the training thread sets its own
    set_switch_interval(device)  # the learner's, as in a run
    workdir = Path(tempfile.mkdtemp(prefix="absorb_benchmark_"))
    try:
        config_path, live = default_config_copy(workdir)
        races, collector_rate = record_races(live.current, GAME_BACKEND, 3 if quick else 6, SHIPPED_WEIGHTS, RECORDING_FRAMES_PLAYED)
        actions = [len(r[0]["actions"]) for r in races]
        yield {
            "figure": "absorb.collector_actions_per_s",
            "value": round(collector_rate, 1),
            "unit": "actions/s",
            "races": len(races),
            "actions_per_race": actions,
        }

        source = ReplaySource(races)
        learner = _learner(config_path, workdir, device, source, "ingest")
        by_format = ingest_ceiling(
            learner, {"": source, "_unpacked": ReplaySource(races, packed=False)}, windows=3 if quick else 5, window_s=1.0 if quick else 2.0
        )
        for suffix, rates in by_format.items():
            yield {
                "figure": f"absorb.ingest_actions_per_s{suffix}",
                "value": round(statistics.median(rates), 0),
                "unit": "actions/s",
                "target": ">= 50000 (2 cores)",
                "windows": [round(r) for r in rates],
                "us_per_action": round(1e6 / statistics.median(rates), 2),
            }
        learner.batches.close()

        source = ReplaySource(races)
        learner = _learner(config_path, workdir, device, source, "learn")
        learned, absorbed = learning_rate(learner, source, threads, warmup_s=10.0 if quick else 20.0, window_s=15.0 if quick else 40.0)
        learner.batches.close()
        yield {
            "figure": "absorb.learned_transitions_per_s",
            "value": round(learned, 0),
            "unit": "transitions/s",
            "device": str(device),
            "precision": learner.precision.name,
            "cuda_graphs": learner.cuda_graphs.enabled,
            "training_threads": threads,
            "batch_size": learner.cfg.batch_size,
            "replay_ratio": learner.cfg.number_times_single_memory_is_used_before_discard,
        }
        yield {"figure": "absorb.absorbed_actions_per_s", "value": round(absorbed, 1), "unit": "actions/s"}
        yield {"figure": "absorb.collectors_absorbed", "value": round(absorbed / collector_rate, 2), "unit": "collectors"}

        unlimited = workdir / "unlimited_credit.py"
        unlimited.write_text(config_path.read_text() + f"\nnumber_times_single_memory_is_used_before_discard = {UNLIMITED_REPLAY_RATIO}\n")
        source = ReplaySource(races, actions_per_s=GPU_BOX_ACTIONS_PER_S)
        learner = _learner(unlimited, workdir, device, source, "fraction")
        _fill_once(learner, ReplaySource(races))
        # the learner's interpreter switch interval on this device (learner/cores.py) first, then the other candidates
        learners = learner_switch_interval(device)
        intervals = [learners] + [i for i in SWITCH_INTERVAL_CANDIDATES_S if i != learners]
        # a GPU step is short: shorter windows, more rounds (quick runs there scattered -0.2 to 0.15 over 3 rounds of 3 s)
        if device.type == "cuda":
            rounds, window_s = (9, 1.0) if quick else (18, 1.5)
        else:
            rounds, window_s = (3, 3.0) if quick else (6, 5.0)
        ratios = ingest_slowdown(learner, source, threads, rounds, window_s, intervals)
        learner.batches.close()
        yield {
            "figure": "absorb.training_thread_ingest_fraction",
            "value": round(max(0.0, statistics.median(ratios[learners])), 4),
            "unit": "ratio",
            "target": "<= 0.02",
            "intake_actions_per_s": GPU_BOX_ACTIONS_PER_S,
            "rounds": [round(r, 4) for r in ratios[learners]],
            "training_threads": threads,
            "cores": cores,
            "switch_interval_ms": 1000 * learners,
        }
        yield {
            "figure": "absorb.training_thread_ingest_fraction_by_switch_interval",
            "value": {
                f"{1000 * i:g}": {"median": round(statistics.median(r), 4), "rounds": [round(x, 4) for x in r]} for i, r in ratios.items()
            },
            "unit": "switch interval ms: ratio",
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
