"""The HTTP rollout source (DESIGN §2, §7): external game clients push races to an endpoint the learner serves.

Races arrive on the server's thread, are decoded and checked there (auth, body cap, msgpack limits, dtypes and
shapes against the run's RolloutShape, known client, new sequence number, policy versions, and the contract's
own validator), and wait in a bounded queue that `get` takes from. The queue is the backpressure: 429 when
full, `paused` in every answer while it holds more than the off-policy tolerance (or while the learner's
pacing paused the sources). Weights are encoded once per published version and served by version, as typed
arrays or, when asked, as an ONNX model made from them (onnx_policy.py: not at publish time).
"""

from __future__ import annotations

import queue
import statistics
import threading
import time

import numpy as np
import torch

from trackmania_rl.agents import schedules
from trackmania_rl.config.loader import ConfigError, frame_shape
from trackmania_rl.config.values import config_to_values
from trackmania_rl.games.backend import game_backend as game_backend_named
from trackmania_rl.rollouts.contract import REWARD_KEYS, InvalidRollout, RolloutShape, require_reward_keys, validate_envelope
from trackmania_rl.rollouts.http import onnx_policy, wire
from trackmania_rl.rollouts.http.clients import ClientTable, TooManyClients
from trackmania_rl.rollouts.http.server import API_VERSION, ApiError, UvicornThread, bind, build_app, is_loopback, parse_listen
from trackmania_rl.rollouts.http.token import TOKEN_FILE, run_token
from trackmania_rl.rollouts.source import RolloutSource, SourceHealth

SOURCE_NAME = "http"
RACE_STATES_MARGIN = 3  # the start state, the finish pseudo-state, one action past the cut-off
BODY_MARGIN = 1.25  # over the longest race's bytes: msgpack framing, stats, meta
BODY_SLACK_BYTES = 64 * 1024
# per-step bytes besides the frame and the floats, at the widest dtypes allowed: zone, progress, actions,
# flags, policy version (8 each) and up to this many car-state floats
CAR_STATE_FLOATS_MAX = 64
MAX_TIMINGS_KEPT = 10_000
REFUSAL_REASONS = ("bad_request", "invalid", "stale", "repeated", "unknown_client", "too_large", "queue_full", "unauthorized")


def _wire_array(tensor) -> np.ndarray:
    """A weight tensor as a numpy array of a wire dtype (half-precision tensors widened to float32)."""
    tensor = tensor.detach().cpu()
    if tensor.is_floating_point() and tensor.dtype not in (torch.float32, torch.float64):
        tensor = tensor.float()
    return tensor.numpy()


def max_race_states(cfg) -> int:
    """The most states a race of this config can have: its overall cut-off in actions, plus the margin. An int, also
    when an action's game time is not a whole number of ms (a Gymnasium env's: Enduro's 4000/60)."""
    return int(cfg.cutoff_rollout_if_race_not_finished_within_duration_ms // cfg.ms_per_action) + RACE_STATES_MARGIN


def race_body_cap(cfg, shape: RolloutShape) -> int:
    """The body cap of POST /v1/rollouts: the longest race's frames, floats and per-step values, with margin."""
    frame_bytes = int(np.prod(shape.frame_shape))
    per_step = frame_bytes + 4 * shape.float_dim + 4 * shape.n_actions + 4 * CAR_STATE_FLOATS_MAX + 8 * 6
    return int(BODY_MARGIN * max_race_states(cfg) * per_step) + BODY_SLACK_BYTES


class HttpSource(RolloutSource):
    """`live` gives the run's current config (read at each request: live settings apply at once); `sock` is
    the bound listening socket, served from `start` on."""

    name = SOURCE_NAME

    def __init__(self, live, game_backend: str, layout, shape: RolloutShape, token: str, sock, run_name: str, log, first_producer: int = 0):
        self.live = live
        self.game_backend = game_backend
        self.layout = layout
        self.shape = shape
        self.token = token
        self.sock = sock
        self.run_name = run_name
        self.log = log
        self.fields = wire.race_fields(shape.frame_shape, shape.float_dim, shape.n_actions, game_backend_named(game_backend).race_keys)
        self.queue: queue.Queue = queue.Queue(maxsize=live.current.http_queue_size)
        self.clients = ClientTable()
        # a client's map-cycle share: producer first_producer + its slot, after the run's collectors and Ray actors
        self.first_producer = first_producer
        self._lock = threading.Lock()  # counters and the published weights, shared with the server's thread
        self._policy: tuple[int, bytes | None] = (0, None)
        self._frames_played = 0
        self._batches_done = 0
        self._paced = False  # paused by the learner's pacing
        self.received = 0
        self.received_while_paused = 0  # races that came although the answers said `paused` (clients not honouring it)
        self.refused = dict.fromkeys(REFUSAL_REASONS, 0)
        self._ingest_ms: list[float] = []
        self._window_received = 0
        self._window_refused = dict.fromkeys(REFUSAL_REASONS, 0)
        self._paused_s = 0.0
        self._paused_check = time.monotonic()
        self.weights_served = 0
        self.onnx = onnx_policy.OnnxPolicyCache(live, layout, game_backend)
        self.server: UvicornThread | None = None

    # ------------------------------------------------------------------------------ the source seam
    def start(self) -> None:
        self.server = UvicornThread(build_app(self, self.token), self.sock)
        self.server.start()

    def get(self, timeout_s: float):
        try:
            return self.queue.get(timeout=timeout_s) if timeout_s > 0 else self.queue.get_nowait()
        except queue.Empty:
            return None

    def publish(self, version: int, weights: dict) -> None:
        arrays = {name: _wire_array(tensor) for name, tensor in weights.items()}
        body = wire.encode_weights(version, arrays)  # tobytes() copies: later training cannot change it
        with self._lock:
            self._policy = (int(version), body)

    def pause(self) -> None:
        self._paced = True

    def resume(self) -> None:
        self._paced = False

    def learner_progress(self, frames_played: int, batches_done: int) -> None:
        self._frames_played, self._batches_done = int(frames_played), int(batches_done)

    def health(self) -> SourceHealth:
        cfg = self.live.current
        forgotten = self.clients.forget_silent(cfg.http_client_timeout_s)
        for client_id in forgotten:
            self.log(f"HTTP client {client_id} silent for more than {cfg.http_client_timeout_s:g} s: forgotten (it must register again)")
        registered, alive = self.clients.counts(cfg.http_client_timeout_s)
        now = time.monotonic()
        paused = self.paused()
        if paused:
            self._paused_s += now - self._paused_check
        self._paused_check = now
        return SourceHealth(self.name, registered, alive, forgotten, paused, registered, exhausted=False)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        else:
            self.sock.close()

    def scalars(self) -> dict[str, float]:
        with self._lock:
            ingest, self._ingest_ms = self._ingest_ms, []
            received, self._window_received = self._window_received, 0
            refused, self._window_refused = self._window_refused, dict.fromkeys(REFUSAL_REASONS, 0)
        registered, alive = self.clients.counts(self.live.current.http_client_timeout_s)
        figures = {
            "http/races_received": received,
            "http/queue_size": self.queue.qsize(),
            "http/paused_s": self._paused_s,
            "http/clients": registered,
            "http/clients_alive": alive,
            "http/ingest_ms_median": statistics.median(ingest) if ingest else None,
        }
        self._paused_s = 0.0
        figures.update({f"http/races_refused_{reason}": count for reason, count in refused.items()})
        return figures

    def summary(self) -> list[str]:
        refused = ", ".join(f"{reason} {count}" for reason, count in self.refused.items() if count) or "none"
        lines = [f"HTTP source: {self.received} race(s) received, refused: {refused}; weights served {self.weights_served} time(s)"]
        lines += [f"HTTP client {c.client_id} ({c.name}): {c.races_accepted} race(s)" for c in self.clients.snapshot()]
        return lines

    # -------------------------------------------------------------------------- the API's hub (server)
    def paused(self) -> bool:
        return self._paced or self.queue.qsize() > self.live.current.http_off_policy_tolerance

    def count_refusal(self, reason: str) -> None:
        with self._lock:
            self.refused[reason] += 1
            self._window_refused[reason] += 1

    def _refuse(self, reason: str, status: int, detail: str) -> ApiError:
        self.count_refusal(reason)
        return ApiError(status, detail)

    def race_body_cap(self) -> int:
        return race_body_cap(self.live.current, self.shape)

    def contract(self) -> dict:
        cfg = self.live.current
        return {
            "api_version": API_VERSION,
            "game": self.game_backend,
            "actions": [dict(a) for a in cfg.inputs],
            "n_actions": self.shape.n_actions,
            "frame_shape": list(self.shape.frame_shape),
            "race_fields": wire.fields_in_words(self.fields),  # what this game's races carry
            "frame_dtype": "uint8",
            "float_dim": self.shape.float_dim,
            "float_layout": [{"name": s.name, "size": s.size} for s in self.layout.segments],
            "ms_per_action": cfg.ms_per_action,
            "reward_keys": [key for setting, key in REWARD_KEYS if getattr(cfg, setting) != 0],  # required by the rewards
            "max_states": max_race_states(cfg),
            "max_body_bytes": self.race_body_cap(),
            "max_policy_lag": cfg.max_policy_lag,
            "off_policy_tolerance": cfg.http_off_policy_tolerance,
            "queue_capacity": self.queue.maxsize,
            "heartbeat_interval_s": cfg.http_heartbeat_interval_s,
            "client_timeout_s": cfg.http_client_timeout_s,
            "update_inference_network_every_n_actions": cfg.update_inference_network_every_n_actions,
            "policy_formats": ["arrays", onnx_policy.FORMAT] if onnx_policy.available() else ["arrays"],
        }

    def register(self, name: str, game: str, protocol_version: int) -> dict:
        if protocol_version != API_VERSION:
            raise ApiError(422, f"`protocol_version` {protocol_version} is not served: this server speaks version {API_VERSION}")
        if game != self.game_backend:
            raise ApiError(422, f"`game` {game!r} is not this run's game ({self.game_backend!r})")
        try:
            client = self.clients.register(name, game)
        except TooManyClients as e:
            raise ApiError(429, f"{e}: retry later", {"Retry-After": "10"}) from None
        cfg = self.live.current
        self.log(f"HTTP client {client.client_id} ({name}) registered")
        return {
            "client_id": client.client_id,
            "run": self.run_name,
            "policy_version": self._policy[0],
            "contract": self.contract(),
            # everything a client built on this project's code needs to play exactly like a local collector
            "settings": config_to_values(cfg),
            "inputs": {"inputs": [dict(a) for a in cfg.inputs], **cfg.input_settings},
            "status": self.status(),
            "map_cycle_share": {"producer": self.first_producer + client.slot, "producers": self.first_producer + self.clients.max_clients},
        }

    def policy_body(self, have: int) -> tuple[int, bytes | None]:
        """(current version, its msgpack body); the body is None when nothing is published or `have` is current."""
        with self._lock:
            version, body = self._policy
            if body is None or have == version:
                return version, None
            self.weights_served += 1
        return version, body

    def onnx_policy_body(self, have: int) -> tuple[int, bytes | None]:
        """As `policy_body`, the body being the ONNX answer (onnx_policy.py). Slow when it exports (the first
        request): call it off the event loop. ApiError 501 when the learner has no onnx extra."""
        with self._lock:
            version, weights_body = self._policy
        if weights_body is None or have == version:
            return version, None
        try:
            body = self.onnx.body(version, weights_body)
        except onnx_policy.OnnxUnavailable as e:
            raise ApiError(501, str(e)) from None
        with self._lock:
            self.weights_served += 1
        return version, body

    def status(self) -> dict:
        cfg = self.live.current
        explore = schedules.values_at(cfg, self._frames_played)
        with self._lock:
            dropped = dict(self.refused)
            received, while_paused = self.received, self.received_while_paused
        return {
            "policy_version": self._policy[0],
            "queue_size": self.queue.qsize(),
            "queue_capacity": self.queue.maxsize,
            "paused": self.paused(),
            "learner_step": self._batches_done,
            "frames_played": self._frames_played,
            "races_received": received,
            "races_received_while_paused": while_paused,
            "races_dropped": dropped,
            "exploration": {
                "epsilon": explore["epsilon"],
                "epsilon_boltzmann": explore["epsilon_boltzmann"],
                "tau_epsilon_boltzmann": cfg.tau_epsilon_boltzmann,
            },
        }

    def heartbeat(self, client_id: str) -> dict:
        if self.clients.touch(client_id) is None:
            raise self._refuse("unknown_client", 404, f"unknown client id {client_id!r}: register again")
        return self.status()

    def disconnect(self, client_id: str) -> dict:
        if not self.clients.remove(client_id):
            raise self._refuse("unknown_client", 404, f"unknown client id {client_id!r}")
        self.log(f"HTTP client {client_id} disconnected")
        return {"disconnected": client_id}

    def submit(self, body: bytes) -> dict:
        """One POST /v1/rollouts body: queued (the 202 answer), or ApiError with the status and the field."""
        start = time.perf_counter()
        cfg = self.live.current
        try:
            unpacked = wire.unpack(body, max_bin_len=len(body))
            client_id, seq = wire.decode_race_header(unpacked)
        except wire.WireError as e:
            raise self._refuse("bad_request" if e.status == 400 else "invalid", e.status, str(e)) from None
        if self.clients.touch(client_id) is None:
            raise self._refuse("unknown_client", 404, f"unknown client id {client_id!r}: register again")
        if not self.clients.is_new_seq(client_id, seq):
            raise self._refuse("repeated", 409, f"`seq` {seq} was already accepted from this client (sequence numbers must increase)")
        try:
            race = wire.decode_race(unpacked, self.fields, max_race_states(cfg))
            meta = {**race.meta, "source": SOURCE_NAME, "collector": client_id}
            envelope = validate_envelope((race.rollout_results, race.end_race_stats, meta), self.shape)
            require_reward_keys(race.rollout_results, cfg)  # the learner would refuse it: the client is told now
        except (wire.WireError, InvalidRollout) as e:
            raise self._refuse("invalid", 422, str(e)) from None
        versions = race.rollout_results["policy_version"]
        current = self._policy[0]
        if versions and max(versions) > current:
            raise self._refuse("invalid", 422, f"`race.policy_version` {max(versions)} is newer than the current version {current}")
        lag = current - min(versions) if versions else 0
        if lag > cfg.max_policy_lag:
            detail = f"too stale: played with version {min(versions)}, {lag} behind {current} (max_policy_lag {cfg.max_policy_lag})"
            raise self._refuse("stale", 409, detail)
        meta["put_time"] = time.time()
        was_paused = self.paused()
        try:
            self.queue.put_nowait(envelope)
        except queue.Full:
            self.count_refusal("queue_full")
            raise ApiError(429, "the queue is full: back off and send this race again", {"Retry-After": "1"}) from None
        self.clients.accept_seq(client_id, seq)
        with self._lock:
            self.received += 1
            self.received_while_paused += was_paused
            self._window_received += 1
            if len(self._ingest_ms) < MAX_TIMINGS_KEPT:  # bounded even if nobody reads the window
                self._ingest_ms.append(1000 * (time.perf_counter() - start))
        return {
            "accepted": seq,
            "queue_size": self.queue.qsize(),
            "paused": self.paused(),
            "policy_version": current,
            "frames_played": self._frames_played,
        }


def exposure_warning(host: str) -> str | None:
    """The warning printed when the endpoint listens beyond this machine; None on a loopback address."""
    if is_loopback(host):
        return None
    return (
        f"WARNING: the HTTP endpoint listens on {host}, not a loopback address: anyone who can reach it and holds the "
        "token can feed races to this run, and plain HTTP carries the token and the races unencrypted. Expose it only "
        "behind a TLS reverse proxy and a firewall (docs/http-api.md, Security)."
    )


def make_http_source(context, listen: str, first_producer: int = 0) -> HttpSource:
    """The run's HTTP source: its token (created, kept or replaced), its socket bound to exactly `listen`
    (HOST:PORT, the address the learner resolved from --listen or http_listen). ConfigError for an address that
    cannot be served. Its clients' map-cycle shares come after the run's `first_producer` other producers."""
    cfg = context.live.current
    try:
        host, port = parse_listen(listen)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if cfg.http_off_policy_tolerance >= cfg.http_queue_size:
        context.log(
            f"http_off_policy_tolerance ({cfg.http_off_policy_tolerance}) >= http_queue_size ({cfg.http_queue_size}): "
            "clients will meet a full queue (429) before they are told to pause"
        )
    warning = exposure_warning(host)
    if warning:
        context.log(warning)
    replace = bool(getattr(context.options, "new_token", False))
    existed = (context.run_dir / TOKEN_FILE).exists()
    token, token_path, created = run_token(context.run_dir, new=replace)
    how = "created" if created else "kept from earlier sessions"
    if replace and existed:
        how = "replaced (--new-token): clients need the new file"
    context.log(f"HTTP token: {token_path} ({how}; give it to clients as --token-file)")
    try:
        sock = bind(host, port)
    except OSError as e:
        raise ConfigError(f"http_listen {listen}: cannot listen there: {e}") from None
    context.log(f"HTTP endpoint for game clients: http://{listen.rsplit(':', 1)[0]}:{sock.getsockname()[1]}/v1 (API v{API_VERSION})")
    n_actions = len(cfg.inputs)
    shape = RolloutShape(frame_shape(cfg), context.layout.dim, n_actions)
    name = context.run_dir.name
    return HttpSource(context.live, context.game_backend, context.layout, shape, token, sock, name, context.log, first_producer)
