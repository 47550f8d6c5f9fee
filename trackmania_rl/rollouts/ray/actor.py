"""A collector actor on a Ray node: one game (a thread) playing races, and a sender thread (DESIGN §2, §7).

One actor plays one game: more games are more actors, each with one CPU (K games in one actor, as threads or as
processes deciding in one batched inference, measured slower than K actors: docs/cluster.md). The game is a
`RacePlayer` (rollouts/race.py), as in a local collector process; its weights come from the policy store
(`StoreWeights`: the weights object is `ray.get` only when the version the learner last gave is newer than ours,
and read as views of the node's one copy). A finished race goes to the sender thread, which packs its
per-step lists into contiguous numpy arrays (rollouts/packed_race.py) and leaves it in the outbox. At most
`MAX_RACES_IN_FLIGHT` races are sent and not yet acknowledged by the learner; when the slots are full the sender
waits, and the game waits for the sender: nothing grows without bound (backpressure). While the store says paused,
the game starts no new race.

The learner asks for finished races with `handoff` (which waits a little for one), whose answer holds the races
themselves: an object of the learner's, so one `ray.get` takes the races (no ref of ours to wait on and get one by
one), and they outlive this actor. On the nodes this project starts the answer comes back inside the reply
(cluster.INLINE_RETURN_BYTES), not through the node's object store. Each handoff also acknowledges
the races the learner took since its previous one (no call of its own per race: each call costs the learner and
this actor's interpreter ~0.3 ms), and the learner's status: the weights version, the pause flag, its frame count
and the config version. So a playing actor makes no call of its own (it polled the store 4 times a second, ~1.5 ms
of its CPU each); only a parked game asks the store, to see the pause lifted without waiting for a handoff. Every
(re)start of the actor is a new `incarnation`: a restarted actor starts from the values it was created with, pulls
the weights and the config again, and its predecessor's outbox is gone.
"""

from __future__ import annotations

import os
import queue
import random
import threading
import time
import traceback
import uuid
import warnings
from collections import deque

import numpy as np
import ray
import torch

from trackmania_rl.agents.acting import use_acting_torch_settings
from trackmania_rl.config.values import config_from_values
from trackmania_rl.rollouts.packed_race import pack_race
from trackmania_rl.rollouts.race import RacePlayer, producer_seed

SOURCE_NAME = "ray"  # meta["source"] of every race an actor plays
MAX_RACES_IN_FLIGHT = 2  # per actor: sent (in the outbox or handed off) and not yet taken by the learner
# how often a parked game (paused by the learner) asks the policy store for its status; a playing actor gets it with
# each handoff instead (a poll costs the actor ~1.5 ms of CPU)
STATUS_POLL_S = 0.25
PAUSED_SLEEP_S = 0.05
STORE_CALL_TIMEOUT_S = 10.0
ACTOR_SEED_BASE = 2_000  # producer indices of actors start here (local collectors count from 0)
HANDOFF_WAIT_S = 1.0  # a handoff call returns at once when a race is ready, else after this
ACTOR_CONCURRENCY = 4  # handoff waits while stats and the measurements are answered


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

    The version is the one the learner last gave (a handoff's status, a parked game's poll): no call is made unless
    it moved. The arrays of the newest version are kept while the actor runs (views of the node's copy, no bytes of
    their own)."""

    def __init__(self, store, timings):
        self.store = store
        self.timings = timings
        self.known_version = 0  # the learner's, as last heard
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


class _TimedPolicy:
    """The player's policy, its decisions timed (inference, exploration included)."""

    def __init__(self, policy, timings: Timings):
        self._policy = policy
        self._timings = timings
        self.seconds = 0.0

    def __getattr__(self, name):
        return getattr(self._policy, name)

    def __call__(self, frame, state_float):
        start = time.perf_counter()
        result = self._policy(frame, state_float)
        self.seconds += time.perf_counter() - start
        return result

    def update_network(self) -> None:
        self._policy.update_network()


class CollectorActor:
    def __init__(self, index: int, actors_count: int, game_backend: str, store_name: str, first_producer: int, producers: int):
        """Actor `index` of `actors_count`; in the run's map cycle, producer `first_producer + index` of `producers`
        (RaySource's), so that the run's local collectors (producers 0...) and its actors play different shares of
        the tracks."""
        use_acting_torch_settings()  # one torch thread, the collector's acting settings
        self.index = index
        self.incarnation = uuid.uuid4().hex[:12]
        self.store = store = ray.get_actor(store_name)  # by name: see policy_store.py
        self.timings = Timings()
        self.weights = StoreWeights(store, self.timings)
        self.game_backend = game_backend
        # the config comes from the store, not as an argument: a restarted actor gets the current values (and
        # Ray keeps no large creation arguments around for restarts)
        self.config_version, values = ray.get(store.config.remote(), timeout=STORE_CALL_TIMEOUT_S)
        self.cfg = config_from_values(values, game_backend)
        self.paused = False
        self.frames_played = 0
        self.stopping = threading.Event()
        self.send_queue: queue.Queue = queue.Queue(maxsize=1)  # the game waits here while the sender is full
        self.outbox: deque = deque()  # races packed and not yet handed to the learner
        self.slots = threading.Condition()
        self.races_sent = 0
        self.acknowledged = 0
        self.races_played = 0
        self.parked = 0  # read-only, for stats(): the game's pause checks in a row that started no race (0: playing)
        self.waiting_for_sender = False  # read-only, for stats(): a finished race waits for room in the send queue
        self.errors: list[str] = []
        self.store_polls = 0  # read-only, for stats(): status calls this actor made to the store
        self._poll_once()  # the weights version, the pause flag and the config before the first race
        seed = producer_seed(self.cfg.seed, ACTOR_SEED_BASE + index)  # --seed makes runs independent
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        self.player = RacePlayer(self.cfg, game_backend, self.weights, first_producer + index, producers, SOURCE_NAME, self._log)
        self.player.policy = _TimedPolicy(self.player.policy, self.timings)
        self.threads = [threading.Thread(target=target, daemon=True) for target in (self._send, self._play)]
        for thread in self.threads:
            thread.start()

    def _log(self, message: str) -> None:
        print(f"[ray actor {self.index}] {message}", flush=True)

    # ------------------------------------------------------------------------------ threads
    def _poll_once(self) -> None:
        self.store_polls += 1
        try:
            self._follow(ray.get(self.store.status.remote(), timeout=STORE_CALL_TIMEOUT_S))
        except Exception as e:  # the store restarting: keep playing with what we have
            self._note_error(f"policy store: {type(e).__name__}: {e}")

    def _follow(self, status) -> None:
        """Take the learner's status (weights version, paused, frames played, config version), from a handoff or the
        store; a newer config is asked of the store."""
        version, paused, frames_played, config_version = status
        self.weights.known_version = int(version)
        self.paused, self.frames_played = bool(paused), int(frames_played)
        if config_version != self.config_version:
            try:
                config_version, values = ray.get(self.store.config.remote(), timeout=STORE_CALL_TIMEOUT_S)
                self.cfg = config_from_values(values, self.game_backend)
                self.config_version = config_version
            except Exception as e:  # the store restarting, a config that does not load: keep playing with what we have
                self._note_error(f"policy store: {type(e).__name__}: {e}")

    def _play(self) -> None:
        use_acting_torch_settings()  # torch's thread count is per thread too: this one acts, on one
        player = self.player
        polled_at = 0.0
        try:
            while not self.stopping.is_set():
                if self.paused:  # paced by the learner: alive, but no new race; the idle game asks the store itself
                    self.parked += 1
                    time.sleep(PAUSED_SLEEP_S)
                    if time.monotonic() - polled_at >= STATUS_POLL_S:
                        polled_at = time.monotonic()
                        self._poll_once()
                    continue
                self.parked = 0
                if player.cfg is not self.cfg:
                    player.update_config(self.cfg)
                policy = player.policy
                policy.seconds = 0.0
                envelope = player.play(self.frames_played)
                if envelope is None:  # the game crashed: logged by the player, the race dropped
                    continue
                self.races_played += 1
                actions = len(envelope.rollout_results["actions"])
                meta = envelope.meta
                game_s = meta["rollout_duration_s"] - policy.seconds
                if actions:
                    self.timings.add("inference_ms", 1000 * policy.seconds, actions)
                    self.timings.add("game_step_ms", 1000 * game_s, actions)
                meta["actor_incarnation"] = self.incarnation
                wait_start = time.perf_counter()
                while not self.stopping.is_set():
                    try:
                        self.send_queue.put(envelope, timeout=0.5)
                        break
                    except queue.Full:
                        self.waiting_for_sender = True
                self.waiting_for_sender = False
                self.timings.add("backpressure_wait_ms", 1000 * (time.perf_counter() - wait_start))
                player.handed_off()
        except Exception:
            # a broken game would leave the actor alive and silent: end its process, Ray restarts it (a bounded
            # number of times, after which the source reports it dead)
            self._note_error("a game stopped by an error, the actor exits to be restarted:\n" + traceback.format_exc())
            os._exit(1)

    def _send(self) -> None:
        while not self.stopping.is_set():
            try:
                envelope = self.send_queue.get(timeout=0.5)
            except queue.Empty:
                continue
            with self.slots:  # backpressure: wait for a free slot
                while self.races_sent - self.acknowledged >= MAX_RACES_IN_FLIGHT and not self.stopping.is_set():
                    self.slots.wait(0.5)
            start = time.perf_counter()
            envelope.meta["put_time"] = time.time()
            rollout_results, end_race_stats, meta = envelope
            packed = (pack_race(rollout_results), end_race_stats, meta)
            self.timings.add("send_ms", 1000 * (time.perf_counter() - start))
            with self.slots:
                self.outbox.append(packed)
                self.races_sent += 1
                self.slots.notify_all()

    def _note_error(self, message: str) -> None:
        if message not in self.errors:
            self.errors.append(message)
            self._log(message)

    # ------------------------------------------------------------------------------ called by the learner
    def handoff(self, wait_s: float = HANDOFF_WAIT_S, taken: int = 0, incarnation: str | None = None, status=None) -> dict:
        """The races sent since the last handoff (packed envelopes; possibly none after `wait_s`), and who we are.
        `taken`: the races of `incarnation` the learner has taken so far, whose slots are free if that is us (a count
        meant for our predecessor says nothing about our races). `status`: the learner's (see `_follow`), or None."""
        if status is not None:
            self._follow(status)
        with self.slots:
            if incarnation == self.incarnation:
                self.acknowledged = max(self.acknowledged, int(taken))
                self.slots.notify_all()
            if not self.outbox:
                self.slots.wait(wait_s)
            races = list(self.outbox)
            self.outbox.clear()
        return {"incarnation": self.incarnation, "races": races}

    def stats(self) -> dict:
        with self.slots:
            in_flight = self.races_sent - self.acknowledged
        return {
            "incarnation": self.incarnation,
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "races_played": self.races_played,
            "in_flight": in_flight,
            "paused": self.paused,
            # how many times in a row the game found the pause set and started no race: > 0 only between races (the
            # race played before is counted in races_played, then sent or on its way to the sender); 0 while playing
            "parked": self.parked,
            # the game holds a finished race the full sender has no room for: it plays nothing until the learner
            # takes a race (backpressure), and its races_played cannot change meanwhile
            "waiting_for_sender": self.waiting_for_sender,
            "policy_version": self.weights.version,
            "store_polls": self.store_polls,
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
        with self.slots:
            self.slots.notify_all()
