"""Helpers of the HTTP tests: a real HttpSource on 127.0.0.1 (a free port), its token, a stdlib HTTP client.
Imported by the test modules after their `pytest.importorskip("fastapi")` (conftest.py stays import-free, so a
default install without the http extra collects and skips these tests cleanly)."""

from __future__ import annotations

import http.client
import json

from tests.helpers import SHORT_RACES, make_rollout, write_config
from trackmania_rl.agents.iqn import make_network
from trackmania_rl.config.live import LiveConfig
from trackmania_rl.games import float_layout_for
from trackmania_rl.rollouts.contract import RolloutShape
from trackmania_rl.rollouts.http import wire
from trackmania_rl.rollouts.http.server import bind
from trackmania_rl.rollouts.http.source import HttpSource
from trackmania_rl.rollouts.http.token import run_token

# small queue and tolerance so that full and paused are reached with a few races
HTTP_TEST_SETTINGS = """
http_queue_size = 3
http_off_policy_tolerance = 1
http_client_timeout_s = 60.0
"""


class Http:
    """One keep-alive connection to the server under test (loopback only)."""

    def __init__(self, port: int, token: str | None):
        self.port, self.token = port, token
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def request(self, method, path, body=None, content_type=None, token="default", headers=None):
        token = self.token if token == "default" else token
        all_headers = dict(headers or {})
        if token is not None:
            all_headers["Authorization"] = f"Bearer {token}"
        if content_type:
            all_headers["Content-Type"] = content_type
        try:
            self.conn.request(method, path, body=body, headers=all_headers)
            response = self.conn.getresponse()
            data = response.read()
        except Exception:
            self.conn.close()  # a fresh connection for the next request
            raise
        if response.getheader("connection", "").lower() == "close":
            self.conn.close()
        return response.status, data

    def json(self, method, path, payload=None, **kw):
        body = json.dumps(payload).encode() if payload is not None else None
        status, data = self.request(method, path, body, "application/json" if body is not None else None, **kw)
        return status, (json.loads(data) if data and data[:1] in (b"{", b"[") else data)

    def register(self, name="test"):
        status, answer = self.json("POST", "/v1/register", {"name": name, "game": "carracing", "protocol_version": 1})
        assert status == 200, answer
        return answer["client_id"]

    def close(self):
        self.conn.close()


class Served:
    """The source under test, with what a test needs to speak to it."""

    def __init__(self, source, token, cfg, layout, shape):
        self.source, self.token, self.cfg, self.layout, self.shape = source, token, cfg, layout, shape
        self.port = source.server.port
        self.fields = wire.race_fields(shape.frame_shape, shape.float_dim, shape.n_actions)
        self.seq = 0

    def client(self, token="default") -> Http:
        return Http(self.port, self.token if token == "default" else token)

    def race(self, n_states=6, finished=False, version=None, **kw) -> dict:
        rollout = make_rollout(self.cfg, self.layout, n_states, finished, **kw)
        rollout["car_gear_and_wheels"] = [x.astype("float32") for x in rollout["car_gear_and_wheels"]]
        if version is not None:
            rollout["policy_version"] = [version] * len(rollout["actions"])
        return rollout

    def body(self, client_id, seq=None, rollout=None, stats=None, meta=None) -> bytes:
        if seq is None:
            seq, self.seq = self.seq, self.seq + 1
        rollout = rollout if rollout is not None else self.race(version=self.source._policy[0])
        stats = stats if stats is not None else {"race_finished": False, "race_time": 1600, "cp_time_ms": [0]}
        meta = meta if meta is not None else {"map_name": "train", "seed": 3, "is_explo": True, "fill_buffer": True}
        return wire.encode_race(client_id, seq, rollout, stats, meta, self.fields)

    def drain(self) -> list:
        out = []
        while (envelope := self.source.get(0.0)) is not None:
            out.append(envelope)
        return out


def make_served(tmp_path, settings: str = HTTP_TEST_SETTINGS, first_producer: int = 0) -> Served:
    config_path = write_config(tmp_path, SHORT_RACES + settings)
    live = LiveConfig(config_path, game_backend="carracing", log=lambda m: None)
    cfg = live.current
    layout = float_layout_for(cfg, "carracing")
    shape = RolloutShape((1, cfg.H_downsized, cfg.W_downsized), layout.dim, len(cfg.inputs))
    token, _, _ = run_token(tmp_path)
    logs = []
    source = HttpSource(live, "carracing", layout, shape, token, bind("127.0.0.1", 0), "test_run", logs.append, first_producer)
    source.logs = logs
    source.publish(1, make_network(cfg, layout, len(cfg.inputs), "cpu").state_dict())
    source.start()
    return Served(source, token, cfg, layout, shape)
