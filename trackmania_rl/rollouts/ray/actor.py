"""A collector actor on a Ray node (seed 000's RolloutWorker): K game processes whose actions it decides in
batches, and a sender thread (DESIGN §2, §7).

Each of the actor's K games (`ray_games_per_actor`) runs in its own process (env_worker.py: the game, its map
cycle and the race loop's game side), so that the games run in parallel on the K CPUs the actor reserves. The
actor's threads:
- the decision loop: starts the game processes and watches them; waits for whichever has something to say;
  answers all the observations that are ready with ONE batched inference (`MeanQAtFixedTaus.batch`, one network
  for the K games) and the policy version it was computed with (the game explores over the Q values itself, as
  a collector does); gives a game that asks for a race its GO (the learner's frame count for the exploration
  schedules, the config when it changed) unless paused or backed up; hands finished races to the sender; and
  restarts a game process that died or fell silent for `collector_stall_timeout_s` (its race in play is lost,
  the other games play on);
- the sender: puts each finished race in the object store as contiguous numpy arrays (race_arrays.py). At most
  `MAX_RACES_IN_FLIGHT` races are put and not yet acknowledged by the learner; when the slots are full the
  sender waits, and the games get no GO while more than K races wait for it: nothing grows without bound
  (backpressure). While the store says paused, no game starts a new race;
- the status poll: the policy store's version, pause flag, frame count and config (`StoreWeights`: the weights
  object is `ray.get` only when newer, and read as views of the node's one copy).

The learner asks for finished races with `handoff` (which waits a little for one) and acknowledges what it
took with `acknowledge`. Every (re)start of the actor is a new `incarnation`: a restarted actor starts from
the values it was created with, pulls the weights and the config again, and its predecessor's races are gone.
"""

from __future__ import annotations

import json
import os
import pickle
import queue
import selectors
import threading
import time
import traceback
import uuid
import warnings
from collections import deque

import numpy as np
import ray
import torch

from trackmania_rl.agents.acting import make_inference_network, use_acting_torch_settings
from trackmania_rl.agents.exploration import midpoint_taus
from trackmania_rl.config.values import config_from_values
from trackmania_rl.games import float_layout_for
from trackmania_rl.rollouts.race import producer_seed
from trackmania_rl.rollouts.ray.env_worker import GO, OBSERVATION, RACE, WANT_RACE, EnvWorker, ObservationLayout, Q

MAX_RACES_IN_FLIGHT = 2  # per actor: put in the object store and not yet taken by the learner
# how often an actor asks the policy store for the version, the pause flag and progress: each poll costs the actor
# ~1.5 ms of CPU (measured: its threads besides the game's took 5.0 % of a core at 10 polls/s, 3.5 % at 1/s)
STATUS_POLL_S = 0.25
STORE_CALL_TIMEOUT_S = 10.0
ACTOR_SEED_BASE = 2_000  # producer indices of actors' games start here (local collectors count from 0)
HANDOFF_WAIT_S = 1.0  # a handoff call returns at once when a race is ready, else after this
ACTOR_CONCURRENCY = 4  # handoff waits while acknowledge, stats and the measurements are answered
GAMES_CHECK_PERIOD_S = 0.5  # how often the decision loop looks for dead or silent game processes
GAME_RESTART_DELAY_S = 1.0  # after a game process ended, before its next one starts (no busy crash loop)


class _ArraysAsNetwork:
    """What `load_state_dict_from` reads (a module's `state_dict()`), over the store's numpy arrays."""

    def __init__(self, arrays: dict):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # read-only views of the object store: torch warns, we only read them
            self._tensors = {name: torch.from_numpy(array) for name, array in arrays.items()}

    def state_dict(self) -> dict:
        return self._tensors


class StoreWeights:
    """`fetch_into(copy_weights, known_version)` (the RacePlayer's weights protocol) over the policy store.

    The version is the one last polled by the actor's status thread: no call is made unless it moved. The
    arrays of the newest version are kept while the actor runs (views of the node's copy, no bytes of their
    own), so the K games of an actor pull each version once."""

    def __init__(self, store, timings):
        self.store = store
        self.timings = timings
        self.known_version = 0  # the store's, as last polled
        self._lock = threading.Lock()
        self._version = 0
        self._arrays: dict | None = None

    @property
    def version(self) -> int:
        """The version of the weights this actor holds (0: none pulled yet)."""
        return self._version

    def newest_arrays(self) -> tuple[int, dict | None]:
        with self._lock:
            if self.known_version != self._version or self._arrays is None:
                start = time.perf_counter()
                version, (ref,) = ray.get(self.store.weights.remote(), timeout=STORE_CALL_TIMEOUT_S)
                if ref is not None:
                    self._arrays = ray.get(ref, timeout=STORE_CALL_TIMEOUT_S)
                    self._version = version
                    self.timings.add("weight_pull_ms", 1000 * (time.perf_counter() - start))
            return self._version, self._arrays

    def fetch_into(self, copy_weights, known_version: int) -> int:
        if self.known_version == known_version:
            return known_version
        version, arrays = self.newest_arrays()
        if arrays is None:  # nothing published yet: the network's own initial weights are version 0
            return 0
        if version == known_version:
            return known_version
        copy_weights(_ArraysAsNetwork(arrays))
        return version


class Timings:
    """Sums and counts of the actor's pipeline timings since the last `take()`."""

    def __init__(self):
        self._lock = threading.Lock()
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}

    def add(self, name: str, value: float, count: int = 1) -> None:
        with self._lock:
            self._sums[name] = self._sums.get(name, 0.0) + value
            self._counts[name] = self._counts.get(name, 0) + count

    def take(self) -> dict[str, float]:
        """Means per occurrence (per action for the per-action figures) since the last call."""
        with self._lock:
            means = {name: self._sums[name] / max(1, self._counts[name]) for name in self._sums}
            self._sums.clear()
            self._counts.clear()
        return means


class CollectorActor:
    def __init__(self, index: int, actors_count: int, games: int, game_backend: str, store_name: str):
        use_acting_torch_settings()  # one torch thread, the collector's acting settings
        self.index = index
        self.games = games
        self.incarnation = uuid.uuid4().hex[:12]
        self.store = store = ray.get_actor(store_name)  # by name: see policy_store.py
        self.timings = Timings()
        self.weights = StoreWeights(store, self.timings)
        self.game_backend = game_backend
        # the config comes from the store, not as an argument: a restarted actor gets the current values (and
        # Ray keeps no large creation arguments around for restarts)
        self.config_version, self.config_values = ray.get(store.config.remote(), timeout=STORE_CALL_TIMEOUT_S)
        self.cfg = config_from_values(self.config_values, game_backend)
        self.paused = False
        self.frames_played = 0
        self.stopping = threading.Event()
        self.send_queue: queue.Queue = queue.Queue()  # finished races for the sender (bounded by the GO rule)
        self.outbox: deque = deque()  # refs of races put and not yet handed to the learner
        self.slots = threading.Condition()
        self.held = 0  # races received from the games and not yet put
        self.races_put = 0
        self.acknowledged = 0
        self.races_played = 0
        self.races_lost_in_play = 0  # with a game process that died mid-race
        self.errors: list[str] = []
        self._poll_once()  # the weights version, the pause flag and the config before the first race
        # one network decides for the K games
        torch.manual_seed(producer_seed(self.cfg.seed, ACTOR_SEED_BASE + index * games))
        float_layout = float_layout_for(self.cfg)
        n_actions = len(self.cfg.inputs)
        self.network = make_inference_network(self.cfg, float_layout, n_actions, jit=False)  # the acting program computes
        self.program = self.network.mean_q_at(midpoint_taus(self.cfg.iqn_k), max_batch=games)
        self.version = -1  # never fetched: the first refresh always copies
        self._refresh_weights()
        self.layout = ObservationLayout(self.network.module.image_shape, float_layout.dim, n_actions)
        self._frames = np.empty((games, *self.layout.frame_shape), np.uint8)
        self._floats = np.empty((games, float_layout.dim), np.float32)
        self._answer = bytearray(self.layout.answer_bytes)
        self._answer[0] = Q[0]
        self._answer_version, self._answer_q = self.layout.version(self._answer), self.layout.q_values(self._answer)
        self.workers = [
            EnvWorker(
                game,
                {
                    "actor": index,
                    "index": index * games + game,  # its share of the map cycle
                    "producers": actors_count * games,
                    "seed_index": ACTOR_SEED_BASE + index * games + game,  # --seed makes runs independent
                    "game_backend": game_backend,
                },
            )
            for game in range(games)
        ]
        self._selector = selectors.DefaultSelector()  # the games' connections and the wake-up pipe
        self._wake_read, self._wake_write = os.pipe()  # other threads wake the decision loop (a slot freed, resumed)
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self.threads = [threading.Thread(target=target, daemon=True) for target in (self._poll_store, self._send, self._decide_loop)]
        for thread in self.threads:
            thread.start()

    def _log(self, message: str) -> None:
        print(f"[ray actor {self.index}] {message}", flush=True)

    def _wake(self) -> None:
        try:
            os.write(self._wake_write, b"w")
        except BlockingIOError:  # already awake enough: the pipe is full of wake-ups
            pass

    # ------------------------------------------------------------------------------ threads
    def _poll_store(self) -> None:
        while not self.stopping.wait(STATUS_POLL_S):
            was_paused = self.paused
            self._poll_once()
            if was_paused and not self.paused:
                self._wake()

    def _poll_once(self) -> None:
        try:
            version, paused, frames_played, config_version = ray.get(self.store.status.remote(), timeout=STORE_CALL_TIMEOUT_S)
            self.weights.known_version = version
            self.paused, self.frames_played = paused, frames_played
            if config_version != self.config_version:
                config_version, values = ray.get(self.store.config.remote(), timeout=STORE_CALL_TIMEOUT_S)
                self.cfg = config_from_values(values, self.game_backend)
                self.config_version, self.config_values = config_version, values
        except Exception as e:  # the store restarting, a config that does not load: keep playing with what we have
            self._note_error(f"policy store: {type(e).__name__}: {e}")

    def _decide_loop(self) -> None:
        """Start the games (from this thread: Linux's parent-death signal follows the thread that started a
        process), then serve them until stopped."""
        # OpenMP's thread count is per thread, a new one starts from OMP_NUM_THREADS (Ray sets it to the actor's K
        # CPUs): without this the batched inference ran on K spinning threads, ~40x slower on busy cores
        use_acting_torch_settings()
        try:
            self._selector.register(self._wake_read, selectors.EVENT_READ, None)
            for worker in self.workers:
                self._start_game(worker)
            next_check = time.monotonic() + GAMES_CHECK_PERIOD_S
            while not self.stopping.is_set():
                observations = []
                for key, _ in self._selector.select(timeout=GAMES_CHECK_PERIOD_S):
                    if key.data is None:
                        self._drain_wake_ups()
                    else:
                        self._receive(key.data, observations)
                if observations:
                    self._decide(observations)
                self._give_races()
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + GAMES_CHECK_PERIOD_S
                    self._check_games()
        except Exception:
            # a broken decision loop would leave the actor alive and silent: end its process, Ray restarts it (a
            # bounded number of times, after which the source reports it dead)
            self._note_error("the decision loop stopped by an error, the actor exits to be restarted:\n" + traceback.format_exc())
            os._exit(1)
        finally:
            for worker in self.workers:
                worker.stop()

    def _start_game(self, worker: EnvWorker) -> None:
        worker.start(self.config_version, self.config_values)
        self._selector.register(worker.connection, selectors.EVENT_READ, worker)

    def _drain_wake_ups(self) -> None:
        try:
            while os.read(self._wake_read, 4096):
                pass
        except BlockingIOError:
            pass

    def _receive(self, worker: EnvWorker, observations: list) -> None:
        try:
            message = worker.receive()
        except (EOFError, OSError):
            self._game_ended(worker)
            return
        kind = message[:1]
        if kind == OBSERVATION:
            observations.append((worker, message))
        elif kind == WANT_RACE:
            worker.state = "idle"
            worker.wait_started = time.perf_counter()
        elif kind == RACE:
            worker.races += 1
            with self.slots:
                self.held += 1
                self.races_played += 1
            self.send_queue.put(message)
        else:
            self._game_ended(worker, f"sent an unknown message {kind!r}: killed")

    def _refresh_weights(self) -> None:
        self.version = self.weights.fetch_into(self.network.load_state_dict_from, self.version)
        self.program.prepare()  # the rewrite happens (and is timed) with the refresh

    def _decide(self, observations: list) -> None:
        """One batched inference for every observation that is ready; each game gets its Q values and the version."""
        if any(message[1] for _, message in observations):  # a game's update_network() asked for the newest weights
            self._refresh_weights()
        n = len(observations)
        for row, (_, message) in enumerate(observations):
            self._floats[row] = self.layout.floats(message)
            self._frames[row] = self.layout.frame(message)
        start = time.perf_counter()
        q_values = self.program.batch(self._frames[:n], self._floats[:n])
        self.timings.add("inference_ms", 1000 * (time.perf_counter() - start), n)
        self.timings.add("batch_size", n)
        self._answer_version[0] = self.version
        for row, (worker, _) in enumerate(observations):
            self._answer_q[:] = q_values[row]
            try:
                worker.send(self._answer)
            except OSError:
                self._game_ended(worker)

    def _give_races(self) -> None:
        """GO to the games waiting for a race, unless paused or more than K races wait for the sender."""
        for worker in self.workers:
            if worker.state != "idle" or self.paused or self.held > self.games:
                continue
            changed = worker.config_version != self.config_version
            order = {"frames_played": int(self.frames_played), "config_values": self.config_values if changed else None}
            try:
                worker.send(GO + json.dumps(order).encode())
            except OSError:
                self._game_ended(worker)
                continue
            worker.config_version = self.config_version
            worker.state = "racing"
            self.timings.add("backpressure_wait_ms", 1000 * (time.perf_counter() - worker.wait_started))

    def _check_games(self) -> None:
        """Restart the game processes that ended or fell silent; the others are left alone."""
        now = time.monotonic()
        stall_s = self.cfg.collector_stall_timeout_s
        for worker in self.workers:
            if worker.state == "stopped":
                if now >= worker.restart_at and not self.stopping.is_set():
                    self._start_game(worker)
                    self._log(f"game {worker.game} restarted (process {worker.pid}, restart {worker.restarts})")
            elif worker.exit_code() is not None:
                self._game_ended(worker)
            elif worker.state in ("starting", "racing") and now - worker.last_heard > stall_s:
                self._game_ended(worker, f"was silent for {now - worker.last_heard:.0f} s (collector_stall_timeout_s {stall_s:g}): killed")

    def _game_ended(self, worker: EnvWorker, why: str | None = None) -> None:
        """Stop a game process that ended (`why` None: say its exit code) or must end; it restarts a second later."""
        if worker.state == "stopped":
            return
        lost = worker.state == "racing"
        self._selector.unregister(worker.connection)
        worker.stop()
        why = why or f"ended (exit code {worker.exit_code()})"
        worker.restart_at = time.monotonic() + GAME_RESTART_DELAY_S
        if lost:
            self.races_lost_in_play += 1
        self._note_error(f"game {worker.game}'s process {why}" + ("; its race in play is lost" if lost else "") + "; restarting it")

    def _send(self) -> None:
        while not self.stopping.is_set():
            try:
                message = self.send_queue.get(timeout=0.5)
            except queue.Empty:
                continue
            race = pickle.loads(message[len(RACE) :])  # from our own game process (env_worker.py)
            meta = race["meta"]
            meta["actor_incarnation"] = self.incarnation
            actions = len(race["arrays"]["actions"])
            if actions:
                waited = meta.pop("decision_wait_s")
                self.timings.add("game_step_ms", 1000 * (meta["rollout_duration_s"] - waited), actions)
                self.timings.add("decision_wait_ms", 1000 * waited, actions)
            with self.slots:  # backpressure: wait for a free slot
                while self.races_put - self.acknowledged >= MAX_RACES_IN_FLIGHT and not self.stopping.is_set():
                    self.slots.wait(0.5)
            start = time.perf_counter()
            meta["put_time"] = time.time()
            ref = ray.put(race)
            self.timings.add("send_ms", 1000 * (time.perf_counter() - start))
            with self.slots:
                self.outbox.append(ref)
                self.races_put += 1
                self.held -= 1
                self.slots.notify_all()
            self._wake()

    def _note_error(self, message: str) -> None:
        if message not in self.errors:
            self.errors.append(message)
        self._log(message)

    # ------------------------------------------------------------------------------ called by the learner
    def handoff(self, wait_s: float = HANDOFF_WAIT_S) -> dict:
        """The races put since the last handoff (as refs; possibly none after `wait_s`), and who we are."""
        with self.slots:
            if not self.outbox:
                self.slots.wait(wait_s)
            races = list(self.outbox)
            self.outbox.clear()
        return {"incarnation": self.incarnation, "races": races}

    def acknowledge(self, taken: int) -> None:
        """The learner has taken (or given up on) `taken` races of this incarnation: their slots are free."""
        with self.slots:
            self.acknowledged = max(self.acknowledged, int(taken))
            self.slots.notify_all()

    def stats(self) -> dict:
        with self.slots:
            in_flight = self.races_put - self.acknowledged
        return {
            "incarnation": self.incarnation,
            "node_id": ray.get_runtime_context().get_node_id(),
            "races_played": self.races_played,
            "races_lost_in_play": self.races_lost_in_play,
            "in_flight": in_flight,
            "paused": self.paused,
            "policy_version": self.version,
            "games": [{"game": w.game, "pid": w.pid, "state": w.state, "restarts": w.restarts, "races": w.races} for w in self.workers],
            "errors": list(self.errors),
            "timings": self.timings.take(),
        }

    def hold_newest_weights(self) -> dict:
        """Measurement: pull the newest weights now (if not yet) and report how this actor holds them."""
        self._poll_once()
        version, arrays = self.weights.newest_arrays()
        views = [not array.flags.owndata and not array.flags.writeable for array in (arrays or {}).values()]
        return {"version": version, "node_id": ray.get_runtime_context().get_node_id(), "views_of_object_store": bool(views) and all(views)}

    def stop(self) -> None:
        self.stopping.set()
        self._wake()
        with self.slots:
            self.slots.notify_all()
