"""A rank k > 0 of a learner group: a local process (spawn) or a Ray actor's method, `run_rank(spec)`.

Its life: join the group (learner_group/rendezvous.py), take the start state from rank 0 (start_state.py), then do
what train_loop.py does for one learner, with its own share: its local collectors play (as producers first_producer...
of the run's total), it takes and stores their races in its own replay shard, publishes the group's weights to them
(every rank holds the same weights: nothing crosses the network for its collectors), paces them, and trains in its
GroupTrainingThread. It has no run folder: its config comes from rank 0 (written to a file of its own, which its
collectors reload), its shard goes to rank 0 at each save, and its figures go to the group's store every
FIGURES_PERIOD_S (rank 0 logs them). It gives a sign of life every HEARTBEAT_PERIOD_S.

It ends when rank 0 stops the group (after sending its final shard: exit 0), or on a failure of its own (exit 1,
the reason in the store for rank 0 to name). It ignores Ctrl-C (rank 0 stops it) and dies with rank 0.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path

import numpy as np

from trackmania_rl.config.live import LiveConfig
from trackmania_rl.config.schema import SETTINGS
from trackmania_rl.config.values import config_from_values
from trackmania_rl.device import choose_device
from trackmania_rl.games import float_layout_for
from trackmania_rl.learner.allocator import keep_freed_memory_for_reuse
from trackmania_rl.learner.checkpoint import BUFFER, BUFFER_TEST, OPTIMIZER, WEIGHTS_ONLINE, WEIGHTS_TARGET
from trackmania_rl.learner.cores import LearnerThreads, keep_main_thread_single, set_switch_interval
from trackmania_rl.learner.run_stats import RunStats
from trackmania_rl.learner.sources import Pacing, SourceContext, local_source
from trackmania_rl.learner.train_loop import take_races
from trackmania_rl.learner_group.gradients import make_gradient_exchange
from trackmania_rl.learner_group.rank_learner import RankLearner
from trackmania_rl.learner_group.rendezvous import GroupConnection, LearnerGroupError, connect_store
from trackmania_rl.learner_group.shards import reset_rank_counters, send_shard
from trackmania_rl.learner_group.start_state import receive_start_state
from trackmania_rl.learner_group.training_thread import GroupTrainingThread
from trackmania_rl.monitoring.status_line import print_line
from trackmania_rl.rollouts.local.collector import die_with_parent
from trackmania_rl.serialization import atomic_write_bytes

HEARTBEAT_PERIOD_S = 1.0
FIGURES_PERIOD_S = 30.0
CONFIG_FILE = "config_of_rank.py"


def joined_key(rank: int) -> str:
    return f"joined/{rank}"


def ready_key(rank: int) -> str:
    return f"ready/{rank}"


def failed_key(rank: int) -> str:
    return f"failed/{rank}"


def alive_key(rank: int) -> str:
    return f"alive/{rank}"


def figures_key(rank: int) -> str:
    return f"figures/{rank}"


CLOSE_KEY = "close"


def config_file_text(cfg) -> str:
    """A config file with `cfg`'s values (the rank's collectors and its LiveConfig read it)."""
    return "# written by the learner group from rank 0's config: edit rank 0's run config instead\n" + "".join(
        f"{name} = {getattr(cfg, name)!r}\n" for name in SETTINGS
    )


def rank_figures(learner, elapsed_s: float) -> dict:
    """A rank's figures of the window that ends now (rank 0 logs them as learner_group/rank<k>/...), then a new window."""
    window, times = learner.window, learner.window_time
    elapsed_s = max(1e-9, elapsed_s)
    figures = {
        "races": learner.stats.races,
        "frames_stored_this_session": learner.own_frames,
        "buffer_size": len(learner.buffer),
        "buffer_test_size": len(learner.buffer_test),
        "transitions_learned_per_s": len(window["loss"]) * learner.cfg.batch_size / elapsed_s,
        "training_percent": 100 * (times["training"] + times["testing"]) / elapsed_s,
        "waiting_percent": 100 * times["waiting"] / elapsed_s,
    }
    for name in ("loss", "loss_test", "ingest_ms", "policy_lag_versions"):
        if window[name]:
            figures[f"{name}_mean"] = float(np.mean(window[name]))
    learner.log_aggregates()  # no logger on this rank: starts the next window
    return figures


def run_rank(spec: dict) -> int:
    """Rank spec["rank"] until rank 0 stops the group: 0, or 1 after a failure (its reason stored for rank 0)."""
    rank = spec["rank"]
    keep_main_thread_single()  # before any torch work: the training thread alone takes more cores

    def log(message: str) -> None:
        print_line(f"[rank {rank}] {message}")

    workdir = Path(tempfile.mkdtemp(prefix=f"tmrl_rank{rank}_", dir=spec.get("workdir_parent")))  # its config, its shards
    store = None
    try:
        store = connect_store(spec["store_host"], spec["store_port"], spec["ranks"], spec["timeout_s"])
        store.set(joined_key(rank), "1")
        return _serve(spec, store, workdir, log)
    except Exception as e:
        reason = f"{type(e).__name__}: {e}"
        log(f"stopped: {reason}\n{traceback.format_exc()}")
        if store is not None:
            try:
                store.set(failed_key(rank), reason[:2000])
            except Exception:
                pass
        return 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _serve(spec: dict, store, workdir: Path, log) -> int:
    rank, ranks = spec["rank"], spec["ranks"]
    device = choose_device(spec["device"])
    connection = GroupConnection.join(store, rank, ranks, spec["bind_host"], spec["timeout_s"], device)
    header, state, shards = receive_start_state(connection.control, workdir, lambda h: len(h["inputs"]["inputs"]))
    game_backend = header["game_backend"]
    cfg = config_from_values(header["config"], game_backend, source="rank 0's config", inputs=header["inputs"])
    config_path = workdir / CONFIG_FILE
    atomic_write_bytes(config_file_text(cfg).encode(), config_path)
    live = LiveConfig(config_path, game_backend=game_backend, log=log)
    layout = float_layout_for(live.current, game_backend)
    options = types.SimpleNamespace(ray=None, listen=None, ray_actors=0)
    context = SourceContext(options, live, config_path, game_backend, layout, workdir, log)
    source = local_source(context, header["collectors"], header["first_producer"], header["producers"])
    log(keep_freed_memory_for_reuse())
    log(set_switch_interval(device))
    learner = RankLearner(live, layout, device, workdir / "run", rank=rank, ranks=ranks, source=source, log=log, resume=False)
    stats = RunStats.from_json(header["stats"])
    reset_rank_counters(stats)
    saved = {"stats": stats, WEIGHTS_ONLINE: state["online"], WEIGHTS_TARGET: state["target"], OPTIMIZER: state["optimizer"]}
    learner._apply_checkpoint(Path("(rank 0's start state)"), {**saved, BUFFER: shards[BUFFER], BUFFER_TEST: shards[BUFFER_TEST]}, [])
    learner.settings.frames = learner.stats.frames_played
    learner.publish()
    exchange = learner.cfg.learners_gradient_exchange
    learner.trainer.gradient_exchange = make_gradient_exchange(exchange, connection.gradients, ranks, learner.online.parameters())
    log(
        f"pid {os.getpid()}: {header['collectors']} local collector(s), buffer {len(learner.buffer)} + test "
        f"{len(learner.buffer_test)} transitions, {learner.stats.batches_done} batches, device {device}"
    )
    threads = LearnerThreads(header["cores"] or os.cpu_count() or 1, header["collectors"])  # None: a node of its own
    source.start()
    training = GroupTrainingThread(learner, connection, wanted_threads=lambda: threads.current, log=log)
    training.start()
    store.set(ready_key(rank), "1")
    try:
        _loop(learner, source, live, training, threads, store, rank, connection, workdir, config_path, log)
        source.stop()
        for line in source.summary():
            log(line)
        source = None
        send_shard(connection.control, learner, workdir)  # for rank 0's final checkpoint
        _wait_for_close(store, spec["timeout_s"])
        return 0
    finally:
        training.stop()
        learner.batches.close()
        if source is not None:
            source.stop()


def _loop(learner, source, live, training, threads, store, rank, connection, workdir, config_path, log) -> None:
    """Until the group's agreed stop; raises on this rank's failure (its training thread's, or no collector left)."""
    pacing = Pacing(source, log)
    shards_sent = 0
    beats, last_beat = 0, 0.0
    last_figures = time.perf_counter()
    while True:
        training.check()
        if training.failure is not None:
            raise training.failure
        if training.stop_agreed.is_set():
            return
        if training.save_number > shards_sent:  # rank 0 saves: the group is paused, nobody steps
            shards_sent = training.save_number
            send_shard(connection.control, learner, workdir)
        if training.new_config_values is not None:  # rank 0's edit: the collectors reload this file
            values, training.new_config_values = training.new_config_values, None
            cfg = config_from_values(values, learner.cfg.game_backend, source="rank 0's config", inputs=learner.cfg.inputs_file())
            atomic_write_bytes(config_file_text(cfg).encode(), config_path)
        learner.stats.frames_played += training.take_frames_of_others()
        take_races(learner, source, live, training, pacing)
        threads.update(source.idle_games_here())
        health = source.health()
        learner.stats.collector_restarts += len(health.replaced)
        if health.exhausted:
            raise LearnerGroupError(f"rank {rank}: no collector left (every one failed repeatedly)")
        now = time.perf_counter()
        if now - last_beat >= HEARTBEAT_PERIOD_S:
            beats, last_beat = beats + 1, now
            store.set(alive_key(rank), str(beats))
        if now - last_figures >= FIGURES_PERIOD_S:
            learner.note_sources_paused(pacing.take_paused_seconds())
            store.set(figures_key(rank), json.dumps(rank_figures(learner, now - last_figures)))
            last_figures = now


def _wait_for_close(store, timeout_s: float) -> None:
    """Until rank 0 has saved and closes the group (or is gone)."""
    deadline = time.monotonic() + max(timeout_s, 60.0)
    while time.monotonic() < deadline:
        try:
            if store.check([CLOSE_KEY]):
                return
        except Exception:
            return
        time.sleep(0.2)


def rank_process(spec: dict) -> None:
    """Entry point of a local rank process (spawn)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole terminal: rank 0 stops the group
    die_with_parent()
    sys.exit(run_rank(spec))
