"""A collector actor on a Ray node: one game, played in a process the actor supervises, whose actions it decides,
and a sender thread (DESIGN §2, §7).

One actor plays one game (more games: more actors; an actor with K games in K processes deciding them in one
batched inference measured slower than K actors on CPU inference, docs/cluster.md). The game runs in its own
process (env_worker.py: the game, its map cycle and the race loop's game side): a game that crashes or hangs is
restarted without restarting the actor, and the game never waits for Ray's threads. The actor's threads:
- the decision loop: starts the game process and watches it; answers each observation with the network's Q
  values and the policy version they were computed with (the game explores over them itself, as a collector
  does); gives the game its GO for each race (the learner's frame count for the exploration schedules, the
  config when it changed) unless paused or backed up; hands finished races to the sender; and restarts the
  game process when it died or fell silent for `collector_stall_timeout_s` (its race in play is lost);
- the sender: puts each finished race in the object store as contiguous numpy arrays (race_arrays.py). At most
  `MAX_RACES_IN_FLIGHT` races are put and not yet acknowledged by the learner; when the slots are full the
  sender waits, and the game gets no GO while a race waits for it: nothing grows without bound (backpressure).
  While the store says paused, the game starts no new race;
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
GAME_CHECK_PERIOD_S = 0.5  # how often the decision loop looks for a dead or silent game process
GAME_RESTART_DELAY_S = 1.0  # after the game process ended, before the next one starts (no busy crash loop)


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
    own)."""

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
    def __init__(self, index: int, actors_count: int, game_backend: str, store_name: str):
        use_acting_torch_settings()  # one torch thread, the collector's acting settings
        self.index = index
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
        self.held = 0  # races received from the game and not yet put
        self.races_put = 0
        self.acknowledged = 0
        self.races_played = 0
        self.races_lost_in_play = 0  # with a game process that died mid-race
        self.errors: list[str] = []
        self._poll_once()  # the weights version, the pause flag and the config before the first race
        seed = producer_seed(self.cfg.seed, ACTOR_SEED_BASE + index)  # --seed makes runs independent
        torch.manual_seed(seed)
        float_layout = float_layout_for(self.cfg)
        n_actions = len(self.cfg.inputs)
        self.network = make_inference_network(self.cfg, float_layout, n_actions, jit=False)  # the acting program computes
        self.program = self.network.mean_q_at(midpoint_taus(self.cfg.iqn_k))
        self.version = -1  # never fetched: the first refresh always copies
        self._refresh_weights()
        self.layout = ObservationLayout(self.network.module.image_shape, float_layout.dim, n_actions)
        self._answer = bytearray(self.layout.answer_bytes)
        self._answer[0] = Q[0]
        self._answer_version, self._answer_q = self.layout.version(self._answer), self.layout.q_values(self._answer)
        # the game's share of the map cycle is the actor's; its seeds are the actor's
        setup = {"actor": index, "producers": actors_count, "seed": seed, "game_backend": game_backend}
        self.game = EnvWorker(setup)
        self._selector = selectors.DefaultSelector()  # the game's connection and the wake-up pipe
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
        """Start the game (from this thread: Linux's parent-death signal follows the thread that started a
        process), then serve it until stopped."""
        # OpenMP's thread count is per thread and a new one starts from OMP_NUM_THREADS: one, as the collectors
        use_acting_torch_settings()
        try:
            self._selector.register(self._wake_read, selectors.EVENT_READ, None)
            self._start_game()
            next_check = time.monotonic() + GAME_CHECK_PERIOD_S
            while not self.stopping.is_set():
                for key, _ in self._selector.select(timeout=GAME_CHECK_PERIOD_S):
                    if key.data is None:
                        self._drain_wake_ups()
                    else:
                        self._receive()
                self._give_race()
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + GAME_CHECK_PERIOD_S
                    self._check_game()
        except Exception:
            # a broken decision loop would leave the actor alive and silent: end its process, Ray restarts it (a
            # bounded number of times, after which the source reports it dead)
            self._note_error("the decision loop stopped by an error, the actor exits to be restarted:\n" + traceback.format_exc())
            os._exit(1)
        finally:
            self.game.stop()

    def _start_game(self) -> None:
        self.game.start(self.config_version, self.config_values)
        self._selector.register(self.game.connection, selectors.EVENT_READ, self.game)

    def _drain_wake_ups(self) -> None:
        try:
            while os.read(self._wake_read, 4096):
                pass
        except BlockingIOError:
            pass

    def _receive(self) -> None:
        try:
            message = self.game.receive()
        except (EOFError, OSError):
            self._game_ended()
            return
        kind = message[:1]
        if kind == OBSERVATION:
            self._decide(message)
        elif kind == WANT_RACE:
            self.game.state = "idle"
            self.game.wait_started = time.perf_counter()
        elif kind == RACE:
            self.game.races += 1
            with self.slots:
                self.held += 1
                self.races_played += 1
            self.send_queue.put(message)
        else:
            self._game_ended(f"sent an unknown message {kind!r}: killed")

    def _refresh_weights(self) -> None:
        self.version = self.weights.fetch_into(self.network.load_state_dict_from, self.version)
        self.program.prepare()  # the rewrite happens (and is timed) with the refresh

    def _decide(self, message: bytes) -> None:
        """The game's observation -> its Q values and the version of the weights that computed them."""
        if message[1]:  # the game's update_network(): the newest weights first
            self._refresh_weights()
        start = time.perf_counter()
        q_values = self.program(self.layout.frame(message), self.layout.floats(message))
        self.timings.add("inference_ms", 1000 * (time.perf_counter() - start))
        self._answer_version[0] = self.version
        self._answer_q[:] = q_values
        try:
            self.game.send(self._answer)
        except OSError:
            self._game_ended()

    def _give_race(self) -> None:
        """GO to the game when it waits for a race, unless paused or a race waits for the sender (besides the one
        the sender may hold while the slots are full: the game then plays at most one more race and waits)."""
        game = self.game
        if game.state != "idle" or self.paused or self.held > 1:
            return
        changed = game.config_version != self.config_version
        order = {"frames_played": int(self.frames_played), "config_values": self.config_values if changed else None}
        try:
            game.send(GO + json.dumps(order).encode())
        except OSError:
            self._game_ended()
            return
        game.config_version = self.config_version
        game.state = "racing"
        self.timings.add("backpressure_wait_ms", 1000 * (time.perf_counter() - game.wait_started))

    def _check_game(self) -> None:
        """Restart the game process when it ended or fell silent."""
        game, now = self.game, time.monotonic()
        stall_s = self.cfg.collector_stall_timeout_s
        if game.state == "stopped":
            if now >= game.restart_at and not self.stopping.is_set():
                self._start_game()
                self._log(f"game restarted (process {game.pid}, restart {game.restarts})")
        elif game.exit_code() is not None:
            self._game_ended()
        elif game.state in ("starting", "racing") and now - game.last_heard > stall_s:
            self._game_ended(f"was silent for {now - game.last_heard:.0f} s (collector_stall_timeout_s {stall_s:g}): killed")

    def _game_ended(self, why: str | None = None) -> None:
        """Stop the game process that ended (`why` None: say its exit code) or must end; it restarts a second later."""
        game = self.game
        if game.state == "stopped":
            return
        lost = game.state == "racing"
        self._selector.unregister(game.connection)
        game.stop()
        why = why or f"ended (exit code {game.exit_code()})"
        game.restart_at = time.monotonic() + GAME_RESTART_DELAY_S
        if lost:
            self.races_lost_in_play += 1
        self._note_error(f"the game's process {why}" + ("; its race in play is lost" if lost else "") + "; restarting it")

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
        game = self.game
        return {
            "incarnation": self.incarnation,
            "node_id": ray.get_runtime_context().get_node_id(),
            "races_played": self.races_played,
            "races_lost_in_play": self.races_lost_in_play,
            "in_flight": in_flight,
            "paused": self.paused,
            "policy_version": self.version,
            "game": {"pid": game.pid, "state": game.state, "restarts": game.restarts, "races": game.races},
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
