"""The Ray source on a real single-node cluster with real CarRacing races: the envelope, the policy versions,
pausing, backpressure, a `get` that never waits beyond its timeout, and the CPU bound on actors."""

import os
import time
from itertools import islice
from types import SimpleNamespace

import pytest

ray = pytest.importorskip("ray")

from tests.rollouts.ray.conftest import wait_restarted  # noqa: E402
from trackmania_rl.agents.iqn import make_network  # noqa: E402
from trackmania_rl.config.loader import ConfigError  # noqa: E402
from trackmania_rl.games import float_layout_for  # noqa: E402
from trackmania_rl.games.map_cycle import MapCycle  # noqa: E402
from trackmania_rl.learner.sources import SourceContext  # noqa: E402
from trackmania_rl.rollouts.contract import RolloutShape, validate_envelope  # noqa: E402
from trackmania_rl.rollouts.ray.actor import MAX_RACES_IN_FLIGHT, PAUSED_SLEEP_S, STATUS_POLL_S  # noqa: E402
from trackmania_rl.rollouts.ray.source import RaySource, make_ray_source  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _weights(cfg, seed: int) -> dict:
    import torch

    torch.manual_seed(seed)
    return make_network(cfg, float_layout_for(cfg), len(cfg.inputs), "cpu").state_dict()


class SteppingClock:
    """A clock that moves `step` seconds at every reading, whatever the real time does: what `RaySource.get`
    measures its timeout with in these tests (`source.clock`), so that giving up is checked by count, not speed."""

    def __init__(self, step: float):
        self.now, self.step, self.readings = 0.0, step, 0

    def __call__(self) -> float:
        self.readings += 1
        self.now += self.step
        return self.now


def _next_race(source, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        envelope = source.get(timeout_s=0.5)
        if envelope is not None:
            return envelope
    raise AssertionError(f"no race within {timeout_s} s")


def test_races_arrive_as_valid_envelopes_paced_and_bounded(ray_head, short_races_live):
    cfg = short_races_live.current
    layout = float_layout_for(cfg)
    shape = RolloutShape((1, cfg.H_downsized, cfg.W_downsized), layout.dim, len(cfg.inputs))
    logs = []
    # the actors as producers 3 and 4 of 5 (a run with 3 local collectors): their shares of the map cycle follow those
    source = RaySource(2, short_races_live, "carracing", logs.append, first_producer=3, producers=5)
    shares = {k: [spec.seed for spec in islice(MapCycle(cfg.map_cycle, 3 + k, 5, cfg.seed), 80)] for k in (0, 1)}
    source.publish(1, _weights(cfg, 1))
    source.start()
    try:
        # both actors deliver; one may start seconds after the other (a fresh worker imports torch, builds the
        # game and the JIT on busy cores), so its first race can come after several of its neighbour's
        collectors, versions, races = set(), set(), 0
        deadline = time.monotonic() + 180
        while (races < 6 or collectors != {0, 1}) and races < 60 and time.monotonic() < deadline:
            rollout, end_race_stats, meta = validate_envelope(_next_race(source), shape)
            assert meta["source"] == "ray" and "race_finished" in end_race_stats
            assert meta["seed"] == shares[meta["collector"]][meta["loop_number"] - 1], meta
            collectors.add(meta["collector"])
            versions.update(rollout["policy_version"])
            races += 1
        assert collectors == {0, 1}, (races, collectors, ray.get([slot.handle.stats.remote() for slot in source.slots]))
        assert versions == {1}

        # a newer publish reaches the actors, which record it per action
        source.publish(2, _weights(cfg, 2))
        deadline = time.monotonic() + 60
        while 2 not in versions and time.monotonic() < deadline:
            versions.update(_next_race(source)[0]["policy_version"])
        assert 2 in versions

        # backpressure: while nothing is taken, every game comes to wait for its full sender (the deadline bounds a
        # hang only), with MAX_RACES_IN_FLIGHT races put; waiting, it plays no race, however often it is asked
        def all_stats() -> list[dict]:
            return ray.get([slot.handle.stats.remote() for slot in source.slots])

        deadline = time.monotonic() + 120
        while not all((stats := all_stats())[k]["waiting_for_sender"] for k in (0, 1)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(s["waiting_for_sender"] and s["in_flight"] == MAX_RACES_IN_FLIGHT for s in stats), stats
        # never paused so far: each actor asked the store for the status once, at its start; publish 2 reached it with
        # a handoff
        assert all(s["store_polls"] == 1 for s in stats), stats
        for _ in range(5):
            later = all_stats()
            assert [s["races_played"] for s in later] == [s["races_played"] for s in stats], (stats, later)
            assert all(s["waiting_for_sender"] and s["in_flight"] == MAX_RACES_IN_FLIGHT for s in later), later

        # get gives up when its timeout has passed by its clock, races in play or not: with a clock that moves
        # 0.05 s per reading, a get of 0.2 s reads it at most 0.2 / 0.05 + 2 times (its start, each wait, the end)
        while source.get(timeout_s=0.0) is not None:
            pass
        source.pause()
        source.clock = clock = SteppingClock(0.05)
        for _ in range(5):
            clock.readings = 0
            source.get(timeout_s=0.2)
            assert clock.readings <= 0.2 / 0.05 + 2, clock.readings
        source.clock = time.perf_counter

        # paused: every actor acknowledges the pause and parks its game (the race in play, if any, played out); once
        # every race they played is taken, no new race comes and none is played, while each game goes on checking
        # the pause (its parked count grows) across several polls of the store. The deadlines bound a hang only.
        def actor_stats() -> list[dict]:
            return ray.get([slot.handle.stats.remote() for slot in source.slots], timeout=60)

        def all_taken(stats: list[dict]) -> bool:  # each actor parked, every race it played (this incarnation) taken
            return all(
                s["paused"] and s["parked"] > 0 and s["incarnation"] == slot.incarnation and slot.taken == s["races_played"]
                for s, slot in zip(stats, source.slots, strict=True)
            )

        deadline = time.monotonic() + 120
        while not all_taken(stats := actor_stats()):
            assert time.monotonic() < deadline, ("the actors did not park, or their races did not come", stats)
            source.get(timeout_s=0.2)
        # the game's pause checks spanning four of the actor's polls of the store (each could have unpaused it); a race
        # played meanwhile shows in races_played, and would have to come (every race played is taken so far)
        checks = 4 * round(STATUS_POLL_S / PAUSED_SLEEP_S) + 1
        parked_then = [s["parked"] for s in stats]
        deadline = time.monotonic() + 120
        while True:
            assert source.get(timeout_s=0.2) is None, "a race came while paused, after every race played was taken"
            later = actor_stats()
            assert all_taken(later), ("a race was played while paused", stats, later)
            assert [s["races_played"] for s in later] == [s["races_played"] for s in stats], (stats, later)
            if all(s["parked"] >= then + checks for s, then in zip(later, parked_then, strict=True)):
                break
            assert time.monotonic() < deadline, ("the parked games stopped checking the pause", stats, later)
        # every race taken is acknowledged (the next handoff carried the count): no actor holds a slot for it
        assert all(s["in_flight"] == 0 for s in later), later
        assert all(s["store_polls"] > 1 for s in later), later  # a parked game asks the store to see the pause lifted
        assert source.health().paused
        source.resume()
        _next_race(source, 30)
        # the actors' timings are since their last stats() (read above): a race of actor 0 played since brings its own
        deadline = time.monotonic() + 120
        while _next_race(source, 30)[2]["collector"] != 0:
            assert time.monotonic() < deadline, "no race of actor 0 after the pause"

        health = source.health()
        assert (health.producers, health.alive, health.exhausted) == (2, 2, False)
        figures = source.scalars()
        assert figures["ray/actors_alive"] == 2 and figures["ray/races_lost"] == 0
        assert figures["ray/actor0/game_step_ms"] > 0 and figures["ray/actor0/inference_ms"] > 0 and "ray/actor0/send_ms" in figures
    finally:
        source.stop()
    assert any("0 lost" in line for line in source.summary())


def test_more_actors_than_the_cluster_has_cpus_is_refused_with_the_numbers(ray_head, short_races_live, tmp_path):
    options = SimpleNamespace(ray=ray_head.address, ray_actors=3)
    context = SourceContext(options, short_races_live, short_races_live.path, "carracing", None, tmp_path, lambda m: None)
    with pytest.raises(ConfigError, match=r"--ray-actors 3: the Ray cluster at .* has 2 CPU\(s\)"):
        make_ray_source(context)
    assert ray.is_initialized()  # the connection it found is left as it was


def test_a_run_given_an_address_nothing_answers_at_is_refused_by_the_probe_and_writes_nothing(tmp_path):
    import subprocess
    import sys

    from tests.faults.helpers import TRAIN
    from trackmania_rl.rollouts.ray.cluster import free_port

    address = f"127.0.0.1:{free_port('127.0.0.1')}"  # nothing listens there
    folders = ["--save-dir", str(tmp_path / "save"), "--tensorboard-dir", str(tmp_path / "tb")]
    args = ["--ray", address, "--ray-actors", "1", *folders, "--max-minutes", "1"]
    result = subprocess.run([sys.executable, str(TRAIN), *args], capture_output=True, text=True, timeout=120)
    # refused by our probe (its words), not by Ray's own retries (a minute or more of warnings): the probe's count
    # of tries is the next test's
    assert result.returncode == 2 and f"nothing answers at {address}" in result.stderr, result.stderr
    assert not (tmp_path / "save" / "carracing_default" / "config_live.py").exists()


def test_the_probe_of_an_address_gives_up_once_its_wait_has_passed_by_its_clock():
    from trackmania_rl.rollouts.ray.cluster import ClusterError, check_answers, free_port

    address = f"127.0.0.1:{free_port('127.0.0.1')}"  # nothing listens there
    clock, sleeps = SteppingClock(0.5), []
    with pytest.raises(ClusterError, match=f"nothing answers at {address}"):
        check_answers(address, wait_s=3.0, clock=clock, sleep=sleeps.append)
    # its start, then one reading per try: a try every 0.5 s of its clock until 3 s have passed, and no real sleep
    assert clock.readings == 3.0 / 0.5 + 1 and len(sleeps) == clock.readings - 2, (clock.readings, sleeps)


def test_an_answer_comes_back_inside_the_reply_and_the_drivers_weights_stay_in_the_object_store(ray_head):
    import numpy as np

    from trackmania_rl.rollouts.ray.cluster import INLINE_RETURN_BYTES

    # the nodes we start return a task's value up to INLINE_RETURN_BYTES inside the reply (an actor's handoff of its
    # races): no object-store copy on any node; what the driver puts (the published weights) is still in the store,
    # where every actor of a node reads one copy
    @ray.remote(num_cpus=0)
    def answer(nbytes: int):
        return np.ones(nbytes, np.uint8)

    returned = answer.remote(4 << 20)
    assert int(ray.get(returned).sum()) == 4 << 20
    put = ray.put(np.ones(4 << 20, np.uint8))
    locations = ray.experimental.get_object_locations([returned, put])
    assert locations[returned]["node_ids"] == [], locations
    assert len(locations[put]["node_ids"]) == 1, locations
    assert 4 << 20 < INLINE_RETURN_BYTES


def test_a_restarted_policy_store_is_sent_the_learners_state_again(ray_head, short_races_live):
    """The store's process dies and Ray restarts it with its constructor's state (nothing published, not paused,
    the run's first config): the source's health check sees the restart and sends the learner's state again, so that
    an actor starting or parked afterwards follows the run as it is (the live edit included), not its first minute."""
    logs = []
    source = RaySource(1, short_races_live, "carracing", logs.append)  # no actor started: the store alone
    try:
        source.publish(3, _weights(short_races_live.current, 3))
        source.pause()
        path = short_races_live.path
        path.write_text(path.read_text() + "\ncutoff_rollout_if_race_not_finished_within_duration_ms = 1_400\n")
        os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # a newer mtime, however coarse the file system's
        assert short_races_live.reload()
        source.learner_progress(1234, 10)
        assert ray.get(source.store.status.remote(), timeout=30) == (3, True, 1234, 2)

        ray.kill(source.store, no_restart=False)  # its process dies; Ray restarts it
        assert wait_restarted(source.store._actor_id.hex(), 90)["NumRestarts"] == 1  # the deadlines bound a hang only
        status, deadline = None, time.monotonic() + 90
        while status != (3, True, 1234, 2) and time.monotonic() < deadline:
            source.health()  # reads the actor table every HEALTH_PERIOD_S
            try:
                status = ray.get(source.store.status.remote(), timeout=10)
            except ray.exceptions.RayError:  # restarting
                pass
            time.sleep(0.2)
        assert status == (3, True, 1234, 2), (status, logs)
        version, values = ray.get(source.store.config.remote(), timeout=30)
        assert version == 2 and values["cutoff_rollout_if_race_not_finished_within_duration_ms"] == 1_400
        weights_version, [ref] = ray.get(source.store.weights.remote(), timeout=30)
        assert weights_version == 3 and ref is not None
        assert sum("policy store restarted" in line for line in logs) == 1, logs
    finally:
        source.stop()
