"""Pipeline figures (DESIGN §5), with real collector processes and the real learner, learner paused.

- `pipeline.ingest_fraction`: learner time to take one rollout off its queue (unpickling included) and
  store it (validation, n-step transitions, buffer fill) ÷ that rollout's play time in its collector.
  Median over rollouts. Target <= 0.02.
- `pipeline.two_collector_scaling`: aggregate actions/s of two collectors ÷ one collector, each measured
  over the same window after start-up (`source_actions_per_s`), the learner only draining queues. Target >= 1.8
  on two cores.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.multiprocessing as torch_mp

from trackmania_rl.agents.iqn import make_network
from trackmania_rl.config.live import LiveConfig
from trackmania_rl.config.loader import CONFIG_DIR
from trackmania_rl.games import float_layout_for
from trackmania_rl.games.backend import DEFAULT_GAME_BACKEND
from trackmania_rl.learner.learner import Learner
from trackmania_rl.rollouts.contract import validated_race
from trackmania_rl.rollouts.local.collector import collector_main
from trackmania_rl.rollouts.local.pool import CollectorPool
from trackmania_rl.rollouts.local.shared_network import SharedNetwork
from trackmania_rl.rollouts.local.source import LocalCollectorSource

WARMUP_ROLLOUTS = 1  # per collector: the first race pays for imports and TorchScript compilation
GAME_BACKEND = DEFAULT_GAME_BACKEND  # the built-in game


def default_config_copy(workdir: Path, log=lambda m: None) -> tuple[Path, LiveConfig]:
    """The default config copied into `workdir` (producers read their settings from a file), and its LiveConfig."""
    config_path = workdir / "config_copy.py"
    shutil.copyfile(CONFIG_DIR / "config.py", config_path)
    return config_path, LiveConfig(config_path, game_backend=GAME_BACKEND, log=log)


def measure_ingest(source, learner, n_rollouts: int, deadline_s: float = 600.0) -> dict[str, list]:
    """Take and store `n_rollouts` races from a started source after the warm-up ones, timing each: the learner's
    time per race ("take_ms": `source.get`; "ingest_ms": get + `ingest_envelope`), its share of the race's play
    time ("fractions"), the play time ("play_s") and the frames' size ("frames_mb"). Where the time goes: "validate_ms"
    (the contract's check, timed again after the ingest, outside the fractions: its data then warm in the caches),
    "store_ms" (the ingest less that check) and, from a source that splits its take (`last_take_ms`, the Ray
    source), "take_stages" (a dict per race); from one that receives its races on a thread of its own
    (`last_receive_ms`, the Ray source), what each race cost that thread, off the learner's ("receive_stages")."""
    names = ("fractions", "take_ms", "ingest_ms", "play_s", "frames_mb", "validate_ms", "store_ms", "take_stages", "receive_stages")
    figures = {name: [] for name in names}
    received = 0
    deadline = time.monotonic() + deadline_s
    while len(figures["fractions"]) < n_rollouts and time.monotonic() < deadline:
        start = time.perf_counter()
        envelope = source.get(timeout_s=0.0)
        if envelope is None:
            time.sleep(0.005)
            continue
        taken = time.perf_counter()
        learner.ingest_envelope(envelope)
        elapsed = time.perf_counter() - start
        validate_start = time.perf_counter()
        validated_race(envelope, learner.rollout_shape)
        validate_ms = 1000 * (time.perf_counter() - validate_start)
        received += 1
        if received <= WARMUP_ROLLOUTS:
            continue
        play_s = envelope[2]["rollout_duration_s"]
        figures["fractions"].append(elapsed / play_s)
        figures["take_ms"].append(1000 * (taken - start))
        figures["ingest_ms"].append(1000 * elapsed)
        figures["validate_ms"].append(validate_ms)
        figures["store_ms"].append(1000 * (start + elapsed - taken) - validate_ms)
        if getattr(source, "last_take_ms", None):
            figures["take_stages"].append(dict(source.last_take_ms))
        if getattr(source, "last_receive_ms", None):
            figures["receive_stages"].append(dict(source.last_receive_ms))
        figures["play_s"].append(play_s)
        figures["frames_mb"].append(sum(getattr(frame, "nbytes", 0) for frame in envelope[0]["frames"]) / 2**20)
    if not figures["fractions"]:
        raise RuntimeError(f"no race to measure within {deadline_s:g} s")
    return figures


def ingest_stages_ms(figures: dict) -> dict[str, float]:
    """measure_ingest's per-race stages as medians, ms: take (its own stages where the source splits it, the rest of
    `get` as "take_other"), validate, store and their total; then a receiver thread's stages ("receiver_<stage>", not
    in the total: they are not the learner's thread's)."""
    stages = {"take": figures["take_ms"]}
    if figures["take_stages"]:
        names = figures["take_stages"][0].keys()
        for name in names:
            stages[f"take_{name}"] = [split[name] for split in figures["take_stages"]]
        stages["take_other"] = [take - sum(split.values()) for take, split in zip(figures["take_ms"], figures["take_stages"], strict=True)]
    stages.update(validate=figures["validate_ms"], store=figures["store_ms"], total=figures["ingest_ms"])
    for split in figures.get("receive_stages", [])[:1]:
        for name in split:
            stages[f"receiver_{name}"] = [race[name] for race in figures["receive_stages"]]
    return {name: round(statistics.median(values), 3) for name, values in stages.items()}


def source_actions_per_s(source, producers: int, window_s: float, on_envelope=None) -> float:
    """Actions/s of a started source's `producers` (told apart by meta["collector"]) over a window that starts
    once each has delivered its warm-up races: for each producer, the actions of its races after its first one
    in the window ÷ the time between that first race's arrival and its last one's; summed over the producers.
    Counting whole races inside a fixed window instead would be off by up to a race per producer (~7 % for one
    producer in 30 s), more than the ratios these figures are compared against. 0.0 for an empty window."""
    warm: dict = {}
    deadline = time.perf_counter() + 180
    while len(warm) < producers or min(warm.values()) < WARMUP_ROLLOUTS:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{producers} producer(s) delivered no warm-up race within 180 s")
        envelope = source.get(timeout_s=0.5)
        if envelope is not None:
            collector = envelope[2]["collector"]
            warm[collector] = warm.get(collector, 0) + 1
    arrivals: dict = {}  # producer -> [(arrival time, actions)]
    start = time.perf_counter()
    while time.perf_counter() - start < window_s:
        envelope = source.get(timeout_s=0.2)
        if envelope is not None:
            arrivals.setdefault(envelope[2]["collector"], []).append((time.perf_counter(), len(envelope[0]["actions"])))
            if on_envelope is not None:
                on_envelope(envelope)
    rate = 0.0
    for races in arrivals.values():
        if len(races) >= 2:
            rate += sum(actions for _, actions in races[1:]) / (races[-1][0] - races[0][0])
    return rate


def _local_source(ctx, config_path: Path, shared, count: int) -> LocalCollectorSource:
    """The local rollout source with `count` collectors, not started."""
    frames_played, pause_event = ctx.Value("q", 0, lock=False), ctx.Event()
    pool = CollectorPool(
        ctx,
        collector_main,
        args=(str(config_path), GAME_BACKEND, count, shared, frames_played, pause_event),
        count=count,
        queue_size=1,
        log=lambda m: None,
    )
    return LocalCollectorSource(pool, shared, pause_event, frames_played, stall_timeout_s=lambda: 600.0)


def local_ingest(ctx, config_path: Path, live: LiveConfig, layout, shared, run_dir: Path, n_rollouts: int) -> dict[str, list]:
    """measure_ingest over one local collector process feeding a learner that does not train."""
    source = _local_source(ctx, config_path, shared, 1)
    learner = Learner(live, layout, torch.device("cpu"), run_dir, source=source, log=lambda m: None, resume=False)
    source.start()
    try:
        return measure_ingest(source, learner, n_rollouts)
    finally:
        source.stop()


def local_actions_per_s(ctx, config_path: Path, shared, count: int, window_s: float, on_envelope=None) -> float:
    """`count` local collector processes' actions/s (`source_actions_per_s`), the learner only draining."""
    source = _local_source(ctx, config_path, shared, count)
    source.start()
    try:
        return source_actions_per_s(source, count, window_s, on_envelope)
    finally:
        source.stop()


def run(args):
    torch.set_num_threads(1)
    window_s = 20.0 if args.quick else 60.0
    n_rollouts = 8 if args.quick else 30
    workdir = Path(tempfile.mkdtemp(prefix="pipeline_benchmark_"))
    try:
        config_path, live = default_config_copy(workdir)
        cfg = live.current
        layout = float_layout_for(cfg)
        ctx = torch_mp.get_context("spawn")
        shared = SharedNetwork(make_network(cfg, layout, len(cfg.inputs)), ctx)

        # ingest: one collector feeding a learner that does not train
        ingest = local_ingest(ctx, config_path, live, layout, shared, workdir / "run", n_rollouts)
        yield {
            "figure": "pipeline.ingest_fraction",
            "value": round(statistics.median(ingest["fractions"]), 5),
            "unit": "ratio",
            "target": "<= 0.02",
            "ingest_ms_median": round(statistics.median(ingest["ingest_ms"]), 2),
            "rollout_play_s_median": round(statistics.median(ingest["play_s"]), 2),
            "rollouts": len(ingest["fractions"]),
        }

        one = local_actions_per_s(ctx, config_path, shared, 1, window_s)
        two = local_actions_per_s(ctx, config_path, shared, 2, window_s)
        yield {"figure": "pipeline.one_collector_actions_per_s", "value": round(one, 1), "unit": "actions/s", "window_s": window_s}
        yield {"figure": "pipeline.two_collectors_actions_per_s", "value": round(two, 1), "unit": "actions/s", "window_s": window_s}
        yield {"figure": "pipeline.two_collector_scaling", "value": round(two / one, 3), "unit": "ratio", "target": ">= 1.8"}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
