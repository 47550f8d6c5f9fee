"""The training application: collectors + learner wired together (DESIGN §2). Entry: scripts/train.py."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from trackmania_rl.agents.graphed_step import check_cuda_graphs_setting
from trackmania_rl.config.live import LiveConfig
from trackmania_rl.config.loader import CONFIG_DIR, REPO_ROOT, ConfigError, config_files, load_config, load_user_config
from trackmania_rl.config.whole_copy import whole_config_text
from trackmania_rl.device import choose_device, machine_in_words
from trackmania_rl.games import float_layout_for
from trackmania_rl.games.backend import game_backend
from trackmania_rl.learner.allocator import keep_freed_memory_for_reuse
from trackmania_rl.learner.cores import LearnerThreads, auto_collectors, keep_main_thread_single, set_switch_interval
from trackmania_rl.learner.group_hooks import GroupHooks
from trackmania_rl.learner.held_out import FINISH_WAIT_S, HeldOutEvaluation
from trackmania_rl.learner.learner import Learner
from trackmania_rl.learner.run_folder import (
    LIVE_CONFIG,
    RunLock,
    StopSignals,
    check_folder_can_be_used,
    install_live_config,
    move_run_aside,
    validate_run_name,
)
from trackmania_rl.learner.sources import (
    Pacing,
    SourceContext,
    build_sources,
    check_source_settings,
    games_on_this_machine,
    remote_source_names,
)
from trackmania_rl.learner.training_thread import TrainingThread
from trackmania_rl.monitoring.status_line import StatusLine, print_line
from trackmania_rl.monitoring.tensorboard import RunLogger
from trackmania_rl.rollouts.source import RolloutSource

AGGREGATE_LOG_PERIOD_S = 30.0
TIME_LIMIT = "time limit reached"  # the exit reason of a run that reached --max-minutes
INTAKE_WAIT_S = 0.05  # the main thread waits this long for a race: also the longest delay of a publish


@dataclass
class TrainOptions:
    run_name: str = "carracing_default"
    fresh: bool = False
    max_minutes: float | None = None
    config: Path = CONFIG_DIR / "config.py"  # copied to save/<run>/config_live.py when the run starts
    save_dir: Path | None = None
    tensorboard_dir: Path | None = None
    collectors: int | None = None  # overrides collectors_count (0: no local collector, another source plays)
    ray: str | None = None  # overrides ray_address: "auto" (a local cluster on loopback) or a running cluster's address
    ray_actors: int | None = None  # overrides ray_actors
    listen: str | None = None  # overrides http_listen: HOST:PORT of the HTTP endpoint for external game clients
    new_token: bool = False  # replace the run's HTTP token
    seed: int | None = None  # the run's seed, written into a new run's live config; a resumed run must match it
    learners: int = 1  # data-parallel learner ranks (learner_group/; scripts/train.py builds the group when > 1)
    status_line: bool = True


def _resolve(path, default) -> Path:
    path = Path(path if path is not None else default)
    return path if path.is_absolute() else REPO_ROOT / path


def log(message: str) -> None:
    print_line(f"[learner] {message}")


def run_folders(options: TrainOptions, user) -> tuple[Path, Path]:
    """save/<run> and tensorboard/<run> (the run name checked: one plain folder name, never a path)."""
    name = validate_run_name(options.run_name)
    save_dir = _resolve(options.save_dir, user.save_dir)
    tensorboard_dir = _resolve(options.tensorboard_dir, user.tensorboard_dir)
    for folder, option, setting in (
        (save_dir, options.save_dir, "save_dir"),
        (tensorboard_dir, options.tensorboard_dir, "tensorboard_dir"),
    ):
        named_by = f"--{setting.replace('_', '-')}" if option is not None else f"{setting} (config_files/user_config.py)"
        check_folder_can_be_used(folder / name, named_by)
    return save_dir / name, tensorboard_dir / name


def start_device(user, cfg, config_name):
    """The run's device, with the config's CUDA graphs setting checked against it (ConfigError naming the problem)."""
    try:
        device = choose_device(user.device)
    except ValueError as e:
        raise ConfigError(f"config_files/user_config.py: {e}") from None
    try:
        check_cuda_graphs_setting(cfg.training_cuda_graphs, device)
    except ValueError as e:
        raise ConfigError(f"{config_name}: {e}") from None
    return device


def check_game(cfg, config_name) -> None:
    """ConfigError naming the setting the config's game cannot work with (the game may be started to find out)."""
    check = game_backend(cfg.game_backend).check_config
    if check is not None:
        try:
            check(cfg)
        except ConfigError as e:
            raise ConfigError(f"{config_name}: {e}") from None


def check_start(options: TrainOptions, user, cfg, config_name) -> None:
    """What a new run's config needs of this machine, checked before anything is moved or written (ConfigError naming
    the problem): the device, CUDA graphs, the game, the rollout sources."""
    start_device(user, cfg, config_name)
    check_game(cfg, config_name)
    check_source_settings(options, cfg, options.collectors if options.collectors is not None else cfg.collectors_count)


def open_run(options: TrainOptions, user) -> tuple[RunLock, Path, Path, Path]:
    """Lock the run folder (RunLocked if another trainer holds it: nothing touched), then `--fresh` moves the
    previous run aside, and the run's live config is set up: copied from `--config` at a fresh start, written whole when
    it names a base (checked first: a refused start moves and writes nothing), kept as it is on resume. Returns (lock, run_dir,
    tb_run_dir, live config path)."""
    run_dir, tb_run_dir = run_folders(options, user)
    lock = RunLock.acquire(run_dir)
    try:
        live_path = run_dir / LIVE_CONFIG
        config_text = copied_from = None
        if options.fresh or not live_path.exists():
            config_path = _resolve(options.config, None)
            check_start(options, user, load_config(config_path, game_backend=user.game_backend), config_path)
            config_text = whole_config_text(config_path)  # a file with a base is written out whole: every setting in force
            *bases, _ = config_files(config_path)
            copied_from = f"{config_path}, written whole over {' over '.join(str(b) for b in reversed(bases))}" if bases else config_path
            if options.seed is not None:  # the live config records it: a resume keeps it, settings.json shows it
                config_text += f"\nseed = {options.seed}  # [restart] set by --seed when the run started\n"
        if options.fresh:
            move_run_aside(run_dir, tb_run_dir, log=log)
        live_path, created = install_live_config(run_dir, config_text)
        if created:
            log(f"live config of this run: {live_path} (copied from {copied_from}; edit it to tune the run)")
        else:
            log(f"live config of this run: {live_path} (kept from the previous session of this run; edit it to tune the run)")
    except BaseException:
        lock.release()
        raise
    return lock, run_dir, tb_run_dir, live_path


class PeriodicSaves:
    """Saves every `save_frequency_s`. A failed save does not end the run: it is logged once per distinct
    message (the count is reported when saving works again and at the end) and tried again a period later."""

    def __init__(self, log=log):
        self.log = log
        self.failures: dict[str, int] = {}
        self.next_try = 0.0

    def due(self, learner) -> bool:
        return time.perf_counter() >= self.next_try and learner.save_due()

    def save(self, learner, period_s: float) -> bool:
        try:
            learner.save()
        except Exception as e:
            message = _describe(e)
            count = self.failures.get(message, 0) + 1
            self.failures[message] = count
            if count == 1:
                self.log(f"periodic checkpoint save failed (training goes on, next try in {period_s:g} s): {message}")
            self.next_try = time.perf_counter() + period_s
            return False
        if self.failures:
            self.log(f"checkpoint saved again after {sum(self.failures.values())} failed periodic save(s)")
            self.failures.clear()
        return True

    def summary(self) -> list[str]:
        return [f"periodic checkpoint save failed {count} time(s): {message}" for message, count in self.failures.items()]


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def final_save(learner) -> int:
    """The checkpoint written on exit: 0 when it is complete, 1 (one line on stderr, no traceback) when it failed."""
    try:
        learner.save()
    except Exception as e:
        print(
            f"error: the final checkpoint save failed, the previous complete checkpoint is kept: {_describe(e)}",
            file=sys.stderr,
            flush=True,
        )
        return 1
    return 0


class _Run:
    """What run_training has built so far, so that stopping at any stage cleans up exactly that."""

    lock: RunLock | None = None
    source: RolloutSource | None = None
    learner: Learner | None = None
    held_out: HeldOutEvaluation | None = None
    logger: RunLogger | None = None
    saves: PeriodicSaves | None = None
    live: LiveConfig | None = None
    threads: LearnerThreads | None = None
    training: TrainingThread | None = None
    no_source_left: bool = False  # the run stopped because no collector was left: it exits 1 after its save
    group: GroupHooks = GroupHooks()  # the run's learners: this one, or a learner group (learner_group/)
    failure: str | None = None  # why the learner group stopped the run (a rank died or hung): exit 1 after the save


def run_training(options: TrainOptions, group: GroupHooks | None = None) -> int:
    """Train until --max-minutes or SIGINT/SIGTERM. 0 after a complete final save, 1 if it failed or if the run
    stopped because no collector was left or a rank of its learner group failed (`group`: learner_group/).
    ConfigError, CheckpointError and RunFolderError (bad run name, run locked) come out before anything changed."""
    signals = StopSignals().install()  # first: a signal at any later stage stops the run cleanly
    keep_main_thread_single()  # before any torch work: the training thread alone takes more cores
    run = _Run()
    if group is not None:
        run.group = group
    try:
        try:
            _start(options, run, signals)
            signals.start_loop()
            exit_reason = _loop(options, run, signals)
        except KeyboardInterrupt:
            exit_reason = "interrupted" if run.learner is not None and run.source is not None else "interrupted during start-up"
        signals.begin_shutdown()
        code = _shutdown(run, exit_reason)
        return 1 if run.no_source_left or run.failure else code
    except BaseException:
        signals.begin_shutdown()
        if run.learner is not None:
            _shutdown(run, "stopped by an error")
        else:  # start-up refused (a checkpoint from another config...): close what was opened, quietly
            for close in (run.source.stop if run.source else None, run.logger.close if run.logger else None, run.group.close):
                try:
                    if close is not None:
                        close()
                except Exception:
                    pass
        raise
    finally:
        if run.lock is not None:
            run.lock.release()
        signals.restore()


def _start(options: TrainOptions, run: _Run, signals: StopSignals) -> None:
    user = load_user_config()
    run.lock, run_dir, tb_run_dir, live_path = open_run(options, user)
    live = LiveConfig(live_path, game_backend=user.game_backend, log=log)
    cfg = live.current
    if options.seed is not None and options.seed != cfg.seed:
        raise ConfigError(
            f"run {options.run_name} was started with seed {cfg.seed} ({live_path}); --seed {options.seed} cannot change it. "
            "Resume without --seed, or start another run (--run-name) or over (--fresh)"
        )
    device = start_device(user, cfg, live_path)  # the run's own config (a resume's too); build_sources checks its sources
    game = cfg.game_backend  # the config's game, else user_config's (config/loader.py)
    layout = float_layout_for(cfg, game)
    collectors_count = local_collectors(options, cfg, device)
    context = SourceContext(options, live, live_path, game, layout, run_dir, log)
    here = run.group.collectors_here(collectors_count, context, device)  # a learner group's rank 0: its share
    run.source = source = build_sources(context, here, producers=collectors_count)  # nothing started yet
    sources = " + ".join(([f"{here} local collector(s)"] if here else []) + remote_source_names(options, cfg))
    log(f"run {options.run_name}: device {device}, {sources}, game {game}, saves in {run_dir}")
    log(f"machine: {machine_in_words(device)}")  # figures differ by machine: every log names the one that made it

    log(keep_freed_memory_for_reuse())  # before the precision probe and the first train steps
    log(set_switch_interval(device))
    # One torch thread per core left over by the games on this machine, more while paced collectors idle (cores.py)
    run.threads = run.group.learner_threads(os.cpu_count() or 1, games_on_this_machine(options, cfg, collectors_count))
    settings = {**cfg.settings(), "collectors_count": collectors_count, "device": str(device)}
    run.logger = RunLogger(tb_run_dir, resolved_config=settings, log=log)
    run.learner = run.group.make_learner(live, layout, device, run_dir, source, run.logger, log, threads=run.threads.current)
    run.held_out = HeldOutEvaluation(run_dir, game, log, run.logger)
    run.live = live
    signals.defer()  # a signal while collectors (and a learner group's ranks) spawn is noted, and acted on right after
    run.group.start(run.learner)
    source.learner_progress(run.learner.stats.frames_played, run.learner.stats.batches_done)
    source.start()
    run.training = run.group.training_thread(run.learner, wanted_threads=lambda: run.threads.current)
    run.training.start()


def local_collectors(options: TrainOptions, cfg, device) -> int:
    """--collectors, else collectors_count: an integer, or "auto" (learner/cores.py, logged)."""
    if options.collectors is not None:
        return options.collectors
    if cfg.collectors_count != "auto":
        return cfg.collectors_count
    remote = remote_source_names(options, cfg)
    other_games_here = games_on_this_machine(options, cfg, 0)
    count, why = auto_collectors(device, os.cpu_count() or 1, other_games_here, other_sources=bool(remote), learners=options.learners)
    log(why)
    return count


def take_races(learner, source, live, training, pacing: Pacing) -> None:
    """One pass of a main thread's intake (a run's, or a learner group rank's): config edits and buffer growth, one
    race taken and stored when one comes within INTAKE_WAIT_S, the weights published, progress and pacing."""
    live.reload()
    if learner.apply_config():  # config edits, and buffer growth by frames played
        with training.paused():
            learner.grow_buffers()
    envelope = source.get(timeout_s=INTAKE_WAIT_S)
    if envelope is not None:
        learner.ingest_envelope(envelope)
        training.data_stored()
    learner.publish_pending()
    source.learner_progress(learner.stats.frames_played, learner.stats.batches_done)
    pacing.update(learner.training_backlog_batches(), live.current.max_training_backlog_batches)


def _loop(options: TrainOptions, run: _Run, signals: StopSignals) -> str:
    """The main thread: races in (ingest), weights out (publish), pacing, health, logs, saves and the held-out
    evaluation; the train steps run in the training thread, paused for what must not run beside them."""
    learner, source, live, training = run.learner, run.source, run.live, run.training
    pacing = Pacing(source, log)
    status = StatusLine(enabled=options.status_line)
    run.saves = saves = PeriodicSaves(log)
    deadline = time.perf_counter() + 60 * options.max_minutes if options.max_minutes else None
    last_aggregate = time.perf_counter()
    try:
        while not signals.requested:
            training.check()
            failure = run.group.poll(learner)  # a learner group: the other ranks' progress, or one that failed
            if failure is not None:
                run.failure = failure
                return failure
            if deadline is not None and time.perf_counter() >= deadline:
                return TIME_LIMIT
            take_races(learner, source, live, training, pacing)
            run.threads.update(source.idle_games_here())
            if run.held_out.due(learner):  # greedy races on the held-out tracks, played by a process of their own
                with training.paused():  # for the snapshot of the weights alone
                    run.held_out.start(learner)
            if run.held_out.in_progress:  # its record once the races are played; the best weights by them kept
                run.held_out.collect(learner)
            for minute in run.held_out.weights_due(learner):
                with training.paused():
                    run.held_out.keep_weights(learner, minute)
            health = source.health()
            learner.stats.collector_restarts += len(health.replaced)
            if health.exhausted:  # every producer was given up after repeated failures: nothing will come
                run.no_source_left = True
                return "no rollout source left (every collector failed repeatedly; see the lines above)"
            if time.perf_counter() - last_aggregate >= AGGREGATE_LOG_PERIOD_S:
                learner.note_sources_paused(pacing.take_paused_seconds())
                learner.note_threads(run.threads.take_mean_threads())
                learner.log_aggregates()
                figures = source.scalars()
                if figures and run.logger is not None:
                    run.logger.scalars("sources", figures, learner.stats.frames_played)
                figures = run.group.scalars()
                if figures and run.logger is not None:
                    run.logger.scalars("learner_group", figures, learner.stats.frames_played)
                last_aggregate = time.perf_counter()
            if saves.due(learner):
                with training.paused():
                    saves.save(learner, live.current.save_frequency_s)
            status.update(learner)
        return "interrupted"
    finally:
        status.clear()


def _shutdown(run: _Run, exit_reason: str) -> int:
    """Stop the collectors and write the final checkpoint; never raises. 0 when the final save is complete
    (or there was nothing to save yet), 1 when it failed."""
    what = "stopping collectors and saving" if run.learner is not None else "nothing to save yet"
    log(f"{exit_reason}: {what}")
    code = 0
    try:
        if run.training is not None:  # no step beside the final save; an error of the thread was reported by check()
            run.training.stop()
        if run.learner is not None:
            run.learner.batches.close()
        if run.source is not None:
            try:
                run.source.stop()
                for line in run.source.summary():
                    log(line)
            except Exception as e:
                log(f"stopping the collectors failed: {_describe(e)}")
        if run.held_out is not None and run.learner is not None and exit_reason == TIME_LIMIT:
            try:  # the evaluation still playing at the time limit is the run's last point of its curve
                run.held_out.finish(run.learner, FINISH_WAIT_S)
            except Exception as e:
                log(f"the last held-out evaluation failed: {_describe(e)}")
        if run.saves is not None:
            for line in run.saves.summary():
                log(line)
        if run.learner is not None:
            try:
                run.learner.log_aggregates()
            except Exception as e:
                log(f"last aggregate log failed: {_describe(e)}")
            code = final_save(run.learner)
    finally:
        run.group.close()
        if run.held_out is not None:
            try:
                run.held_out.close()
            except Exception as e:
                log(f"closing the held-out evaluation's process failed: {_describe(e)}")
        if run.logger is not None:
            try:
                run.logger.close()
            except Exception as e:
                log(f"closing the TensorBoard writer failed: {_describe(e)}")
    return code
