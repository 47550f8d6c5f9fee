"""Atari Enduro (config_files/enduro.py) played by remote sources: the learner (scripts/train.py, no local collector)
serving game clients over HTTP on 127.0.0.1, and collector actors on a local Ray cluster (ray_address "auto"). The
clients and actors play the real emulator (ale-py); the learner stores their races. Over HTTP, the contract says what
this game's races carry (the game's reward, no centerline) and the server holds races to it at the door: one without
`game_reward` is refused naming it, one without the centerline fields (as Enduro's are) is taken, while a CarRacing
run still requires them."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("ale_py")

from tests.faults.helpers import REPO_ROOT, Trainer, train_command  # noqa: E402
from trackmania_rl.config.loader import CONFIG_DIR  # noqa: E402
from trackmania_rl.config.whole_copy import whole_config_text  # noqa: E402
from trackmania_rl.games.base import CENTERLINE_STATE_KEYS, FURTHEST_ZONE, GAME_REWARD  # noqa: E402

pytestmark = [pytest.mark.atari, pytest.mark.slow]

PLAY_REMOTE = REPO_ROOT / "scripts" / "play_remote.py"
CENTERLINE_FIELDS = (*CENTERLINE_STATE_KEYS, FURTHEST_ZONE)
CUTOFF_MS = 5_000
ACTIONS_PER_RACE = int(CUTOFF_MS // (4000 / 60))  # 74: races cut off at 5 s, an action 4 frames at 60 Hz (test_enduro.py)
# The processes of these tests start torch, the emulator and (for Ray) a cluster on cores other work may be using:
# the waits below bound a hang only.
START_S = 300
RACES_S = 300

# appended to config_files/enduro.py: short races, learning from the first races, small replay start
SMALL_RUN = """
# --- a short run for tests ---
cutoff_rollout_if_race_not_finished_within_duration_ms = {cutoff_ms}
memory_size_schedule = [(0, (20_000, 100))]
number_times_single_memory_is_used_before_discard = 1
training_precision = "float32"
send_shared_network_every_n_batches = 2
update_inference_network_every_n_actions = 25
ray_object_store_mb = 256
save_frequency_s = {save_frequency_s}
"""


def write_enduro_config(folder: Path, save_frequency_s: float = 1_000) -> Path:
    path = folder / "config.py"
    small = SMALL_RUN.format(cutoff_ms=CUTOFF_MS, save_frequency_s=save_frequency_s)
    path.write_text(whole_config_text(CONFIG_DIR / "enduro.py") + small)  # enduro.py names a base: its whole text
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------------- HTTP
@pytest.fixture(scope="module")
def http_learner(tmp_path_factory):
    """scripts/train.py on the Enduro config with no local collector, serving game clients on 127.0.0.1."""
    pytest.importorskip("fastapi")
    folder = tmp_path_factory.mktemp("enduro_http")
    write_enduro_config(folder)
    port = free_port()
    trainer = Trainer(train_command(folder, "enduro_http", "--collectors", "0", "--listen", f"127.0.0.1:{port}"), folder)
    try:
        trainer.wait_for(r"HTTP endpoint for game clients", START_S)
        token_path = folder / "save" / "enduro_http" / "http_token"
        yield SimpleNamespace(trainer=trainer, port=port, token_path=token_path, token=token_path.read_text().strip(), folder=folder)
        trainer.signal(signal.SIGTERM)
        trainer.finish(120)
    finally:
        trainer.kill()


def http_client(learner):
    from tests.rollouts.http.support import Http

    return Http(learner.port, learner.token)


def status_of(learner) -> dict:
    http = http_client(learner)
    try:
        code, answer = http.json("GET", "/v1/status")
    finally:
        http.close()
    assert code == 200, answer
    return answer


def wait_status(learner, ready, timeout_s: float = RACES_S) -> dict:
    """Polls GET /v1/status until `ready(status)`; fails, saying the last status, after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = status_of(learner)
        if ready(status):
            return status
        assert learner.trainer.process.poll() is None, learner.trainer.log()[-4000:]
        assert time.monotonic() < deadline, f"status never got ready within {timeout_s} s; last: {status}"
        time.sleep(0.25)


def register(learner, game: str = "gymnasium") -> tuple[int, dict]:
    http = http_client(learner)
    try:
        return http.json("POST", "/v1/register", {"name": "enduro-test", "game": game, "protocol_version": 1})
    finally:
        http.close()


@pytest.mark.http
def test_play_remote_plays_enduro_and_the_learner_stores_and_learns_from_its_races(http_learner, tmp_path):
    before = status_of(http_learner)
    counts_file = tmp_path / "counts.json"
    races = 3
    server = f"http://127.0.0.1:{http_learner.port}"
    client = subprocess.run(
        [sys.executable, str(PLAY_REMOTE), "--server", server, "--token-file", str(http_learner.token_path), "--game", "gymnasium",
         "--max-races", str(races), "--counts-file", str(counts_file)],
        cwd=tmp_path, capture_output=True, text=True, timeout=START_S + RACES_S,
    )  # fmt: skip
    assert client.returncode == 0, client.stdout[-3000:] + client.stderr[-3000:]
    counts = json.loads(counts_file.read_text())["0"]
    assert counts["sent"] == races and counts["dropped"] == 0 and counts["registrations"] == 1, counts
    assert counts["actions"] == races * ACTIONS_PER_RACE  # cut-off races of the configured length: the game's clock
    # every action of the races sent is stored, once: frames_played is the learner's count of actions stored
    target = before["frames_played"] + counts["actions"]
    status = wait_status(http_learner, lambda s: s["frames_played"] >= target)
    assert status["frames_played"] == target, (before, status)
    assert status["races_received"] == before["races_received"] + races
    assert status["races_dropped"]["invalid"] == before["races_dropped"]["invalid"]
    # and learns from them: the replay start (100 transitions) is passed, train steps follow
    wait_status(http_learner, lambda s: s["learner_step"] > 0)
    log = http_learner.trainer.log()
    assert "game gymnasium" in log and "Traceback" not in log and not re.search(r"rollout from .* refused", log), log[-4000:]


@pytest.mark.http
def test_the_contract_of_an_enduro_run_says_what_its_races_carry(http_learner):
    code, answer = register(http_learner)
    assert code == 200, answer
    contract = answer["contract"]
    assert contract["game"] == "gymnasium" and contract["frame_shape"] == [4, 84, 84] and contract["n_actions"] == 9
    assert contract["ms_per_action"] == pytest.approx(4000 / 60)
    # the longest race in states (its cut-off in actions + the start, finish and one past the cut-off): a whole number,
    # though an action's game time is not one
    assert type(contract["max_states"]) is int and contract["max_states"] == ACTIONS_PER_RACE + 3
    fields = contract["race_fields"]
    assert {key: fields[key] for key in CENTERLINE_FIELDS} == dict.fromkeys(CENTERLINE_FIELDS, "optional")
    assert fields[GAME_REWARD] == "required" and fields["frames"] == fields["actions"] == "required"
    assert contract["reward_keys"] == [GAME_REWARD]  # reward_per_game_point pays the game's reward; nothing else
    # a client of another game is refused, naming the field and the run's game
    code, answer = register(http_learner, game="carracing")
    assert code == 422 and "`game` 'carracing'" in answer["detail"] and "gymnasium" in answer["detail"]


@pytest.mark.http
def test_a_real_enduro_race_is_refused_without_its_game_reward_and_taken_without_a_centerline(http_learner):
    """The reference client (RemoteClient, game "gymnasium") plays a race on the real emulator; sent without
    `game_reward` it is refused (422, the field named), with a NaN reward too; as played (no centerline fields) it is
    taken and stored."""
    from trackmania_rl.rollouts.http import wire
    from trackmania_rl.rollouts.http.client import RemoteClient

    logs = []
    client = RemoteClient(f"http://127.0.0.1:{http_learner.port}", http_learner.token, "enduro-test", log=logs.append, game="gymnasium")
    stop = threading.Event()
    try:
        client.setup(stop)
        envelope = client.player.play(client.frames_played)
        assert envelope is not None, logs
        rollout = envelope.rollout_results
        assert not set(CENTERLINE_FIELDS) & set(rollout) and len(rollout[GAME_REWARD]) == len(rollout["actions"]) == ACTIONS_PER_RACE
        body = wire.unpack(wire.encode_race(client.client_id, client.seq, *envelope, client.fields), max_bin_len=1 << 26)
        assert not set(CENTERLINE_FIELDS) & set(body["race"]) and body["race"][GAME_REWARD]["dtype"] == "<f8"
        before = status_of(http_learner)

        def post(race_change) -> tuple[int, str]:
            tampered = {**body, "race": dict(body["race"])}
            race_change(tampered["race"])
            code, _, data = client.api.request("POST", "/v1/rollouts", wire.pack(tampered), "application/msgpack")
            return code, data.decode(errors="replace")

        code, detail = post(lambda race: race.pop(GAME_REWARD))
        assert code == 422 and f"race.{GAME_REWARD}` is missing" in detail, (code, detail)
        rewards = np.asarray(rollout[GAME_REWARD], np.float64)
        rewards[3] = np.nan
        code, detail = post(lambda race: race.update({GAME_REWARD: wire.encode_array(rewards)}))
        assert code == 422 and f"race.{GAME_REWARD}` contains NaN" in detail, (code, detail)
        # the race as the game played it: no centerline field, and taken
        assert client.send(envelope, stop), logs
        target = before["frames_played"] + ACTIONS_PER_RACE
        status = wait_status(http_learner, lambda s: s["frames_played"] >= target)
        assert status["frames_played"] == target and status["races_received"] == before["races_received"] + 1
        assert status["races_dropped"]["invalid"] == before["races_dropped"]["invalid"] + 2
    finally:
        client.close()


@pytest.mark.http
@pytest.mark.onnx
def test_the_enduro_policy_served_as_onnx_takes_frame_stacks_and_decides_as_the_weights_do(http_learner):
    """GET /v1/policy?format=onnx of the Enduro run (what a client in another language plays with): the model takes
    (B, 4, 84, 84) uint8 frames and gives the Q values of the same version's weights (format=arrays) in torch; its
    sidecar names the stack and the Gymnasium preprocessing."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from trackmania_rl.agents.acting import make_inference_network
    from trackmania_rl.agents.exploration import midpoint_taus
    from trackmania_rl.agents.iqn import load_state_dict_into, make_network
    from trackmania_rl.agents.onnx_export import OnnxPolicy
    from trackmania_rl.config.values import config_from_values
    from trackmania_rl.games import float_layout_for
    from trackmania_rl.games.gymnasium.frames import describe_preprocessing
    from trackmania_rl.rollouts.http import wire

    code, answer = register(http_learner)
    assert code == 200, answer
    cfg = config_from_values(answer["settings"], game_backend="gymnasium", inputs=answer["inputs"])
    layout = float_layout_for(cfg)
    http = http_client(http_learner)
    http.conn.timeout = START_S  # the first format=onnx request exports the network (a second of CPU on an idle core)
    try:
        for _ in range(5):  # the learner may publish between the two pulls: until both are of one version
            code, arrays_body = http.request("GET", "/v1/policy?have=-1")
            assert code == 200
            version, arrays = wire.decode_weights(arrays_body, len(arrays_body))
            code, onnx_body = http.request("GET", "/v1/policy?have=-1&format=onnx")
            assert code == 200, onnx_body[:300]
            served = wire.unpack(onnx_body, max_bin_len=len(onnx_body))
            if served["version"] == version:
                break
        assert served["version"] == version
    finally:
        http.close()
    sidecar = served["sidecar"]
    assert sidecar["game"] == "gymnasium" and sidecar["policy_version"] == version
    assert sidecar["frame"]["shape"] == [4, 84, 84] and sidecar["frame"]["stack"] == 4
    assert sidecar["frame"]["preprocessing"] == describe_preprocessing(cfg) and sidecar["inputs"][0]["shape"] == ["batch", 4, 84, 84]
    network = make_network(cfg, layout, len(cfg.inputs), "cpu")
    load_state_dict_into(network, {name: torch.from_numpy(a) for name, a in arrays.items()}, "the served weights")
    acting = make_inference_network(cfg, layout, len(cfg.inputs), jit=False)
    acting.load_state_dict_from(network)
    q_of = acting.mean_q_at(midpoint_taus(cfg.iqn_k))
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (3, 4, 84, 84), dtype=np.uint8)
    floats = (layout.mean + layout.std * rng.standard_normal((3, layout.dim))).astype(np.float32)
    q = OnnxPolicy(served["onnx"])(frames, floats)
    assert q.shape == (3, 9)
    np.testing.assert_allclose(q, np.stack([q_of(frames[i], floats[i]) for i in range(3)]), rtol=1e-4, atol=1e-4)


@pytest.mark.http
def test_a_carracing_run_still_requires_the_centerline_fields(tmp_path):
    """The contrast: a CarRacing run's contract and door (an HttpSource on 127.0.0.1 in this process)."""
    pytest.importorskip("fastapi")
    from tests.rollouts.http.support import make_served
    from trackmania_rl.rollouts.http import wire

    served = make_served(tmp_path)
    try:
        http = served.client()
        code, answer = http.json("POST", "/v1/register", {"name": "car", "game": "carracing", "protocol_version": 1})
        assert code == 200, answer
        fields = answer["contract"]["race_fields"]
        assert {key: fields[key] for key in CENTERLINE_FIELDS} == dict.fromkeys(CENTERLINE_FIELDS, "required")
        assert fields[GAME_REWARD] == "optional" and GAME_REWARD not in answer["contract"]["reward_keys"]
        client_id = answer["client_id"]
        for key in CENTERLINE_FIELDS:
            body = wire.unpack(served.body(client_id), max_bin_len=1 << 24)
            body["race"].pop(key)
            code, data = http.request("POST", "/v1/rollouts", wire.pack(body), "application/msgpack")
            assert code == 422 and key.encode() in data, (key, code, data)
        assert http.request("POST", "/v1/rollouts", served.body(client_id), "application/msgpack")[0] == 202
        assert len(served.drain()) == 1 and served.source.refused["invalid"] == len(CENTERLINE_FIELDS)
        http.close()
    finally:
        served.source.stop()


@pytest.mark.http
def test_the_api_docs_name_every_field_of_the_contract_and_of_a_race(tmp_path):
    """docs/http-api.md is what a client in another language is written from: every key of the contract a server
    gives, and every field a race may carry (any game's), has its row there."""
    pytest.importorskip("fastapi")
    from tests.rollouts.http.support import make_served
    from trackmania_rl.games.backend import game_backend
    from trackmania_rl.rollouts.http import wire

    docs = (REPO_ROOT / "docs" / "http-api.md").read_text()
    rows = set(re.findall(r"^\| `([a-z_]+)` \|", docs, re.MULTILINE))
    served = make_served(tmp_path)
    try:
        contract = served.source.contract()
    finally:
        served.source.stop()
    assert set(contract) - rows == set()
    race_fields = set(wire.fields_in_words(wire.race_fields((4, 8, 8), 3, 2, game_backend("gymnasium").race_keys)))
    assert race_fields - rows == set()


# -------------------------------------------------------------------------------------------------- Ray
SAVED = r"checkpoint saved to \S+: (\d+) frames"


@pytest.mark.ray
def test_ray_actors_play_enduro_and_the_learner_stores_their_races(tmp_path):
    pytest.importorskip("ray")
    write_enduro_config(tmp_path, save_frequency_s=2)
    trainer = Trainer(train_command(tmp_path, "enduro_ray", "--collectors", "0", "--ray", "auto", "--ray-actors", "1"), tmp_path)
    try:
        trainer.wait_for(r"Ray: 1 collector actor\(s\)", START_S)
        deadline = time.monotonic() + START_S + RACES_S
        while not any(int(frames) > 0 for frames in re.findall(SAVED, trainer.log())):
            assert trainer.process.poll() is None, trainer.log()[-4000:]
            assert time.monotonic() < deadline, f"no checkpoint with stored frames:\n{trainer.log()[-4000:]}"
            time.sleep(0.5)
        trainer.signal(signal.SIGTERM)
        assert trainer.finish(120) == 0, trainer.log()[-4000:]
        log = trainer.log()
        assert "game gymnasium" in log and "Traceback" not in log and not re.search(r"rollout from .* refused", log), log[-4000:]
        frames = [int(f) for f in re.findall(SAVED, log)]
        taken = int(re.search(r"Ray: (\d+) race\(s\) taken, 0 lost", log).group(1))
        # every race taken is stored whole: the final save counts the actions of the races taken, all of ACTIONS_PER_RACE
        assert taken >= 1 and frames[-1] == taken * ACTIONS_PER_RACE, (taken, frames)
    finally:
        trainer.kill()
