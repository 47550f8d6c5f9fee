"""The reference game client of the HTTP API (scripts/play_remote.py): the run's game (`game`, a backend's name)
played by this project's `RacePlayer`, races pushed to a learner's endpoint, weights pulled by version
(docs/http-api.md).

One client = one game and one registration. The main thread plays and sends races; a background thread
pulls weights (GET /v1/policy?have=V: 304 while current) and sends heartbeats, so acting never waits on
the network. A race is sent again with back-off on 429, 503 and network errors (the same sequence number:
a race the server did take is never stored twice); on 404 (the server restarted, or forgot a silent client)
the client registers again. Before each race it waits while the server says `paused`.
Only msgpack and the standard library speak HTTP here: no FastAPI needed on a client.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
import urllib.parse
from collections.abc import Callable

import torch

from trackmania_rl.agents.iqn import make_network
from trackmania_rl.config.loader import frame_shape
from trackmania_rl.config.values import config_from_values
from trackmania_rl.games import float_layout_for
from trackmania_rl.games.backend import game_backend
from trackmania_rl.rollouts.http import wire
from trackmania_rl.rollouts.race import RacePlayer

PROTOCOL_VERSION = 1
GAME = "carracing"  # the game a client plays unless told another (its RacePlayer's backend; play_remote.py --game)
SOURCE_NAME = "http"
REQUEST_TIMEOUT_S = 30.0
BACKOFF_S = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
SEND_GIVE_UP_S = 300.0  # a race not taken within this long is dropped (it would be too stale anyway)
POLICY_POLL_S = 0.25
PAUSE_POLL_S = 0.2


class Unauthorized(RuntimeError):
    """401: a wrong token; retrying cannot help."""


class ServerGone(ConnectionError):
    """No answer (connection refused, reset, timeout): back off and try again."""


class Api:
    """One keep-alive connection to the server (one per thread: http.client is not thread-safe)."""

    def __init__(self, url: str, token: str):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--server {url}: give http://HOST:PORT or https://HOST[:PORT]")
        self.scheme, self.host, self.port = parts.scheme, parts.hostname, parts.port
        self.prefix = parts.path.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"}
        self.conn = None

    def _connection(self):
        if self.conn is None:
            cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
            self.conn = cls(self.host, self.port, timeout=REQUEST_TIMEOUT_S)
        return self.conn

    def request(self, method: str, path: str, body: bytes | None = None, content_type: str | None = None) -> tuple[int, dict, bytes]:
        headers = dict(self.headers)
        if content_type:
            headers["Content-Type"] = content_type
        try:
            conn = self._connection()
            conn.request(method, self.prefix + path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
            if response.getheader("connection", "").lower() == "close":
                self.close()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise ServerGone(f"{type(e).__name__}: {e}") from None
        if response.status == 401:
            raise Unauthorized(f"{method} {path}: 401 {data[:200]!r}: check --token-file against the run's save/<run>/http_token")
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data

    def json(self, method: str, path: str, payload: dict | None = None) -> tuple[int, dict]:
        body = json.dumps(payload).encode() if payload is not None else None
        status, _, data = self.request(method, path, body, "application/json" if body is not None else None)
        try:
            return status, json.loads(data) if data else {}
        except ValueError:
            return status, {"detail": data[:200].decode(errors="replace")}

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class RemoteWeights:
    """The `weights` of a RacePlayer (`fetch_into(load_fn, have_version) -> version`) fed by a background
    thread that pulls the server's weights by version and sends heartbeats."""

    def __init__(self, api: Api, network: torch.nn.Module, client, log: Callable[[str], None]):
        self.api = api
        self.network = network  # the uncompiled module the acting network copies from
        self.client = client
        self.log = log
        self._lock = threading.Lock()
        self._pending: tuple[int, dict] | None = None  # downloaded, not yet copied into the network
        self.version = -1  # the version downloaded last
        self.pulls = 0
        self.not_modified = 0
        self.stop_event = threading.Event()
        self._thread = threading.Thread(target=self._run, name="weights-and-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wait_first(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.version < 0 and time.monotonic() < deadline and not self.stop_event.is_set():
            self.pull_once()
            if self.version < 0:
                time.sleep(0.2)
        return self.version >= 0

    def pull_once(self) -> None:
        status, headers, body = self.api.request("GET", f"/v1/policy?have={self.version}")
        if status == 304:
            self.not_modified += 1
            return
        if status != 200:
            return  # 503: nothing published yet
        version, arrays = wire.decode_weights(body, max_bin_len=len(body))
        with self._lock:
            self._pending = (version, arrays)
            self.version = version
        self.pulls += 1

    def _run(self) -> None:
        next_beat = 0.0
        while not self.stop_event.wait(POLICY_POLL_S):
            try:
                self.pull_once()
                if time.monotonic() >= next_beat:
                    self.client.heartbeat(self.api)
                    next_beat = time.monotonic() + self.client.heartbeat_interval_s
            except Unauthorized as e:
                self.log(str(e))
                return
            except (ServerGone, wire.WireError) as e:
                self.client.note_server_trouble(e)

    def fetch_into(self, load_fn, have_version: int) -> int:
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return have_version
        version, arrays = pending
        with torch.no_grad():
            own = self.network.state_dict()
            missing = set(own) - set(arrays)
            if missing:
                raise KeyError(f"the server's weights lack {sorted(missing)[:3]}: this client's network does not match the run")
            for name, tensor in own.items():
                tensor.copy_(torch.from_numpy(arrays[name]).reshape(tensor.shape))
        load_fn(self.network)
        return version

    def stop(self) -> None:
        self.stop_event.set()
        self._thread.join(REQUEST_TIMEOUT_S + 1)


class RemoteClient:
    """One registration and one game. `run(max_races, stop)` plays and sends races until `stop` is set."""

    def __init__(
        self, url: str, token: str, name: str, index: int = 0, games: int = 1, log: Callable[[str], None] = print, game: str = GAME
    ):
        self.url, self.token, self.name, self.game = url, token, name, game
        self.index, self.games = index, games
        self.log = log
        self.api = Api(url, token)
        self.client_id: str | None = None
        self.seq = 0
        self.heartbeat_interval_s = 5.0
        self.paused = False
        self.frames_played = 0
        self.contract: dict = {}
        self.reregister = threading.Event()
        self.counts = {"sent": 0, "retries": 0, "dropped": 0, "registrations": 0, "paused_waits": 0, "pause_s": 0.0, "actions": 0}
        self.player: RacePlayer | None = None
        self.weights: RemoteWeights | None = None

    # ------------------------------------------------------------------------------ registration
    def register(self, stop: threading.Event) -> dict:
        """Register, retrying with back-off while the server is away."""
        attempt = 0
        while not stop.is_set():
            try:
                request = {"name": self.name, "game": self.game, "protocol_version": PROTOCOL_VERSION}
                status, answer = self.api.json("POST", "/v1/register", request)
            except ServerGone as e:
                self._back_off(attempt, f"register: {e}", stop)
                attempt += 1
                continue
            if status == 200:
                self.client_id = answer["client_id"]
                self.seq = 0
                self.contract = answer["contract"]
                self.heartbeat_interval_s = float(self.contract["heartbeat_interval_s"])
                self._note_status(answer["status"])
                self.counts["registrations"] += 1
                self.reregister.clear()
                self.log(f"registered as {self.client_id} on run {answer['run']} (policy version {answer['policy_version']})")
                return answer
            if status in (429, 503):
                self._back_off(attempt, f"register: {status}", stop)
                attempt += 1
                continue
            raise RuntimeError(f"register refused: {status} {answer.get('detail')}")
        raise KeyboardInterrupt

    def heartbeat(self, api: Api) -> None:
        if self.client_id is None or self.reregister.is_set():
            return
        status, answer = api.json("POST", "/v1/heartbeat", {"client_id": self.client_id})
        if status == 404:
            self.reregister.set()
        elif status == 200:
            self._note_status(answer)

    def note_server_trouble(self, error: Exception) -> None:
        pass  # the main thread finds out and backs off when it next sends

    def _note_status(self, answer: dict) -> None:
        self.paused = bool(answer.get("paused", False))
        self.frames_played = int(answer.get("frames_played", self.frames_played))

    def _back_off(self, attempt: int, why: str, stop: threading.Event) -> None:
        delay = BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)] * (0.5 + random.random())  # jitter: clients do not retry in step
        if attempt in (0, len(BACKOFF_S)):
            self.log(f"{why}: retrying in {delay:.1f} s")
        stop.wait(delay)

    # ----------------------------------------------------------------------------------- playing
    def setup(self, stop: threading.Event) -> None:
        answer = self.register(stop)
        contract = answer["contract"]
        cfg = config_from_values(answer["settings"], game_backend=contract["game"], source="the server's settings", inputs=answer["inputs"])
        layout = float_layout_for(cfg, cfg.game_backend)
        if list(frame_shape(cfg)) != contract["frame_shape"] or layout.dim != contract["float_dim"]:
            ours = f"frames {cfg.H_downsized}x{cfg.W_downsized} and {layout.dim} floats"
            raise RuntimeError(f"this client's game gives {ours}; the run wants {contract['frame_shape']} and {contract['float_dim']}")
        race_keys = game_backend(cfg.game_backend).race_keys  # the optional fields this game's races carry
        self.fields = wire.race_fields(tuple(contract["frame_shape"]), contract["float_dim"], contract["n_actions"], race_keys)
        network = make_network(cfg, layout, len(cfg.inputs), "cpu")
        self.weights = RemoteWeights(Api(self.url, self.token), network, self, self.log)
        if not self.weights.wait_first(120.0):
            raise RuntimeError("no weights from the server within 120 s")
        # the server's share of the map cycle (no two clients in step); a server without one: this machine's games'
        share = answer.get("map_cycle_share") or {"producer": self.index, "producers": self.games}
        producer, producers = int(share["producer"]), int(share["producers"])
        self.player = RacePlayer(cfg, cfg.game_backend, self.weights, producer, producers, SOURCE_NAME, self.log)
        self.weights.start()

    def wait_while_paused(self, stop: threading.Event) -> None:
        if not self.paused:
            return
        self.counts["paused_waits"] += 1
        start = time.monotonic()
        while self.paused and not stop.is_set():
            stop.wait(PAUSE_POLL_S)
            try:
                status, answer = self.api.json("GET", "/v1/status")
                if status == 200:
                    self._note_status(answer)
            except ServerGone:
                pass
        self.counts["pause_s"] += time.monotonic() - start

    def send(self, envelope, stop: threading.Event) -> bool:
        """POST one race until it is taken (True) or refused for good (False)."""
        rollout_results, end_race_stats, meta = envelope
        deadline = time.monotonic() + SEND_GIVE_UP_S
        attempt = 0
        body = None
        while not stop.is_set() and time.monotonic() < deadline:
            if self.reregister.is_set() or self.client_id is None:
                self.register(stop)
                body = None
            if body is None:
                body = wire.encode_race(self.client_id, self.seq, rollout_results, end_race_stats, meta, self.fields)
            try:
                status, _, data = self.api.request("POST", "/v1/rollouts", body, "application/msgpack")
            except ServerGone as e:
                self._back_off(attempt, f"sending a race: {e}", stop)
                attempt += 1
                self.counts["retries"] += 1
                continue
            if status == 202:
                self.seq += 1
                self._note_status(json.loads(data))
                self.counts["sent"] += 1
                return True
            if status in (429, 503):
                self.counts["retries"] += 1
                self.paused = True  # a full queue: wait for room before playing on
                self._back_off(attempt, f"sending a race: {status}", stop)
                attempt += 1
                continue
            if status == 404:
                self.reregister.set()
                continue
            detail = data[:300].decode(errors="replace")
            self.log(f"race refused ({status}): {detail}; dropped")
            if status == 409 and "already accepted" in detail:
                self.seq += 1  # ours was taken before an answer got lost
            self.counts["dropped"] += 1
            return False
        self.counts["dropped"] += 1
        return False

    def run(self, max_races: int | None, stop: threading.Event) -> dict:
        self.setup(stop)
        races = 0
        try:
            while not stop.is_set() and (max_races is None or races < max_races):
                self.wait_while_paused(stop)
                if stop.is_set():
                    break
                envelope = self.player.play(self.frames_played)
                if envelope is None:
                    continue
                self.counts["actions"] += len(envelope.rollout_results["actions"])
                self.send(envelope, stop)
                self.player.handed_off()
                races += 1
        finally:
            self.close()
        return self.counts

    def close(self) -> None:
        if self.weights is not None:
            self.weights.stop()
        if self.client_id is not None:
            try:
                self.api.json("POST", "/v1/disconnect", {"client_id": self.client_id})
            except (ServerGone, Unauthorized):
                pass
        self.api.close()
        if self.player is not None:
            self.player.close()
