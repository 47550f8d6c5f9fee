"""The JavaScript client (clients/js, onnxruntime-node) against a real learner: scripts/train.py --listen
--collectors 0 on 127.0.0.1. The Python reference client plays one race with the real game and records it (a POST
/v1/rollouts body: msgpack typed arrays, with the Q values the collectors' acting program saw); the JS client
(examples/replay_race.mjs, run by node) registers, pulls the ONNX policy, decides every state of that race and
must agree with torch on >= 99.9 % of them, pushes the race (202), is refused for a wrong token (401), a body
that is not msgpack (400), a wrong dtype (422) and a stale version (409), honours `paused` and disconnects.

Needs node and the client's packages (`cd clients/js && ONNXRUNTIME_NODE_INSTALL=skip npm ci`), and the http and
onnx extras; skipped without them, except where TRACKMANIA_RL_REQUIRE_JS_CLIENT=1 (CI) makes their absence a
failure."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading

import numpy as np
import pytest

from tests.faults.helpers import REPO_ROOT, Trainer, train_command
from tests.helpers import TINY_TRAINING, write_config

pytestmark = [pytest.mark.http, pytest.mark.onnx, pytest.mark.slow]

JS_CLIENT = REPO_ROOT / "clients" / "js"
REQUIRED = os.environ.get("TRACKMANIA_RL_REQUIRE_JS_CLIENT") == "1"

# The learner of this test: one race (8 s, 100 actions: no early cut-off) fills the buffer past its start and owes
# 100 x 64 / 32 = ~200 batches, more than max_training_backlog_batches: the learner pauses its sources while it
# trains them down to 20 (seconds), publishing every 4 batches, so the version the race was played with falls
# more than max_policy_lag behind (stale), while a race sent after the pause is within it.
SCENARIO = """
memory_size_schedule = [(0, (20_000, 50))]
number_times_single_memory_is_used_before_discard = 64
max_training_backlog_batches = 40
send_shared_network_every_n_batches = 4
max_policy_lag = 10
cutoff_rollout_if_no_vcp_passed_within_duration_ms = 8_000
"""


def js_client_or_skip() -> str:
    """The node executable, once the client's packages are installed; skip (fail where required) otherwise."""
    node = shutil.which("node")
    missing = []
    if node is None:
        missing.append("node is not on PATH")
    for package in ("onnxruntime-node", "@msgpack/msgpack"):
        if not (JS_CLIENT / "node_modules" / package / "package.json").is_file():
            missing.append(f"{package} is not installed in clients/js (cd clients/js && ONNXRUNTIME_NODE_INSTALL=skip npm ci)")
    for module in ("fastapi", "onnxscript", "onnx"):
        try:
            __import__(module)
        except ImportError:
            missing.append(f"the python package {module} is not installed (pip install -e '.[http,onnx]')")
    if missing:
        reason = "; ".join(missing)
        if REQUIRED:
            pytest.fail(f"TRACKMANIA_RL_REQUIRE_JS_CLIENT=1 but {reason}")
        pytest.skip(reason)
    return node


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def record_race(url: str, token: str) -> tuple[bytes, int]:
    """One race played by the Python reference client (the real game, the collectors' acting program, the
    learner's weights), as a POST /v1/rollouts body; and the policy version it was played with."""
    from trackmania_rl.rollouts.http import wire
    from trackmania_rl.rollouts.http.client import RemoteClient

    client = RemoteClient(url, token, "python-recorder", log=lambda m: None)
    stop = threading.Event()
    try:
        client.setup(stop)
        envelope = client.player.play(client.frames_played)
        assert envelope is not None, "the game crashed"
        rollout_results, end_race_stats, meta = envelope
        versions = set(rollout_results["policy_version"])
        assert len(versions) == 1, versions  # nothing trained yet: one version all race long
        return wire.encode_race(client.client_id, 0, rollout_results, end_race_stats, meta, client.fields), versions.pop()
    finally:
        client.close()


def test_the_javascript_client_plays_by_the_api(tmp_path):
    node = js_client_or_skip()
    from trackmania_rl.rollouts.http import wire

    write_config(tmp_path, TINY_TRAINING.format(save_frequency_s=1_000) + SCENARIO)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    token_path = tmp_path / "save" / "js" / "http_token"
    learner = Trainer(train_command(tmp_path, "js", "--collectors", "0", "--listen", f"127.0.0.1:{port}"), tmp_path)
    try:
        learner.wait_for(r"HTTP endpoint for game clients", 120)
        body, played_version = record_race(url, token_path.read_text().strip())
        (tmp_path / "race.msgpack").write_bytes(body)
        run = subprocess.run(
            [node, "examples/replay_race.mjs", "--server", url, "--token-file", str(token_path),
             "--race", str(tmp_path / "race.msgpack"), "--out", str(tmp_path / "js")],
            cwd=JS_CLIENT, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        seen = json.loads(run.stdout.strip().splitlines()[-1])
        learner.signal(signal.SIGTERM)
        assert learner.finish(60) == 0
    finally:
        learner.kill()
    log = learner.log()
    assert "Traceback" not in log, log[-3000:]
    assert f"HTTP client {seen['client_id']} (js-replay) registered" in log and f"HTTP client {seen['client_id']} disconnected" in log

    # the policy as ONNX, the version the race was played with, then 304
    assert seen["policy_formats"] == ["arrays", "onnx"] and seen["contract_matches_sidecar"], seen
    assert seen["first_pull"] == {"status": 200, "version": played_version}, seen
    assert seen["repeat_pull"] == {"status": 304, "version": played_version}, seen
    assert seen["sidecar_inputs"] == ["frame", "state_float"]
    # its decisions agree with torch's (the acting program's Q values recorded in the race)
    race = wire.decode_race(wire.unpack(body, max_bin_len=len(body)), wire.race_fields((1, 64, 64), 66, 12), 10_000).rollout_results
    torch_q = np.stack(race["q_values"])
    onnx_q = np.fromfile(tmp_path / "js" / "onnx_q_values.f32", dtype="<f4").reshape(torch_q.shape)
    assert seen["decisions"] == len(torch_q) >= 50
    same = np.mean(onnx_q.argmax(axis=1) == torch_q.argmax(axis=1))
    assert same >= 0.999, (same, np.abs(onnx_q - torch_q).max())
    assert np.abs(onnx_q - torch_q).max() < 1e-3
    # accepted and refused as it should be
    assert seen["wrong_token_status"] == 401 and seen["push"] == 202, seen
    assert seen["not_msgpack"] == 400, seen
    assert seen["wrong_dtype"]["status"] == 422 and "race.state_float" in seen["wrong_dtype"]["detail"], seen
    assert seen["paused_seen"] and seen["honoured"]["waited"] and seen["honoured"]["seconds"] > 0, seen
    assert seen["second_pull"]["status"] == 200 and seen["second_pull"]["version"] > played_version + 10, seen
    assert seen["stale"]["status"] == 409 and seen["stale"]["detail"].startswith("too stale"), seen
    assert seen["push_new_version"] == 202, seen
    server = seen["server"]
    assert server["races_received"] == 2 and server["races_received_while_paused"] == 0, server
    dropped = server["races_dropped"]
    assert (dropped["bad_request"], dropped["invalid"], dropped["stale"], dropped["unauthorized"]) == (1, 1, 1, 1), dropped
    assert seen["disconnect"] == {"disconnected": seen["client_id"]} and seen["heartbeat_after_disconnect"] == 404, seen
