"""The Ray rollout source: collector actors over a Ray cluster, the learner as the driver (DESIGN §2, §7).

`make_ray_source(context)` connects to the cluster (`--ray auto` starts a local one on loopback, see
cluster.py; an address joins a running one), checks that the cluster has a CPU for each actor (each plays one
game) and starts the policy store. `start()` creates the actors (one CPU each, spread over the nodes, restarted
by Ray when their process dies).

The learner's side of the pipeline: a receiver thread of the source's own talks to the actors, so that the learner's
intake thread never makes a Ray call for a race (each costs it ~1 ms on 2 busy cores, ~3 per race):
- each actor has one `handoff` call outstanding, answered with the races it sent (packed, in the answer itself:
  an object of the learner's, in the object store of the actor's node); the receiver waits (`ray.wait`) on those
  calls, takes the races of a ready answer with one `ray.get` and queues them. `get` (the learner's intake) waits on
  that queue within its timeout, turns a race back into the contract's envelope and counts it taken. Once an
  actor's races are all taken, the receiver asks its next handoff, carrying the count taken (the actor's slots are
  free again: at most 2 in flight per actor) and the learner's status (weights version, pause flag, frame count, config
  version: what a playing actor would otherwise poll the store for). Per race that is one get and one call on the
  receiver, and its waits (one per answer, more while it looks again for a take it waits on). An answer lost with
  its node (read after its node left) is counted as a lost race;
- `publish` converts the weights to numpy once and puts them once; the policy store hands the ref to the
  actors, which pull it only when newer;
- `pause`/`resume` set the store's flag, `learner_progress` its frame count and, after a live edit, the
  config values the actors play with; the next handoffs carry the same (a parked game asks the store).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, ObjectLostError, RayActorError, RayError

from trackmania_rl.config.loader import ConfigError
from trackmania_rl.config.values import config_to_values
from trackmania_rl.rollouts.contract import POLICY_VERSION
from trackmania_rl.rollouts.packed_race import packed_nbytes, unpack_race
from trackmania_rl.rollouts.ray import cluster
from trackmania_rl.rollouts.ray.actor import ACTOR_CONCURRENCY, HANDOFF_WAIT_S, SOURCE_NAME, CollectorActor
from trackmania_rl.rollouts.ray.policy_store import start_policy_store
from trackmania_rl.rollouts.source import RolloutSource, SourceHealth

ACTOR_MAX_RESTARTS = 20  # restarts of one actor by Ray before it is left dead
HEALTH_PERIOD_S = 2.0  # how often the actor table is read (one call to the cluster's control store)
PROGRESS_PERIOD_S = 1.0  # how often the learner's frame count is sent to the policy store
RETRY_HANDOFF_S = 1.0  # after a failed handoff (actor restarting or dead), before asking again
STATS_TIMEOUT_S = 5.0
GET_TIMEOUT_S = 10.0  # a race reported ready is local: this only bounds a pathological case
# how often the receiver, waiting on other actors' answers, looks again for an actor whose races were all taken (its
# next handoff is then asked: its second slot plays meanwhile); with no answer to wait on it is woken by the take
RECEIVER_POLL_S = 0.02
MB = 2**20


@dataclass
class ActorSlot:
    index: int
    handle: object
    incarnation: str | None = None
    restarts: int = 0  # restarts seen
    failed_before_answer: bool = False  # a handoff failed (the actor died) before the first answer
    taken: int = 0  # races of this incarnation taken by the learner (acknowledged to the actor by its next handoff)
    races: int = 0  # races taken from this slot over the run
    lost: int = 0
    handoff: object = None  # the outstanding handoff call's ref (the receiver's alone)
    held: int = 0  # races of its answers not yet taken: its next handoff is asked once they are
    retry_at: float = 0.0  # the receiver's alone
    state: str = "PENDING_CREATION"  # as the cluster's actor table says
    node_ip: str = ""
    ray_restarts: int = 0  # as the cluster's actor table counts them


@dataclass
class PendingRace:
    packed: tuple  # (packed rollout_results, end_race_stats, meta), as the actor sent it
    slot: ActorSlot
    incarnation: str
    get_ms: float  # its share of the receiver's `ray.get` of the answer it came in


class RaySource(RolloutSource):
    name = SOURCE_NAME

    def __init__(
        self,
        actors_count: int,
        live,
        game_backend: str,
        log,
        local_cluster=None,
        owns_connection=False,
        first_producer: int = 0,
        producers=None,
    ):
        self.clock = time.perf_counter  # what `get` measures its timeout with (tests give it a clock of their own)
        self.actors_count = actors_count
        # the actors' places among the run's producers, for their shares of the map cycle (CollectorActor)
        self.first_producer = first_producer
        self.producers = actors_count if producers is None else producers
        self.live = live
        self.game_backend = game_backend
        self.log = log
        self.local_cluster = local_cluster  # the node `--ray auto` started, stopped with the source
        self.owns_connection = owns_connection  # this source connected the process to the cluster: it disconnects
        self.weights_ref = None  # the last published weights object
        self._cfg = live.current
        self.store, self.store_name = start_policy_store(config_to_values(self._cfg))
        self.slots: list[ActorSlot] = []
        # races received and not yet taken, and the slots' counts, shared by the receiver and the learner's intake
        self._lock = threading.Condition()
        self.pending: deque[PendingRace] = deque()
        self._receiver: threading.Thread | None = None
        self._receiver_failure: BaseException | None = None
        self._closing = threading.Event()
        self._all_taken = threading.Event()  # set by a take that leaves an actor holding none: the receiver asks again
        self.version = 0
        self.paused = False
        self.frames_played = 0
        self.config_version = 1  # the store's count of config values sent (it starts with the run's own)
        self._progress_sent_at = 0.0
        self._health_at = 0.0
        self._health: SourceHealth | None = None
        self._restarts_seen = 0
        self._store_restarts = 0  # the policy store's restarts by Ray, as the last health check read them
        self._window = {"ingest_ms": [], "receive_ms": [], "delivery_s": [], "policy_lag": [], "race_mb": []}
        self._lost_in_window = 0
        self.lost = 0
        self.stopped = False
        self.last_take_ms: dict[str, float] = {}  # the last race's take on the learner's thread, by stage (benchmarks/ray.py)
        self.last_receive_ms: dict[str, float] = {}  # and what it cost the receiver: its share of the get, the last ask
        self._last_ask_ms = 0.0

    # ------------------------------------------------------------------------------------------ start
    def start(self) -> None:
        remote = ray.remote(CollectorActor).options(
            num_cpus=1,  # its one game
            max_restarts=ACTOR_MAX_RESTARTS,
            max_task_retries=0,
            max_concurrency=ACTOR_CONCURRENCY,
            scheduling_strategy="SPREAD",
        )
        for index in range(self.actors_count):
            handle = remote.remote(index, self.actors_count, self.game_backend, self.store_name, self.first_producer, self.producers)
            self.slots.append(ActorSlot(index, handle))
        self._receiver = threading.Thread(target=self._receive_loop, name="ray-receiver", daemon=True)
        self._receiver.start()
        self.log(f"Ray: {self.actors_count} collector actor(s), one game each, on {_nodes_summary()}")

    # ------------------------------------------------------------------------------------------ races in
    def get(self, timeout_s: float):
        deadline = self.clock() + max(0.0, timeout_s)
        while True:
            if self._receiver_failure is not None:
                raise RuntimeError(f"the Ray source's receiver thread failed: {self._receiver_failure!r}") from self._receiver_failure
            with self._lock:
                race = self.pending.popleft() if self.pending else None
            if race is not None:
                return self._take(race)
            remaining = deadline - self.clock()
            if remaining <= 0:
                return None
            with self._lock:
                if not self.pending and self._receiver_failure is None:
                    self._lock.wait(remaining)

    # ------------------------------------------------------------------------------------------ the receiver thread
    def _receive_loop(self) -> None:
        try:
            while not self._closing.is_set():
                self._all_taken.clear()
                waits_for_take, retry_in = self._ask_free_slots()
                calls = {slot.handoff: slot for slot in self.slots if slot.handoff is not None}
                if not calls:  # every actor waiting for its races to be taken (woken by the take), restarting or dead
                    self._all_taken.wait(retry_in)
                    continue
                timeout = min(retry_in, RECEIVER_POLL_S) if waits_for_take else retry_in
                ready, _ = ray.wait(list(calls), num_returns=1, timeout=timeout, fetch_local=True)
                for ref in ready:
                    self._receive(calls[ref])
        except BaseException as e:  # the learner's next get raises it: a run must not starve silently
            if not self._closing.is_set():
                self._receiver_failure = e
                with self._lock:
                    self._lock.notify_all()

    def _ask_free_slots(self) -> tuple[bool, float]:
        """Ask the next handoff of each actor whose races are all taken; whether an actor's races still wait to be
        taken, and the seconds until the next retry of a failed handoff is due (at most HANDOFF_WAIT_S)."""
        now, waits_for_take, retry_in = time.perf_counter(), False, HANDOFF_WAIT_S
        for slot in self.slots:
            if slot.handoff is not None or self.stopped:
                continue
            with self._lock:
                held, taken, incarnation = slot.held, slot.taken, slot.incarnation
            if held:
                waits_for_take = True
            elif now < slot.retry_at:
                retry_in = min(retry_in, slot.retry_at - now)
            else:
                start = time.perf_counter()
                status = (self.version, self.paused, self.frames_played, self.config_version)
                slot.handoff = slot.handle.handoff.remote(HANDOFF_WAIT_S, taken, incarnation, status)
                self._last_ask_ms = 1000 * (time.perf_counter() - start)
        return waits_for_take, max(retry_in, 0.0)

    def _receive(self, slot: ActorSlot) -> None:
        now = time.perf_counter()
        try:
            reply = ray.get(slot.handoff, timeout=GET_TIMEOUT_S)
        except (RayActorError, RayError) as e:  # it died (Ray restarts it, or it is dead for good) or is unreachable
            slot.handoff, slot.retry_at = None, now + RETRY_HANDOFF_S  # for now: ask again later
            died = isinstance(e, RayActorError) and not isinstance(e, ActorUnavailableError)
            slot.failed_before_answer = slot.failed_before_answer or (slot.incarnation is None and died)
            if isinstance(e, (ObjectLostError, GetTimeoutError)):  # an answer that held races (one without lives here)
                self._count_lost(slot, type(e).__name__)
            return
        get_ms = 1000 * (time.perf_counter() - now)
        slot.handoff = None
        races, incarnation = reply["races"], reply["incarnation"]
        get_ms /= max(1, len(races))
        restarts = self._restarts_if_new(slot, incarnation)  # before the lock: it may ask the cluster's table
        with self._lock:
            if slot.incarnation != incarnation:
                slot.incarnation, slot.taken = incarnation, 0
            self.pending.extend(PendingRace(packed, slot, incarnation, get_ms) for packed in races)
            slot.held += len(races)
            self._window["receive_ms"].extend([get_ms] * len(races))
            self._lock.notify_all()
        if restarts > slot.restarts:
            slot.restarts = restarts
            self.log(f"Ray actor {slot.index} was restarted ({slot.restarts} time(s)); it pulls the weights again")

    def _count_lost(self, slot: ActorSlot, why: str) -> None:
        with self._lock:
            slot.lost += 1
            self.lost += 1
            self._lost_in_window += 1
        self.log(f"Ray actor {slot.index}: a race was lost with its node ({why}); the run goes on")

    def _restarts_if_new(self, slot: ActorSlot, incarnation: str) -> int:
        """The actor's restarts as this answer from `incarnation` shows them."""
        if slot.incarnation == incarnation:
            return slot.restarts
        if slot.incarnation is not None:
            return slot.restarts + 1
        # the first answer: an incarnation that died before answering is known only to the cluster's table
        return max(int(slot.failed_before_answer), _restarts_in_table(slot))

    def _take(self, race: PendingRace):
        slot = race.slot
        start = time.perf_counter()
        packed, end_race_stats, meta = race.packed
        envelope = (unpack_race(packed), end_race_stats, meta)
        unpacked = time.perf_counter()
        with self._lock:
            slot.held -= 1  # once none is held, the receiver asks the actor's next handoff, with the count taken
            if race.incarnation == slot.incarnation:
                slot.taken += 1
            if not slot.held:
                self._all_taken.set()
            self.last_take_ms = {"unpack": 1000 * (unpacked - start)}
            # the ask: the receiver's last handoff call, to any actor (each costs about the same)
            self.last_receive_ms = {"object_store_get": race.get_ms, "ask": self._last_ask_ms}
            self._window["ingest_ms"].append(1000 * (unpacked - start))
        meta["collector"] = slot.index
        self._window["delivery_s"].append(max(0.0, time.time() - meta.get("put_time", time.time())))
        versions = envelope[0][POLICY_VERSION]
        if versions:
            self._window["policy_lag"].append(self.version - min(versions))
        self._window["race_mb"].append(packed_nbytes(packed) / MB)
        slot.races += 1
        return envelope

    # ------------------------------------------------------------------------------------------ to actors
    def publish(self, version: int, weights: dict) -> None:
        arrays = {name: tensor.detach().cpu().numpy() for name, tensor in weights.items()}
        self.weights_ref = ray.put(arrays)  # the one copy every actor reads (per node)
        self.store.publish.remote(int(version), [self.weights_ref])
        self.version = int(version)

    def pause(self) -> None:
        if not self.paused:
            self.paused = True
            self.store.set_paused.remote(True)

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            self.store.set_paused.remote(False)

    def learner_progress(self, frames_played: int, batches_done: int) -> None:
        now = time.perf_counter()
        self.frames_played = int(frames_played)  # the next handoffs carry it
        if now - self._progress_sent_at >= PROGRESS_PERIOD_S:
            self._progress_sent_at = now
            self.store.set_frames_played.remote(int(frames_played))
        if self.live.current is not self._cfg:  # a live edit: the actors play with the new values
            self._cfg = self.live.current
            self.config_version += 1
            self.store.set_config.remote(config_to_values(self._cfg), self.config_version)

    def _restore_store(self) -> None:
        """The policy store restarted (its process died) with its constructor's state: send it the learner's, so that
        an actor starting or parked meanwhile follows this run, not its first minute (these calls reach the store in
        the order sent, before any later one of this process)."""
        self.log("Ray: the policy store restarted; sending it the weights, pause flag, frame count and config again")
        if self.weights_ref is not None:
            self.store.publish.remote(self.version, [self.weights_ref])
        self.store.set_paused.remote(self.paused)
        self.store.set_frames_played.remote(self.frames_played)
        self.store.set_config.remote(config_to_values(self._cfg), self.config_version)

    # ------------------------------------------------------------------------------------------ health
    def health(self) -> SourceHealth:
        now = time.perf_counter()
        if self._health is None or now - self._health_at >= HEALTH_PERIOD_S:
            self._health_at = now
            self._health = self._check()
            return self._health
        last = self._health  # between checks: the last report, nothing newly replaced
        return SourceHealth(self.name, last.producers, last.alive, [], self.paused, last.active, last.exhausted)

    def _check(self) -> SourceHealth:
        try:
            table = ray._private.state.actors()
        except Exception as e:  # the control store briefly unreachable: report the last known state
            self.log(f"Ray: could not read the actor table ({type(e).__name__}: {e})")
            table = {}
        store = table.get(self.store._actor_id.hex())  # restored once alive again: no call waits on its restart
        if store is not None and store.get("State") == "ALIVE" and int(store.get("NumRestarts", 0)) > self._store_restarts:
            self._store_restarts = int(store.get("NumRestarts", 0))
            self._restore_store()
        replaced = []
        for slot in self.slots:
            entry = table.get(slot.handle._actor_id.hex())
            if entry is None:
                continue
            restarts = int(entry.get("NumRestarts", 0))
            if restarts > slot.ray_restarts:
                replaced.append(slot.index)
                slot.ray_restarts = restarts
            slot.state = entry.get("State", slot.state)
            slot.node_ip = (entry.get("Address") or {}).get("IPAddress", "")
        alive = sum(1 for slot in self.slots if slot.state == "ALIVE")
        dead = sum(1 for slot in self.slots if slot.state == "DEAD")
        active = len(self.slots) - dead
        return SourceHealth(self.name, len(self.slots), alive, replaced, self.paused, active, exhausted=bool(self.slots) and active == 0)

    # ------------------------------------------------------------------------------------------ figures
    def scalars(self) -> dict[str, float]:
        figures: dict[str, float] = {}
        prefix = self.name
        calls = {slot.index: slot.handle.stats.remote() for slot in self.slots}
        in_flight_total = 0
        for index, call in calls.items():
            try:
                stats = ray.get(call, timeout=STATS_TIMEOUT_S)
            except (RayError, GetTimeoutError):
                continue
            in_flight_total += stats["in_flight"]
            figures[f"{prefix}/actor{index}/in_flight"] = stats["in_flight"]
            for name, value in stats["timings"].items():
                figures[f"{prefix}/actor{index}/{name}"] = round(value, 4)
        with self._lock:
            window, self._window = self._window, {key: [] for key in self._window}
            lost_in_window, self._lost_in_window = self._lost_in_window, 0
        for name, values in window.items():
            if values:
                figures[f"{prefix}/{name}_mean"] = round(sum(values) / len(values), 4)
        health = self._health or self._check()
        figures[f"{prefix}/races_taken"] = len(window["ingest_ms"])
        figures[f"{prefix}/races_lost"] = lost_in_window
        figures[f"{prefix}/races_in_flight"] = in_flight_total  # the actors count the races received and not yet taken
        figures[f"{prefix}/actors_alive"] = health.alive
        figures[f"{prefix}/actors_restarted"] = sum(slot.restarts for slot in self.slots)
        return figures

    def summary(self) -> list[str]:
        lines = [
            f"Ray actor {slot.index} ({slot.state.lower()}, node {slot.node_ip or '?'}): {slot.races} race(s) taken, "
            f"{slot.lost} lost, restarted {slot.restarts} time(s)"
            for slot in self.slots
        ]
        lines.append(f"Ray: {sum(s.races for s in self.slots)} race(s) taken, {self.lost} lost with their actor or node")
        return lines

    # ------------------------------------------------------------------------------------------ stop
    def stop(self) -> None:
        """Stop the receiver, kill the actors and the store, leave the cluster, stop the local cluster we started."""
        if self.stopped:
            return
        self.stopped = True
        self._closing.set()
        self._all_taken.set()
        for slot in self.slots:  # first: the receiver's outstanding handoffs then fail at once
            try:
                ray.kill(slot.handle, no_restart=True)
            except Exception:
                pass
        if self._receiver is not None:  # out of its Ray calls before the connection closes
            self._receiver.join(timeout=HANDOFF_WAIT_S + GET_TIMEOUT_S + 1.0)
            if self._receiver.is_alive():
                self.log("Ray: the source's receiver thread did not stop within its calls' timeouts; leaving the cluster anyway")
        try:
            ray.kill(self.store, no_restart=True)
        except Exception:
            pass
        self.pending.clear()
        self.weights_ref = None
        try:
            if self.owns_connection:
                ray.shutdown()
        finally:
            if self.local_cluster is not None:
                self.local_cluster.stop()


def _nodes_summary() -> str:
    nodes = [node for node in ray.nodes() if node["Alive"]]
    cpus = sum(node["Resources"].get("CPU", 0) for node in nodes)
    return f"{len(nodes)} node(s), {cpus:g} CPU(s)"


def make_ray_source(context, local_producers: int = 0) -> RaySource:
    """The source for `--ray auto|ADDRESS` and `--ray-actors N` (or ray_address / ray_actors), connected, not started;
    its actors come after the run's `local_producers` local collectors in the map cycle's shares. ConfigError (nothing
    left running) when the cluster cannot be reached or has fewer CPUs than actors (a count below 1 is refused
    before: learner/sources.check_source_settings)."""
    cfg, options = context.live.current, context.options
    address = options.ray if getattr(options, "ray", None) is not None else cfg.ray_address
    actors = options.ray_actors if getattr(options, "ray_actors", None) is not None else cfg.ray_actors
    local_cluster = None
    connected_here = not ray.is_initialized()
    try:
        if address == "auto":
            cpus = os.cpu_count() or 1
            context.log(f"starting a local Ray cluster on {cluster.HEAD_IP} ({cpus} CPUs, object store {cfg.ray_object_store_mb} MB)")
            local_cluster = cluster.LocalNode.head(num_cpus=cpus, object_store_bytes=cfg.ray_object_store_mb * MB)
            cluster.use_token_file(local_cluster.token_path)
            address = local_cluster.address
        if connected_here:
            cluster.connect(address)
        total = ray.cluster_resources().get("CPU", 0)
        if actors > total:
            raise ConfigError(
                f"--ray-actors {actors}: the Ray cluster at {address} has {total:g} CPU(s), one per actor: ask for at most {int(total)}"
            )
        producers = local_producers + actors
        return RaySource(actors, context.live, context.game_backend, context.log, local_cluster, connected_here, local_producers, producers)
    except BaseException as e:
        if connected_here and ray.is_initialized():
            ray.shutdown()
        if local_cluster is not None:
            local_cluster.stop()
        if isinstance(e, (ConfigError, KeyboardInterrupt)):
            raise
        if isinstance(e, (ConnectionError, RayError, cluster.ClusterError, ValueError, RuntimeError)):
            raise ConfigError(f"Ray cluster {address!r} (ray_address / --ray): {type(e).__name__}: {e}") from None
        raise


def _restarts_in_table(slot: ActorSlot) -> int:
    """The actor's restarts as the cluster's actor table counts them (0 when it cannot be read)."""
    try:
        entry = ray._private.state.actors(actor_id=slot.handle._actor_id.hex())
    except Exception:  # the control store briefly unreachable
        return 0
    return int((entry or {}).get("NumRestarts", 0))
