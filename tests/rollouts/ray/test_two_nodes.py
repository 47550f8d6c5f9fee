"""The Ray source on a real two-node cluster on this machine (head 127.0.0.2, worker 127.0.0.3, token auth on):
one weight copy per node whatever the actors per node, an actor SIGKILLed mid-race, the worker node stopped."""

import os
import signal
import time

import pytest

ray = pytest.importorskip("ray")

from trackmania_rl.benchmarks.ray import weight_copies_per_node  # noqa: E402
from trackmania_rl.games import float_layout_for  # noqa: E402
from trackmania_rl.rollouts.contract import RolloutShape, validate_envelope  # noqa: E402
from trackmania_rl.rollouts.ray.actor import MAX_RACES_IN_FLIGHT  # noqa: E402
from trackmania_rl.rollouts.ray.source import RaySource  # noqa: E402

from .test_source import SteppingClock, _weights  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _actor_entries(source) -> dict:
    table = ray._private.state.actors()
    return {slot.index: table[slot.handle._actor_id.hex()] for slot in source.slots}


def _wait_all_delivered(source, count: int, timeout_s: float = 90.0) -> list:
    seen, envelopes = set(), []
    deadline = time.monotonic() + timeout_s
    while len(seen) < count and time.monotonic() < deadline:
        envelope = source.get(timeout_s=0.5)
        if envelope is not None:
            seen.add(envelope[2]["collector"])
            envelopes.append(envelope)
    assert len(seen) == count, f"only actors {sorted(seen)} delivered within {timeout_s} s"
    return envelopes


def test_all_actors_of_a_node_read_one_copy_of_the_weights(ray_head, worker_node, short_races_live):
    cfg = short_races_live.current
    source = RaySource(4, short_races_live, "carracing", lambda m: None)
    source.publish(1, _weights(cfg, 1))
    source.start()
    try:
        _wait_all_delivered(source, 4)
        measured = weight_copies_per_node(source, 2, _weights(cfg, 2))
    finally:
        source.stop()
    assert measured["actors_per_node"] == {ray_head.ip: 2, worker_node.ip: 2}, measured
    # each node's object store holds the weights once: 2 actors per node did not make 2 copies
    assert all(0.95 <= copies <= 1.2 for copies in measured["copies"].values()), measured
    assert measured["all_views_of_object_store"] and measured["nodes_listed_by_ray"] == 2, measured


def test_an_actor_killed_before_the_learner_heard_from_it_is_counted_restarted(ray_head, short_races_live):
    logs = []
    source = RaySource(1, short_races_live, "carracing", logs.append)
    source.publish(1, _weights(short_races_live.current, 1))
    source.start()
    try:
        # killed as soon as it answers: the source has not seen the actor's first incarnation when it dies (its first
        # handoff waits up to 1 s for a race, and no race is played that soon; its process id asked of the actor
        # itself: the actor table's may not be its process yet when it first says ALIVE)
        os.kill(ray.get(source.slots[0].handle.stats.remote(), timeout=90)["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 90
        while source.slots[0].races == 0 and time.monotonic() < deadline:
            source.get(timeout_s=0.5)
        assert source.slots[0].races > 0, "the restarted actor delivered nothing:\n" + "\n".join(logs)
        assert _actor_entries(source)[0]["NumRestarts"] == 1  # the kill took
        assert source.slots[0].restarts == 1, logs
    finally:
        source.stop()
    assert any("Ray actor 0 was restarted (1 time(s))" in line for line in logs), logs


def test_a_killed_actor_is_restarted_and_a_stopped_node_never_blocks_the_learner(ray_head, worker_node, short_races_live):
    cfg = short_races_live.current
    layout = float_layout_for(cfg)
    shape = RolloutShape((1, cfg.H_downsized, cfg.W_downsized), layout.dim, len(cfg.inputs))
    logs = []
    source = RaySource(2, short_races_live, "carracing", logs.append)  # SPREAD: one actor on each node
    source.publish(1, _weights(cfg, 1))
    source.start()
    try:
        _wait_all_delivered(source, 2)
        entries = _actor_entries(source)
        on_worker = next(i for i, e in entries.items() if e["Address"]["IPAddress"] == worker_node.ip)
        on_head = next(i for i, e in entries.items() if e["Address"]["IPAddress"] == ray_head.ip)

        # SIGKILL the head node's actor in the middle of its races, then publish while it is down
        os.kill(ray.get(source.slots[on_head].handle.stats.remote(), timeout=90)["pid"], signal.SIGKILL)
        source.publish(2, _weights(cfg, 2))
        deadline = time.monotonic() + 90
        after_restart = None
        while after_restart is None and time.monotonic() < deadline:
            envelope = source.get(timeout_s=0.5)
            if envelope is not None:
                validate_envelope(envelope, shape)
                if envelope[2]["collector"] == on_head and source.slots[on_head].restarts == 1:
                    after_restart = envelope
        assert after_restart is not None, "the killed actor delivered nothing after its restart:\n" + "\n".join(logs)
        assert min(after_restart[0]["policy_version"]) == 2  # the restarted actor pulled the weights again
        assert _actor_entries(source)[on_head]["NumRestarts"] == 1
        assert source.slots[on_head].lost <= MAX_RACES_IN_FLIGHT and source.slots[on_worker].lost == 0
        assert any("was restarted" in line for line in logs)

        # the worker node leaves: its actor is rescheduled on the head (1 CPU free there) or left pending; every get
        # gives up by its own clock (moving 0.1 s per reading: at most 0.3 / 0.1 + 2 readings for a get of 0.3 s),
        # the source is never exhausted, and the head's actor keeps delivering
        worker_node.stop()
        source.clock = clock = SteppingClock(0.1)
        stopped = time.monotonic()
        gets, delivered = 0, {on_head: 0, on_worker: 0}
        while time.monotonic() - stopped < 25:
            clock.readings = 0
            envelope = source.get(timeout_s=0.3)
            assert clock.readings <= 0.3 / 0.1 + 2, clock.readings
            gets += 1
            if envelope is not None:
                validate_envelope(envelope, shape)
                delivered[envelope[2]["collector"]] += 1
            health = source.health()
            assert not health.exhausted
        assert delivered[on_head] >= 3, (delivered, gets)
        state = _actor_entries(source)[on_worker]["State"]
        assert state in ("ALIVE", "RESTARTING", "PENDING_CREATION"), state
    finally:
        source.stop()
    assert "lost with their actor or node" in source.summary()[-1]
