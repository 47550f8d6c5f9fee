"""A collector process: one game instance and one inference network, playing races forever (DESIGN §2).

Each race is put on the collector's own bounded queue as an envelope (rollout_results, end_race_stats,
meta; rollouts/contract.py). The collector reloads the shared network every
`update_inference_network_every_n_actions` actions and records, per action, the policy version it acted
with. While the source is paused it starts no new race, and says so in its byte of `idle_flags` (the
learner then takes its core). A collector (re)started while the config file is
broken starts with the last config that loaded (config/live.py, `last_good_path`).
"""

from __future__ import annotations

import multiprocessing
import queue
import random
import signal
import time
import traceback

import numpy as np
import torch

from trackmania_rl.agents.acting import use_acting_torch_settings
from trackmania_rl.config.live import LiveConfig, last_good_path_for
from trackmania_rl.monitoring.status_line import print_line
from trackmania_rl.rollouts.packed_race import pack_race
from trackmania_rl.rollouts.race import RacePlayer, producer_seed

SOURCE_NAME = "local"  # meta["source"] of every race a collector process plays


def parent_alive() -> bool:
    parent = multiprocessing.parent_process()
    return parent is None or parent.is_alive()


def die_with_parent() -> None:
    """Linux: have the kernel kill this process if the learner dies, even by SIGKILL (no orphan
    collectors). Elsewhere the collector notices a dead parent between races and while waiting to put."""
    try:
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def collector_main(
    index,
    rollout_queue,
    heartbeat,
    stop_event,
    config_path,
    game_backend,
    collectors_count,
    shared_network,
    frames_played,
    pause_event,
    idle_flags=None,
    first_producer=0,
):
    """Process entry point. Never returns while the run goes on; exceptions other than game crashes end
    the process with a traceback, and the learner's pool restarts it. `index` is the collector's slot in its
    pool; it plays as producer `first_producer + index` of `collectors_count` (a learner group's ranks each run
    a pool: their collectors play distinct seeds and shares of the map cycle)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the learner's to handle; it stops us
    die_with_parent()
    if not parent_alive():  # the learner died before the death signal was armed
        return

    def set_idle(idle: bool) -> None:
        if idle_flags is not None:
            idle_flags[index] = int(idle)

    set_idle(False)  # a restarted collector loads on its core: not idle, whatever its predecessor said
    use_acting_torch_settings()  # one thread, batch-1 convolutions without oneDNN (faster; this process only)

    producer = first_producer + index

    def log(message: str) -> None:
        print_line(f"[collector {producer}] {message}")

    # A restart while the run's config file is broken starts from the last text that loaded (kept beside
    # the file by every collector): no crash loop, and the learner keeps its previous config too (DESIGN §6).
    live = LiveConfig(config_path, game_backend=game_backend, log=log, last_good_path=last_good_path_for(config_path))
    seed = producer_seed(live.current.seed, producer)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    player = RacePlayer(live.current, game_backend, shared_network, producer, collectors_count, SOURCE_NAME, log)
    log(f"ready: {type(player.game).__name__}, policy version {player.policy.version}, jit {live.current.use_jit}")

    def beat() -> None:
        heartbeat.value = time.time()

    try:
        while not stop_event.is_set() and parent_alive():
            beat()
            if pause_event.is_set():  # paced by the learner: alive, but no new race
                set_idle(True)
                time.sleep(0.05)
                continue
            set_idle(False)
            if live.reload():
                player.update_config(live.current)
            envelope = player.play(frames_played.value, on_action=beat)
            if envelope is None:  # the game crashed: logged, the race dropped
                continue
            envelope.meta["put_time"] = time.time()
            rollout_results, end_race_stats, meta = envelope
            item = (pack_race(rollout_results), end_race_stats, meta)  # the learner unpickles arrays, not items
            # A bounded queue: wait for the learner, but keep showing signs of life and honour stop requests.
            while True:
                try:
                    rollout_queue.put(item, timeout=0.5)
                    break
                except queue.Full:
                    beat()
                    if stop_event.is_set() or not parent_alive():
                        return
            player.handed_off()
    except Exception:
        log("stopped by an error:\n" + traceback.format_exc())
        raise
    finally:
        set_idle(False)
        # A rollout still in the queue's pipe must not hold the exit: nobody may read it any more.
        rollout_queue.cancel_join_thread()
        player.close()
