"""The HTTP API v1 against a real uvicorn server on 127.0.0.1: every endpoint, every status code."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
import time

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi")

from trackmania_rl.rollouts.contract import validate_envelope  # noqa: E402
from trackmania_rl.rollouts.http import wire  # noqa: E402
from trackmania_rl.rollouts.http.server import is_loopback  # noqa: E402
from trackmania_rl.rollouts.http.source import exposure_warning, race_body_cap  # noqa: E402
from trackmania_rl.rollouts.http.token import TOKEN_FILE, read_token, run_token, token_matches  # noqa: E402

pytestmark = pytest.mark.http

ROUTES = [
    ("POST", "/v1/register"),
    ("GET", "/v1/policy"),
    ("POST", "/v1/rollouts"),
    ("GET", "/v1/status"),
    ("POST", "/v1/heartbeat"),
    ("POST", "/v1/disconnect"),
]


def test_token_created_exclusive_0600_kept_and_replaced(tmp_path):
    token, path, created = run_token(tmp_path)
    assert created and path == tmp_path / TOKEN_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again, _, created_again = run_token(tmp_path)  # a resume keeps it
    assert again == token and not created_again
    new, _, created_new = run_token(tmp_path, new=True)  # --new-token
    assert created_new and new != token and read_token(path) == new
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert token_matches(new, f"Bearer {new}") and not token_matches(new, f"Bearer {token}")
    assert not token_matches(new, None) and not token_matches(new, f"Basic {new}")


def test_every_v1_route_needs_the_token(served):
    for token in (None, "wrong", served.token + "x"):
        http = served.client(token=token)
        for method, path in ROUTES:
            status, _ = http.request(method, path, b"{}", "application/json")
            assert status == 401, (method, path, token)
        http.close()
    assert served.source.refused["unauthorized"] == 3 * len(ROUTES)
    assert served.drain() == []


def test_register_gives_the_contract(served):
    http = served.client()
    status, answer = http.json("POST", "/v1/register", {"name": "a", "game": "carracing", "protocol_version": 1})
    assert status == 200
    contract = answer["contract"]
    assert answer["run"] == "test_run" and answer["policy_version"] == 1 and answer["client_id"].startswith("c-")
    assert contract["frame_shape"] == [1, served.cfg.H_downsized, served.cfg.W_downsized] and contract["frame_dtype"] == "uint8"
    assert contract["float_dim"] == served.layout.dim == sum(s["size"] for s in contract["float_layout"])
    assert contract["n_actions"] == len(contract["actions"]) == len(served.cfg.inputs)
    assert contract["ms_per_action"] == served.cfg.ms_per_action and contract["off_policy_tolerance"] == 1
    assert contract["max_policy_lag"] == served.cfg.max_policy_lag and contract["heartbeat_interval_s"] > 0
    assert contract["max_body_bytes"] == race_body_cap(served.cfg, served.shape)
    assert answer["settings"]["H_downsized"] == served.cfg.H_downsized
    # a wrong protocol version or game, or a malformed body: refused with the field named
    for payload, field in (
        ({"name": "a", "game": "carracing", "protocol_version": 2}, "protocol_version"),
        ({"name": "a", "game": "tmnf", "protocol_version": 1}, "game"),
        ({"game": "carracing", "protocol_version": 1}, "name"),
    ):
        status, answer = http.json("POST", "/v1/register", payload)
        assert status == 422 and field in answer["detail"]
    status, _ = http.request("POST", "/v1/register", b"{not json", "application/json")
    assert status == 400


def test_policy_by_version(served):
    http = served.client()
    status, body = http.request("GET", "/v1/policy?have=-1")
    assert status == 200
    version, arrays = wire.decode_weights(body, len(body))
    assert version == 1 and arrays and all(a.dtype == np.float32 or a.dtype == np.int64 for a in arrays.values())
    assert http.request("GET", "/v1/policy?have=1")[0] == 304
    served.source.publish(2, {name: torch.full(a.shape, 0.5) for name, a in arrays.items()})
    status, body = http.request("GET", "/v1/policy?have=1")
    version, arrays = wire.decode_weights(body, len(body))
    assert status == 200 and version == 2 and all(np.all(a == 0.5) for a in arrays.values())
    assert served.source.weights_served == 2


def test_a_race_is_queued_as_the_contract_envelope(served):
    http = served.client()
    cid = http.register()
    rollout = served.race(n_states=7, finished=True, version=1)
    status, data = http.request("POST", "/v1/rollouts", served.body(cid, rollout=rollout), "application/msgpack")
    assert status == 202, data
    [envelope] = served.drain()
    rollout_results, stats, meta = validate_envelope(envelope, served.shape)
    assert meta["source"] == "http" and meta["collector"] == cid and meta["map_name"] == "train"
    assert len(rollout_results["frames"]) == 7 and len(rollout_results["actions"]) == 6
    for key in ("frames", "state_float", "q_values"):
        np.testing.assert_array_equal(np.stack(rollout_results[key]), np.stack(rollout[key]))
    assert rollout_results["actions"] == [int(a) for a in rollout["actions"]] and rollout_results["race_time"] == rollout["race_time"]
    assert stats["cp_time_ms"] == [0] and served.source.received == 1


def test_status_codes_of_rollouts(served):
    http = served.client()
    cid = http.register()
    post = lambda body: http.request("POST", "/v1/rollouts", body, "application/msgpack")  # noqa: E731
    assert post(served.body(cid, seq=5))[0] == 202
    assert post(served.body(cid, seq=5))[0] == 409  # replayed sequence number
    assert post(served.body(cid, seq=4))[0] == 409  # an older one
    assert post(served.body("c-unknown", seq=9))[0] == 404
    assert post(served.body(cid, seq=6, rollout=served.race(version=2)))[0] == 422  # newer than the current version
    served.source.live.current.max_policy_lag = 0
    served.source.publish(3, {"w": torch.zeros(2)})
    status, data = post(served.body(cid, seq=7, rollout=served.race(version=1)))
    assert status == 409 and b"too stale" in data
    nan = served.race(version=3)
    nan["state_float"][2][0] = np.nan
    status, data = post(served.body(cid, seq=8, rollout=nan))
    assert status == 422 and b"state_float" in data
    assert post(b"\xc1garbage")[0] == 400
    assert len(served.drain()) == 1  # only the first was stored
    assert served.source.refused["repeated"] == 2 and served.source.refused["stale"] == 1


def _tampered(served, cid: int, change) -> bytes:
    """A valid race body, unpacked, changed by `change` and packed again: what a client of any language may send."""
    body = wire.unpack(served.body(cid), max_bin_len=1 << 24)
    change(body)
    return wire.pack(body)


@pytest.mark.parametrize(
    "change, named",
    [
        (lambda b: b["end_race_stats"].update({"native_score": "abc"}), b"native_score"),
        (lambda b: b["end_race_stats"].update({"race_time_for_ratio": "abc"}), b"race_time_for_ratio"),
        (lambda b: b["end_race_stats"].update({"instrumentation__game_ns": None}), b"instrumentation__game_ns"),
        (lambda b: b["end_race_stats"].update({b"bytes key": 1}), b"keys must be strings"),
        (lambda b: b["meta"].update({"rollout_duration_s": "abc"}), b"rollout_duration_s"),
        (lambda b: b["meta"].update({"map_status": "elsewhere"}), b"map_status"),
        (lambda b: b["race"].pop("road_tiles_touched"), b"road_tiles_touched"),
        (lambda b: b["race"].update(state_float={"dtype": "<f4", "shape": [0, 2**64 - 1], "data": b""}), b"race.state_float"),
        (
            lambda b: b["race"].update(car_gear_and_wheels=wire.encode_array(np.zeros((6, 65), np.float32))),
            b"car_gear_and_wheels",
        ),
    ],
)
def test_a_race_the_learner_could_not_use_is_refused_at_the_door_naming_the_field(served, change, named):
    http = served.client()
    cid = http.register()
    status, data = http.request("POST", "/v1/rollouts", _tampered(served, cid, change), "application/msgpack")
    assert status == 422 and named in data, (status, data)
    assert served.drain() == [] and served.source.refused["invalid"] == 1
    assert http.request("POST", "/v1/rollouts", served.body(cid), "application/msgpack")[0] == 202  # the server goes on


def test_a_body_that_stops_arriving_is_answered_408_and_its_connection_freed(served, monkeypatch):
    from trackmania_rl.rollouts.http import server

    default_s, patched_s = server.BODY_TIMEOUT_S, 1.0
    assert patched_s < default_s / 2
    monkeypatch.setattr(server, "BODY_TIMEOUT_S", patched_s)
    # The client waits at most half the server's default body timeout: any answer at all can only have come from the
    # patched timeout firing, not from the default one (which would leave the recv below to time out).
    with socket.create_connection(("127.0.0.1", served.port), timeout=default_s / 2) as stalled:
        head = f"POST /v1/rollouts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {served.token}\r\nContent-Length: 100\r\n\r\n"
        started = time.monotonic()  # before the server can have seen the head, let alone started its body timeout
        stalled.sendall(head.encode() + b"\x00" * 10)  # 10 of the 100 bytes, then nothing
        answer = b""
        try:
            for _ in range(100):  # the head and the body may come in separate packets; the server closes after both
                part = stalled.recv(4096)
                if not part:
                    break
                answer += part
        except TimeoutError:
            pytest.fail(f"no answer (or no close) within {default_s / 2:g} s: the patched {patched_s:g} s body timeout did not fire")
        elapsed = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 408") and b"within 1 s (10 bytes came)" in answer, answer
        assert elapsed >= patched_s, f"answered 408 after {elapsed:.3f} s, before the {patched_s:g} s body timeout"
        assert part == b""  # closed by the server
    assert served.source.refused["bad_request"] == 1
    assert served.client().json("GET", "/v1/status")[0] == 200


def test_queue_full_is_429_and_paused_beyond_the_tolerance(served):
    http = served.client()
    cid = http.register()
    answers = []
    for _ in range(3):  # http_queue_size = 3, tolerance 1
        status, data = http.request("POST", "/v1/rollouts", served.body(cid), "application/msgpack")
        assert status == 202
        answers.append(json.loads(data))
    assert [a["paused"] for a in answers] == [False, True, True] and [a["queue_size"] for a in answers] == [1, 2, 3]
    body = served.body(cid)
    assert http.request("POST", "/v1/rollouts", body, "application/msgpack")[0] == 429
    status, st = http.json("GET", "/v1/status")
    assert st["paused"] and st["queue_size"] == 3 and st["races_dropped"]["queue_full"] == 1 and st["races_received"] == 3
    assert served.source.get(0.0) is not None and served.source.get(0.0) is not None
    assert not http.json("GET", "/v1/status")[1]["paused"]
    assert http.request("POST", "/v1/rollouts", body, "application/msgpack")[0] == 202  # the same race, retried after 429
    served.source.pause()  # the learner's pacing
    assert http.json("GET", "/v1/status")[1]["paused"]
    served.source.resume()


def test_body_cap_with_content_length_and_chunked(served):
    cap = served.source.race_body_cap()
    http = served.client()
    cid = http.register()
    # Content-Length over the cap: refused from the headers alone, before any body byte is read
    sock = socket.create_connection(("127.0.0.1", served.port), timeout=10)
    auth = f"Authorization: Bearer {served.token}\r\n"
    sock.sendall(f"POST /v1/rollouts HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Length: {cap + 1}\r\n\r\n".encode())
    answer = sock.recv(4096)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 413"), answer[:100]
    # chunked: no Content-Length, the bytes counted as they arrive
    sock = socket.create_connection(("127.0.0.1", served.port), timeout=10)
    head = f"POST /v1/rollouts HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Transfer-Encoding: chunked\r\n\r\n"
    sock.sendall(head.encode())
    chunk = b"\x00" * 65536
    sent = 0
    try:
        while sent <= cap + len(chunk):
            sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            sent += len(chunk)
    except OSError:
        pass  # the server may close once it answered 413
    answer = sock.recv(4096)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 413"), answer[:100]
    assert served.source.refused["too_large"] == 2 and served.drain() == []
    assert served.client().json("GET", "/v1/status")[0] == 200  # alive
    assert cid


def test_heartbeat_disconnect_and_silent_clients_forgotten(served):
    http = served.client()
    a, b = http.register("a"), http.register("b")
    assert http.json("POST", "/v1/heartbeat", {"client_id": a})[0] == 200
    health = served.source.health()
    assert (health.producers, health.alive, health.exhausted) == (2, 2, False)
    assert http.json("POST", "/v1/disconnect", {"client_id": b})[0] == 200
    assert http.json("POST", "/v1/heartbeat", {"client_id": b})[0] == 404
    served.source.live.current.http_client_timeout_s = 0.2
    time.sleep(0.3)
    health = served.source.health()
    assert health.replaced == [a] and health.producers == 0 and not health.exhausted
    assert http.request("POST", "/v1/rollouts", served.body(a), "application/msgpack")[0] == 404  # it must register again


def test_openapi_describes_every_route(served):
    status, spec = served.client(token=None).json("GET", "/openapi.json")
    assert status == 200
    for method, path in ROUTES:
        assert method.lower() in spec["paths"][path]
    rollouts = spec["paths"]["/v1/rollouts"]["post"]
    assert "application/msgpack" in rollouts["requestBody"]["content"]
    assert {"202", "400", "401", "404", "409", "413", "422", "429"} <= set(rollouts["responses"])


def test_loopback_and_exposure_warning():
    assert is_loopback("127.0.0.1") and is_loopback("127.3.2.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4") and not is_loopback("example.org")
    assert exposure_warning("127.0.0.1") is None
    warning = exposure_warning("0.0.0.0")
    assert "token" in warning and "TLS" in warning and "0.0.0.0" in warning


def _share(http, name: str) -> tuple[str, dict]:
    status, answer = http.json("POST", "/v1/register", {"name": name, "game": "carracing", "protocol_version": 1})
    assert status == 200, answer
    return answer["client_id"], answer["map_cycle_share"]


def test_each_client_gets_its_own_map_cycle_share_after_the_runs_other_producers(tmp_path):
    from tests.rollouts.http.support import make_served
    from trackmania_rl.rollouts.http.client import RemoteClient
    from trackmania_rl.rollouts.http.clients import MAX_CLIENTS

    served = make_served(tmp_path, first_producer=3)  # e.g. two local collectors and one Ray actor
    clients = []
    try:
        http = served.client()
        registered = [_share(http, name) for name in "abc"]
        assert [share["producer"] for _, share in registered] == [3, 4, 5]
        assert {share["producers"] for _, share in registered} == {3 + MAX_CLIENTS}
        # a slot given up (disconnect) goes to the next client to register; the others keep theirs
        assert http.json("POST", "/v1/disconnect", {"client_id": registered[1][0]})[0] == 200
        assert _share(http, "d")[1]["producer"] == 4
        assert _share(http, "e")[1]["producer"] == 6
        # clients of this project's code play their shares: two of them on different tracks, where both used to
        # play the same sequence as producer 0 of their own machine's one game
        for name in ("f", "g"):
            client = RemoteClient(f"http://127.0.0.1:{served.port}", served.token, name, log=lambda m: None)
            clients.append(client)
            client.setup(threading.Event())
        assert [c.player.cycle.collector_index for c in clients] == [7, 8]
        assert {c.player.cycle.collectors_count for c in clients} == {3 + MAX_CLIENTS}
        explo_seeds = [[next(c.player.cycle).seed for _ in range(8)] for c in clients]
        assert not set(explo_seeds[0]) & set(explo_seeds[1]), explo_seeds
    finally:
        for client in clients:
            client.close()
        served.source.stop()
