"""A Ray actor's game process (rollouts/ray/env_worker.py), a real process playing real CarRacing races, driven
from this test as its actor drives it: the test answers each observation with Q values and a policy version."""

import json
import pickle

import numpy as np
import pytest

from tests.helpers import SHORT_RACES, write_config
from trackmania_rl.agents import schedules
from trackmania_rl.config.live import LiveConfig
from trackmania_rl.config.values import config_to_values
from trackmania_rl.games import float_layout_for
from trackmania_rl.rollouts.contract import RolloutShape, validate_envelope
from trackmania_rl.rollouts.ray import race_arrays
from trackmania_rl.rollouts.ray.env_worker import GO, OBSERVATION, RACE, WANT_RACE, EnvWorker, ObservationLayout, Q

pytestmark = pytest.mark.ray

REPLY_TIMEOUT_S = 120  # a fresh process imports torch and builds the game on a busy machine


def _receive(worker: EnvWorker) -> bytes:
    assert worker.connection.poll(REPLY_TIMEOUT_S), "the game process said nothing"
    return worker.receive()


def _play_one_race(worker: EnvWorker, layout: ObservationLayout, frames_played: int, config_values=None):
    """GO, then answer every observation with Q values (A - 1 the greedy action; noise makes each step's own) and the
    version 7 + step // 5; returns (the race as an envelope, the refresh flags, the Q values and versions sent)."""
    assert _receive(worker)[:1] == WANT_RACE
    worker.send(GO + json.dumps({"frames_played": frames_played, "config_values": config_values}).encode())
    answer = bytearray(layout.answer_bytes)
    answer[0] = Q[0]
    flags, sent_q, sent_versions = [], [], []
    rng = np.random.default_rng(len(sent_q))
    while True:
        message = _receive(worker)
        if message[:1] == RACE:
            return race_arrays.to_envelope(pickle.loads(message[1:])), flags, sent_q, sent_versions
        assert message[:1] == OBSERVATION and len(message) == layout.message_bytes
        assert layout.frame(message).shape == layout.frame_shape and np.isfinite(layout.floats(message)).all()
        flags.append(bool(message[1]))
        q = (np.arange(layout.n_actions) + 0.1 * rng.random(layout.n_actions)).astype(np.float32)
        version = 7 + len(sent_versions) // 5
        layout.version(answer)[0] = version
        layout.q_values(answer)[:] = q
        sent_q.append(q)
        sent_versions.append(version)
        worker.send(answer)


def test_a_game_process_races_on_its_actors_answers_and_explores_as_a_collector(tmp_path):
    live = LiveConfig(write_config(tmp_path, SHORT_RACES), game_backend="carracing", log=lambda m: None)
    cfg = live.current
    float_layout = float_layout_for(cfg)
    layout = ObservationLayout((1, cfg.H_downsized, cfg.W_downsized), float_layout.dim, len(cfg.inputs))
    shape = RolloutShape(layout.frame_shape, float_layout.dim, len(cfg.inputs))
    setup = {"actor": 0, "producers": 1, "seed": 2_000, "game_backend": "carracing"}
    worker = EnvWorker(setup)
    worker.start(1, config_to_values(cfg))
    try:
        # exploring races at frame 0 (epsilon 1.0): the version and Q values of each step are the ones sent, each
        # race asks for the newest weights at its first decision and every update_inference_network_every_n_actions
        explored = 0
        for _ in range(3):
            envelope, flags, sent_q, sent_versions = _play_one_race(worker, layout, frames_played=0)
            rollout, _, meta = validate_envelope(envelope, shape)
            n = len(rollout["actions"])
            assert n == len(sent_q) > 0 and meta["source"] == "ray" and meta["collector"] == 0
            assert rollout["policy_version"] == sent_versions
            assert all(np.array_equal(a, b) for a, b in zip(rollout["q_values"], sent_q, strict=True))
            assert flags == [k % cfg.update_inference_network_every_n_actions == 0 for k in range(n)]
            greedy = [action == int(np.argmax(q)) for action, q in zip(rollout["actions"], sent_q, strict=True)]
            assert rollout["action_was_greedy"] == greedy
            expected = schedules.values_at(cfg, 0) if meta["is_explo"] else {"epsilon": 0.0, "epsilon_boltzmann": 0.0}
            assert (meta["epsilon"], meta["epsilon_boltzmann"]) == (expected["epsilon"], expected["epsilon_boltzmann"])
            if meta["is_explo"]:  # epsilon 1: uniformly random actions, about 1 in A greedy
                explored += 1
                assert sum(greedy) < 0.5 * n, greedy
            else:
                assert all(greedy)

        assert explored >= 1  # the map cycle starts with exploring races

        # a new config in GO reaches the game: (almost) no exploration left by its schedules, and a shorter overall
        # cut-off (the race ends by it)
        values = config_to_values(cfg)
        values["epsilon_schedule"] = [[0, 1.0], [10_000, 1e-12]]
        values["epsilon_boltzmann_schedule"] = [[0, 1e-12]]
        values["cutoff_rollout_if_race_not_finished_within_duration_ms"] = 800
        envelope, flags, sent_q, _ = _play_one_race(worker, layout, frames_played=10_000, config_values=values)
        rollout, end_race_stats, meta = validate_envelope(envelope, shape)
        assert meta["epsilon"] == pytest.approx(1e-12) and meta["epsilon_boltzmann"] == pytest.approx(1e-12)
        assert all(rollout["action_was_greedy"])
        assert len(rollout["actions"]) <= 800 // cfg.ms_per_action and end_race_stats["end_reason"] == "overall"

        # the actor is gone (its end of the socket closed): the game process ends by itself
        worker.connection.close()
        assert worker.process.wait(REPLY_TIMEOUT_S) == 0
    finally:
        worker.stop()
