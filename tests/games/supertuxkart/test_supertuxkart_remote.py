"""SuperTuxKart (config_files/supertuxkart.py) played by remote sources: the learner (scripts/train.py, no local
collector) serving game clients over HTTP on 127.0.0.1, and collector actors on a local Ray cluster (`--ray auto`).
The clients and actors play the real game, in its own process (games/supertuxkart/process.py); the learner stores
their races. Over HTTP the contract says what the game's races carry (a driveline: the centerline fields required, no
game reward), a real race crosses the wire with its kart floats, end stats and map name (a finished lap too, with its
finish pseudo-state), and the policy served as ONNX agrees with torch on the states of a real race. On Ray, the
actor's game is a process of its own started from the Ray worker (a fresh interpreter holding none of the worker's
files) that goes with its actor when Ray kills it; the live config reaches the actors, TensorBoard gets the races."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.faults.helpers import REPO_ROOT, Trainer, process_exists, train_command
from trackmania_rl.config.loader import CONFIG_DIR
from trackmania_rl.config.whole_copy import whole_config_text
from trackmania_rl.games.base import CENTERLINE_STATE_KEYS, FURTHEST_ZONE, GAME_REWARD
from trackmania_rl.games.supertuxkart.data import prepare
from trackmania_rl.games.supertuxkart.process import CHILD_MODULE

pytestmark = [pytest.mark.supertuxkart, pytest.mark.slow]

PLAY_REMOTE = REPO_ROOT / "scripts" / "play_remote.py"
CENTERLINE_FIELDS = (*CENTERLINE_STATE_KEYS, FURTHEST_ZONE)
CUTOFF_MS = 3_000
ACTIONS_PER_RACE = CUTOFF_MS // 100  # 30: races cut off at 3 s (the no-progress cut-off is 5 s), an action 100 ms
SHORTER_CUTOFF_MS = 2_000  # the live config's edit in the Ray test: 20 actions a race
N_ACTIONS = 14
# The processes of these tests start torch, the game and (for Ray) a cluster on cores other work may be using: the
# waits below bound a hang only.
START_S = 300
RACES_S = 300

# appended to config_files/supertuxkart.py: short races on two small tracks (one reversed), learning from the first
# races, a small replay start
SMALL_RUN = """
# --- a short run for tests ---
map_cycle = [("lighthouse:reverse", 0, True, True), ("olivermath", 0, False, True)]
cutoff_rollout_if_race_not_finished_within_duration_ms = {cutoff_ms}
memory_size_schedule = [(0, (20_000, 50))]
number_times_single_memory_is_used_before_discard = 1
batch_size = 32
training_precision = "float32"
send_shared_network_every_n_batches = 2
update_inference_network_every_n_actions = 10
ray_object_store_mb = 256
save_frequency_s = {save_frequency_s}
held_out_eval_period_s = 0
"""


def write_kart_config(folder: Path, save_frequency_s: float = 1_000) -> Path:
    path = folder / "config.py"
    small = SMALL_RUN.format(cutoff_ms=CUTOFF_MS, save_frequency_s=save_frequency_s)
    path.write_text(whole_config_text(CONFIG_DIR / "supertuxkart.py") + small)  # the file names a base: its whole text
    return path


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------------- HTTP
@pytest.fixture(scope="module")
def http_learner(tmp_path_factory, kart_root):
    """scripts/train.py on the SuperTuxKart config with no local collector, serving game clients on 127.0.0.1."""
    pytest.importorskip("fastapi")
    folder = tmp_path_factory.mktemp("kart_http")
    write_kart_config(folder)
    port = free_port()
    trainer = Trainer(train_command(folder, "kart_http", "--collectors", "0", "--listen", f"127.0.0.1:{port}"), folder)
    try:
        trainer.wait_for(r"HTTP endpoint for game clients", START_S)
        token_path = folder / "save" / "kart_http" / "http_token"
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


def register(learner, game: str = "supertuxkart") -> tuple[int, dict]:
    http = http_client(learner)
    try:
        return http.json("POST", "/v1/register", {"name": "kart-test", "game": game, "protocol_version": 1})
    finally:
        http.close()


@pytest.fixture(scope="module")
def played_race(http_learner):
    """One race played on the real game by the reference client (RemoteClient, game "supertuxkart"), not sent yet:
    (client, envelope). The client is closed at the end of the module."""
    from trackmania_rl.rollouts.http.client import RemoteClient

    logs = []
    client = RemoteClient(f"http://127.0.0.1:{http_learner.port}", http_learner.token, "kart-test", log=logs.append, game="supertuxkart")
    try:
        client.setup(threading.Event())
        envelope = client.player.play(client.frames_played)
        assert envelope is not None, logs
        yield client, envelope
    finally:
        client.close()


@pytest.mark.http
def test_play_remote_plays_supertuxkart_and_the_learner_stores_and_learns_from_its_races(http_learner, tmp_path):
    before = status_of(http_learner)
    counts_file = tmp_path / "counts.json"
    races = 3
    server = f"http://127.0.0.1:{http_learner.port}"
    client = subprocess.run(
        [sys.executable, str(PLAY_REMOTE), "--server", server, "--token-file", str(http_learner.token_path), "--game", "supertuxkart",
         "--max-races", str(races), "--counts-file", str(counts_file)],
        cwd=tmp_path, capture_output=True, text=True, timeout=START_S + RACES_S,
    )  # fmt: skip
    assert client.returncode == 0, client.stdout[-3000:] + client.stderr[-3000:]
    counts = json.loads(counts_file.read_text())["0"]
    assert counts["sent"] == races and counts["dropped"] == 0 and counts["registrations"] == 1, counts
    assert counts["actions"] == races * ACTIONS_PER_RACE  # races cut off at the configured game time
    # every action of the races sent is stored, once: frames_played is the learner's count of actions stored
    target = before["frames_played"] + counts["actions"]
    status = wait_status(http_learner, lambda s: s["frames_played"] >= target)
    assert status["frames_played"] == target, (before, status)
    assert status["races_received"] == before["races_received"] + races
    assert status["races_dropped"]["invalid"] == before["races_dropped"]["invalid"]
    # and learns from them: the replay start (50 transitions) is passed, train steps follow
    wait_status(http_learner, lambda s: s["learner_step"] > 0)
    log = http_learner.trainer.log()
    assert "game supertuxkart" in log and "Traceback" not in log and not re.search(r"rollout from .* refused", log), log[-4000:]


@pytest.mark.http
def test_the_contract_of_a_supertuxkart_run_says_what_its_races_carry(http_learner):
    code, answer = register(http_learner)
    assert code == 200, answer
    contract = answer["contract"]
    assert contract["game"] == "supertuxkart" and contract["frame_shape"] == [1, 64, 64] and contract["n_actions"] == N_ACTIONS
    assert contract["ms_per_action"] == 100 and contract["max_states"] == ACTIONS_PER_RACE + 3
    assert {"accelerate": True, "brake": False, "left": True, "right": False, "drift": True} in contract["actions"]
    assert {"accelerate": True, "brake": False, "left": False, "right": False, "nitro": True} in contract["actions"]
    fields = contract["race_fields"]
    assert {key: fields[key] for key in CENTERLINE_FIELDS} == dict.fromkeys(CENTERLINE_FIELDS, "required")  # the driveline
    assert fields[GAME_REWARD] == "optional"  # the progress along the driveline pays, not a game score:
    assert contract["reward_keys"] == ["meters_advanced_along_centerline"]
    assert [s["name"] for s in contract["float_layout"]][-2:] == ["zone_centers_ahead", "distance_to_finish"]
    # a client of another game is refused, naming the field and the run's game
    code, answer = register(http_learner, game="carracing")
    assert code == 422 and "`game` 'carracing'" in answer["detail"] and "supertuxkart" in answer["detail"]
    # the OpenAPI names the game among those a client may play, and among the games with a centerline
    http = http_client(http_learner)
    try:
        code, spec = http.json("GET", "/openapi.json")
    finally:
        http.close()
    register_body = json.dumps(spec["paths"]["/v1/register"]["post"]["requestBody"])
    assert code == 200 and "`supertuxkart`" in register_body, register_body
    race_body = json.dumps(spec["paths"]["/v1/rollouts"]["post"]["requestBody"])
    assert "centerline (carracing, supertuxkart)" in race_body, race_body


@pytest.mark.http
def test_a_real_supertuxkart_race_crosses_the_wire_and_is_refused_without_its_centerline(http_learner, played_race):
    """The race as the game played it: its kart floats (car_gear_and_wheels: velocity to skid factor), the reversed
    map's name, the end stats (lap_time_ms None when the lap was not driven) go over the wire; without any one of the
    centerline fields, or with a NaN in the progress, it is refused (422, the field named); as played it is stored."""
    from trackmania_rl.rollouts.http import wire

    client, envelope = played_race
    rollout, stats, meta = envelope
    assert len(rollout["actions"]) == len(rollout["frames"]) == ACTIONS_PER_RACE and GAME_REWARD not in rollout
    body = wire.unpack(wire.encode_race(client.client_id, client.seq, *envelope, client.fields), max_bin_len=1 << 26)
    race = body["race"]
    assert set(CENTERLINE_FIELDS) <= set(race) and race["car_gear_and_wheels"]["shape"] == [ACTIONS_PER_RACE, 8]
    assert race["frames"]["shape"] == [ACTIONS_PER_RACE, 1, 64, 64] and race["state_float"]["shape"] == [ACTIONS_PER_RACE, 93]
    assert body["meta"]["map_name"] in ("lighthouse:reverse", "olivermath")
    assert body["end_race_stats"]["lap_time_ms"] is None and body["end_race_stats"]["end_reason"] == "overall"
    assert len(body["end_race_stats"]["cp_time_ms"]) >= 1
    before = status_of(http_learner)

    def post(race_change) -> tuple[int, str]:
        tampered = {**body, "race": dict(race)}
        race_change(tampered["race"])
        code, _, data = client.api.request("POST", "/v1/rollouts", wire.pack(tampered), "application/msgpack")
        return code, data.decode(errors="replace")

    for key in CENTERLINE_FIELDS:
        code, detail = post(lambda race, key=key: race.pop(key))
        assert code == 422 and key in detail, (key, code, detail)
    progress = np.asarray(rollout["meters_advanced_along_centerline"], np.float64)
    progress[3] = np.nan
    code, detail = post(lambda race: race.update(meters_advanced_along_centerline=wire.encode_array(progress)))
    assert code == 422 and "meters_advanced_along_centerline` contains NaN" in detail, (code, detail)
    assert client.send(envelope, threading.Event())
    target = before["frames_played"] + ACTIONS_PER_RACE
    status = wait_status(http_learner, lambda s: s["frames_played"] >= target)
    assert status["frames_played"] == target and status["races_received"] == before["races_received"] + 1
    assert status["races_dropped"]["invalid"] == before["races_dropped"]["invalid"] + len(CENTERLINE_FIELDS) + 1


@pytest.mark.http
@pytest.mark.onnx
def test_the_supertuxkart_policy_served_as_onnx_decides_as_torch_on_a_real_races_states(http_learner, played_race):
    """GET /v1/policy?format=onnx of the SuperTuxKart run: its sidecar names the kart's action set with every flag
    (drift and nitro false where not pressed), the backend's words for the frame (the road drawn from the driveline)
    and the float layout by element (the kart's seven flags per previous action); the model gives, on the frames and
    floats of a race the real game played, the Q values of the same version's weights (format=arrays) in torch."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from trackmania_rl.agents.acting import make_inference_network
    from trackmania_rl.agents.exploration import midpoint_taus
    from trackmania_rl.agents.iqn import load_state_dict_into, make_network
    from trackmania_rl.agents.onnx_export import OnnxPolicy
    from trackmania_rl.config.values import config_from_values
    from trackmania_rl.games import float_layout_for
    from trackmania_rl.games.backend import game_backend
    from trackmania_rl.rollouts.http import wire

    code, answer = register(http_learner)
    assert code == 200, answer
    cfg = config_from_values(answer["settings"], game_backend="supertuxkart", inputs=answer["inputs"])
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
    assert sidecar["game"] == "supertuxkart" and sidecar["policy_version"] == version and sidecar["n_actions"] == N_ACTIONS
    assert sidecar["action_flags"] == ["accelerate", "brake", "left", "right", "drift", "nitro"]
    assert sidecar["actions"][cfg.action_set.index("accelerate+left+drift")] == {
        "accelerate": True, "brake": False, "left": True, "right": False, "drift": True, "nitro": False,
    }  # fmt: skip
    assert sidecar["actions"][cfg.action_set.index("brake")] == dict.fromkeys(sidecar["action_flags"], False) | {"brake": True}
    assert sidecar["frame"]["shape"] == [1, 64, 64] and sidecar["frame"]["stack"] == 1
    assert sidecar["frame"]["preprocessing"] == game_backend("supertuxkart").frame_preprocessing(cfg)
    assert "driveline" in sidecar["frame"]["preprocessing"]
    assert sidecar["state_float"]["labels"] == layout.element_labels() and sidecar["state_float"]["dim"] == 93
    assert "previous_actions.t-1.rescue" in sidecar["state_float"]["labels"]  # in the floats though no action presses it
    network = make_network(cfg, layout, N_ACTIONS, "cpu")
    load_state_dict_into(network, {name: torch.from_numpy(a) for name, a in arrays.items()}, "the served weights")
    acting = make_inference_network(cfg, layout, N_ACTIONS, jit=False)
    acting.load_state_dict_from(network)
    q_of = acting.mean_q_at(midpoint_taus(cfg.iqn_k))
    rollout = played_race[1].rollout_results
    frames, floats = np.stack(rollout["frames"]), np.stack(rollout["state_float"])
    assert frames.shape == (ACTIONS_PER_RACE, 1, 64, 64) and frames.max() > 0  # the road is drawn
    q = OnnxPolicy(served["onnx"])(frames, floats)
    torch_q = np.stack([q_of(frames[i], floats[i]) for i in range(len(frames))])
    np.testing.assert_allclose(q, torch_q, rtol=1e-4, atol=1e-4)
    assert np.array_equal(q.argmax(axis=1), torch_q.argmax(axis=1))


@pytest.mark.http
def test_a_finished_supertuxkart_lap_crosses_the_wire_whole_and_the_validator_takes_it(game, kart_cfg, race):
    """A lap the scripted driver finishes on the real game (a reversed track: the finish pseudo-state, race_time, the
    lap and split times), encoded as the reference client sends it and decoded as the server reads it (the fields of the
    run by the backend's race_keys, its longest race): the same race, which the validator and the reward check take."""
    pytest.importorskip("msgpack")
    pytest.importorskip("fastapi")  # max_race_states is the HTTP source's, which imports the server (fastapi, uvicorn)
    pytest.importorskip("uvicorn")
    from trackmania_rl.config.loader import frame_shape
    from trackmania_rl.games.backend import game_backend
    from trackmania_rl.games.supertuxkart.driver import zone_follower
    from trackmania_rl.rollouts.contract import RolloutShape, require_reward_keys, validate_envelope
    from trackmania_rl.rollouts.http import wire
    from trackmania_rl.rollouts.http.source import max_race_states

    layout = game.float_layout
    results, stats = race(game, "lighthouse:reverse", zone_follower(kart_cfg, layout))
    assert stats["race_finished"] and len(results["frames"]) == len(results["actions"]) + 1
    results["policy_version"] = [7] * len(results["actions"])
    meta = {"map_name": "lighthouse:reverse", "seed": 0, "map_status": "trained", "is_explo": False, "fill_buffer": True}
    fields = wire.race_fields(frame_shape(kart_cfg), layout.dim, len(kart_cfg.inputs), game_backend("supertuxkart").race_keys)
    body = wire.unpack(wire.encode_race("kart", 0, results, stats, meta, fields), max_bin_len=1 << 28)
    decoded = wire.decode_race(body, fields, max_race_states(kart_cfg))
    got = decoded.rollout_results
    assert got["race_time"] == results["race_time"] and got[FURTHEST_ZONE] == results[FURTHEST_ZONE]
    for key in ("frames", "state_float", "car_gear_and_wheels", "q_values"):
        np.testing.assert_array_equal(np.stack(got[key]), np.stack(results[key]).astype(np.stack(got[key]).dtype), err_msg=key)
    for key in ("current_zone_idx", "meters_advanced_along_centerline", "actions", "action_was_greedy", "input_w", "policy_version"):
        assert got[key] == list(results[key]), key
    assert decoded.end_race_stats["lap_time_ms"] == stats["lap_time_ms"] == results["race_time"]
    assert decoded.end_race_stats["cp_time_ms"] == stats["cp_time_ms"] and decoded.meta == meta
    shape = RolloutShape(frame_shape(kart_cfg), layout.dim, len(kart_cfg.inputs))
    validate_envelope((got, decoded.end_race_stats, {**decoded.meta, "source": "http", "collector": "kart"}), shape)
    require_reward_keys(got, kart_cfg)


# -------------------------------------------------------------------------------------------------- Ray
SAVED = r"checkpoint saved to \S+: (\d+) frames"


def game_processes(folder: Path) -> dict[int, int]:
    """{pid: parent pid} of the live games whose settings are in `folder` (data.py game_environment: XDG_CONFIG_HOME)."""
    marker = f"XDG_CONFIG_HOME={folder / 'config'}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if CHILD_MODULE.encode() not in (entry / "cmdline").read_bytes():
                continue
            if marker not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            status = (entry / "status").read_text()
        except OSError:  # gone, or not ours to read
            continue
        if "State:\tZ" not in status:
            found[int(entry.name)] = int(re.search(r"PPid:\s+(\d+)", status).group(1))
    return found


def wait_games(folder: Path, ready, timeout_s: float, what: str, trainer: Trainer | None = None) -> dict[int, int]:
    """Until `ready(game_processes(folder))`: those processes; fails saying `what` (and the run's log, while it runs)."""
    deadline = time.monotonic() + timeout_s
    while True:
        games = game_processes(folder)
        if ready(games):
            return games
        if trainer is not None:
            assert trainer.process.poll() is None, trainer.log()[-4000:]
        assert time.monotonic() < deadline, f"{what} within {timeout_s} s; the games: {games}\n{trainer.log()[-4000:] if trainer else ''}"
        time.sleep(0.2)


def wait_saved(trainer: Trainer, more_than: int, timeout_s: float) -> int:
    """Until a checkpoint holds more than `more_than` frames: its frames."""
    deadline = time.monotonic() + timeout_s
    while True:
        frames = [int(f) for f in re.findall(SAVED, trainer.log())]
        if frames and frames[-1] > more_than:
            return frames[-1]
        assert trainer.process.poll() is None, trainer.log()[-4000:]
        assert time.monotonic() < deadline, f"no checkpoint with more than {more_than} frames:\n{trainer.log()[-4000:]}"
        time.sleep(0.5)


def race_points(tensorboard: Path) -> dict[str, list[float]]:
    """Every race's points in a run's TensorBoard folder: {tag: values}."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    points = {}
    for events in sorted(tensorboard.glob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            if tag.startswith("race/"):
                points.setdefault(tag, []).extend(event.value for event in accumulator.Scalars(tag))
    return points


@pytest.mark.ray
def test_ray_actors_play_supertuxkart_in_a_game_process_of_their_own_that_goes_with_them(tmp_path):
    """A run with one actor: its game is a fresh interpreter started from the Ray worker (none of the worker's files
    open in it), reading the data prepared where the learner's environment says; killing the worker (as Ray does to a
    dead actor's) ends the game too, Ray restarts the actor with a new game, and races go on. A live edit of the cut-off
    reaches the actor's races; TensorBoard holds a point per race; at the end no game is left."""
    pytest.importorskip("ray")
    from trackmania_rl.rollouts.ray.actor import MAX_RACES_IN_FLIGHT

    cache = tmp_path / "cache"
    prepare(folder=cache / "trackmania_rl" / "supertuxkart")  # the learner's (and so the cluster's) XDG_CACHE_HOME
    games_folder = cache / "trackmania_rl" / "supertuxkart"
    write_kart_config(tmp_path, save_frequency_s=2)
    environment = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    command = train_command(tmp_path, "kart_ray", "--collectors", "0", "--ray", "auto", "--ray-actors", "1")
    trainer = Trainer(command, tmp_path, env=environment)
    try:
        trainer.wait_for(r"Ray: 1 collector actor\(s\)", START_S)
        games = wait_games(games_folder, lambda g: len(g) == 1, START_S, "no game process of the actor", trainer)
        ((game, worker),) = games.items()
        assert b"ray" in Path(f"/proc/{worker}/cmdline").read_bytes().lower()  # started by the actor's Ray worker
        # a fresh interpreter: it holds its one socket to the actor, its output file (the actor's temporary file) and
        # its own files, none of the worker's (Ray's log files, its gRPC sockets)
        worker_files = {os.readlink(fd) for fd in Path(f"/proc/{worker}/fd").iterdir()}
        game_files = [os.readlink(fd) for fd in Path(f"/proc/{game}/fd").iterdir()]
        output = os.readlink(f"/proc/{game}/fd/1")
        inherited = [f for f in game_files if f in worker_files and f != output and not f.startswith("/dev/")]
        assert inherited == [] and sum(f.startswith("socket:") for f in game_files) == 1, (inherited, game_files)
        frames = wait_saved(trainer, 0, START_S + RACES_S)

        os.kill(worker, signal.SIGKILL)  # the actor's worker dies mid-race: its game goes with it, Ray restarts the actor
        deadline = time.monotonic() + 60
        while process_exists(game):
            assert time.monotonic() < deadline, f"the game {game} outlived its actor's worker {worker}"
            time.sleep(0.2)
        games = wait_games(games_folder, lambda g: len(g) == 1 and game not in g, START_S, "no new game after the restart", trainer)
        assert worker not in games.values()

        live = tmp_path / "save" / "kart_ray" / "config_live.py"
        text = live.read_text()
        setting = "cutoff_rollout_if_race_not_finished_within_duration_ms"
        edited = re.sub(rf"(?m)^{setting} = .*$", f"{setting} = {SHORTER_CUTOFF_MS}", text)
        assert edited != text
        live.write_text(edited)
        trainer.wait_for(rf"config reloaded: .*{setting}", 60)
        frames = [int(f) for f in re.findall(SAVED, trainer.log())][-1]
        # races after the edit: up to 3 + MAX_RACES_IN_FLIGHT were played with the old value when it reached the actor
        # (the one playing, one in the send queue, one with the sender waiting for a slot, those in flight), so wait
        # for more than that many of the old length
        under_way = 3 + MAX_RACES_IN_FLIGHT
        wait_saved(trainer, frames + (under_way + 1) * ACTIONS_PER_RACE, RACES_S)
        trainer.signal(signal.SIGTERM)
        assert trainer.finish(120) == 0, trainer.log()[-4000:]
        log = trainer.log()
        assert "game supertuxkart" in log and "Traceback" not in log and not re.search(r"rollout from .* refused", log), log[-4000:]
        saved = [int(f) for f in re.findall(SAVED, log)][-1]
        taken = int(re.search(r"Ray: (\d+) race\(s\) taken", log).group(1))
        # every race taken is stored whole: of 30 actions, or 20 once the edit reached the actor
        shorter_actions = SHORTER_CUTOFF_MS // 100
        shorter, rest = divmod(taken * ACTIONS_PER_RACE - saved, ACTIONS_PER_RACE - shorter_actions)
        assert rest == 0 and 1 <= shorter < taken, (taken, saved)
        points = race_points(tmp_path / "tensorboard" / "kart_ray")
        assert sum(len(values) for tag, values in points.items() if tag.endswith("/finished")) == taken, sorted(points)
        progress = [v for tag, values in points.items() if tag.endswith("/progress_fraction") for v in values]
        assert len(progress) == taken and all(0 <= v < 1 for v in progress)
        wait_games(games_folder, lambda g: not g, 30, "a game outlived the run")
    finally:
        trainer.kill()
