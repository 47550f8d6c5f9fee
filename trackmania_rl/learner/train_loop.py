"""The training application: collectors + learner wired together (DESIGN §2). Entry: scripts/train.py."""

from __future__ import annotations

import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.multiprocessing as torch_mp

from trackmania_rl.agents.iqn import make_network
from trackmania_rl.config.live import LiveConfig
from trackmania_rl.config.loader import CONFIG_DIR, REPO_ROOT, ConfigError, load_config, load_user_config
from trackmania_rl.device import choose_device
from trackmania_rl.games import float_layout_for
from trackmania_rl.learner.learner import Learner
from trackmania_rl.monitoring.status_line import StatusLine
from trackmania_rl.monitoring.tensorboard import RunLogger
from trackmania_rl.rollouts.local.collector import collector_main
from trackmania_rl.rollouts.local.pool import CollectorPool
from trackmania_rl.rollouts.local.shared_network import SharedNetwork
from trackmania_rl.rollouts.local.source import LocalCollectorSource

AGGREGATE_LOG_PERIOD_S = 30.0


@dataclass
class TrainOptions:
    run_name: str = "carracing_default"
    fresh: bool = False
    max_minutes: float | None = None
    config: Path = CONFIG_DIR / "config.py"
    config_copy: Path = CONFIG_DIR / "config_copy.py"
    save_dir: Path | None = None
    tensorboard_dir: Path | None = None
    collectors: int | None = None  # overrides collectors_count
    status_line: bool = True


def _resolve(path, default) -> Path:
    path = Path(path if path is not None else default)
    return path if path.is_absolute() else REPO_ROOT / path


def log(message: str) -> None:
    print(f"[learner] {message}", flush=True)


def prepare_run_folders(options: TrainOptions, user) -> tuple[Path, Path]:
    save_dir = _resolve(options.save_dir, user.save_dir)
    tensorboard_dir = _resolve(options.tensorboard_dir, user.tensorboard_dir)
    run_dir = save_dir / options.run_name
    tb_run_dir = tensorboard_dir / options.run_name
    if options.fresh:
        # Starting over never deletes a previous run: it is moved aside.
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for folder in (run_dir, tb_run_dir):
            if folder.exists():
                backup = folder.with_name(f"{folder.name}.before-fresh-{stamp}")
                shutil.move(str(folder), str(backup))
                log(f"--fresh: previous {folder} moved to {backup}")
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir, tb_run_dir


def _stop_on_sigterm() -> None:
    """A `kill` (SIGTERM) stops the run like Ctrl-C: collectors stopped, checkpoint saved."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def run_training(options: TrainOptions) -> int:
    user = load_user_config()
    config_path = _resolve(options.config, None)
    load_config(config_path, game_backend=user.game_backend)  # refuse a bad config before anything starts
    config_copy = _resolve(options.config_copy, None)
    if config_path.resolve() != config_copy.resolve():
        shutil.copyfile(config_path, config_copy)
    live = LiveConfig(config_copy, game_backend=user.game_backend, log=log)
    cfg = live.current
    try:
        device = choose_device(user.device)
    except ValueError as e:
        raise ConfigError(f"config_files/user_config.py: {e}") from None
    run_dir, tb_run_dir = prepare_run_folders(options, user)
    layout = float_layout_for(cfg, user.game_backend)
    collectors_count = options.collectors or cfg.collectors_count
    log(f"run {options.run_name}: device {device}, {collectors_count} collector(s), game {user.game_backend}, saves in {run_dir}")

    # One torch thread per core left over by the collectors: oversubscribed cores make train steps
    # tens of times slower (measured: 8 ms -> 450 ms p90 for a tiny step with 2 threads beside a collector).
    torch.set_num_threads(max(1, (os.cpu_count() or 1) - collectors_count))
    ctx = torch_mp.get_context("spawn")
    shared = SharedNetwork(make_network(cfg, layout, len(cfg.inputs), "cpu"), ctx)
    logger = RunLogger(tb_run_dir, resolved_config={**cfg.settings(), "collectors_count": collectors_count, "device": str(device)})
    frames_played = ctx.Value("q", 0, lock=False)  # the learner's count, read by collectors for their schedules
    pause_event = ctx.Event()
    pool = CollectorPool(
        ctx,
        collector_main,
        args=(str(config_copy), user.game_backend, collectors_count, shared, frames_played, pause_event),
        count=collectors_count,
        queue_size=cfg.max_rollout_queue_size,
        log=log,
    )
    source = LocalCollectorSource(pool, shared, pause_event, stall_timeout_s=lambda: live.current.collector_stall_timeout_s)
    learner = Learner(live, layout, device, run_dir, source=source, logger=logger, log=log, resume=True)
    frames_played.value = learner.stats.frames_played
    status = StatusLine(enabled=options.status_line)
    _stop_on_sigterm()
    deadline = time.perf_counter() + 60 * options.max_minutes if options.max_minutes else None
    last_aggregate = time.perf_counter()
    exit_reason = "time limit reached"
    source.start()
    try:
        while deadline is None or time.perf_counter() < deadline:
            live.reload()
            learner.apply_config()  # config edits, schedules and buffer growth by frames played
            cfg = live.current
            wait_start = time.perf_counter()
            envelope = source.get(timeout_s=0.0 if learner.can_train() else 0.5)
            learner.note_waiting(time.perf_counter() - wait_start)
            if envelope is not None:
                learner.ingest_envelope(envelope)
                frames_played.value = learner.stats.frames_played
            learner.train(max_seconds=0.5)
            learner.stats.collector_restarts += len(source.health().replaced)
            if time.perf_counter() - last_aggregate >= AGGREGATE_LOG_PERIOD_S:
                learner.log_aggregates()
                last_aggregate = time.perf_counter()
            if learner.save_due():
                status.clear()
                learner.save()
            status.update(learner)
    except KeyboardInterrupt:
        exit_reason = "interrupted"
    finally:
        status.clear()
        log(f"{exit_reason}: stopping collectors and saving")
        source.stop()
        for line in source.summary():
            log(line)
        try:
            learner.log_aggregates()
            learner.save()
        finally:
            logger.close()
    return 0
