"""A real collector process behind the local source: envelopes that meet the contract, versions, pausing."""

import time

import pytest
import torch.multiprocessing as torch_mp

from tests.helpers import SHORT_RACES, write_config
from trackmania_rl.agents.iqn import make_network
from trackmania_rl.config.loader import load_config
from trackmania_rl.games import float_layout_for
from trackmania_rl.rollouts.contract import RolloutShape, validate_envelope
from trackmania_rl.rollouts.local.collector import collector_main
from trackmania_rl.rollouts.local.pool import CollectorPool
from trackmania_rl.rollouts.local.shared_network import SharedNetwork
from trackmania_rl.rollouts.local.source import LocalCollectorSource


@pytest.mark.slow
def test_paused_collector_plays_no_race_and_resumes_with_versioned_envelopes(tmp_path):
    config_path = write_config(tmp_path, SHORT_RACES)
    cfg = load_config(config_path, game_backend="carracing")
    layout = float_layout_for(cfg)
    ctx = torch_mp.get_context("spawn")
    shared = SharedNetwork(make_network(cfg, layout, len(cfg.inputs)), ctx)
    pause_event, frames_played = ctx.Event(), ctx.Value("q", 0, lock=False)
    idle_flags = ctx.Array("b", 1, lock=False)
    args = (str(config_path), "carracing", 1, shared, frames_played, pause_event, idle_flags)
    pool = CollectorPool(ctx, collector_main, args=args, count=1, queue_size=1, log=lambda m: None)
    source = LocalCollectorSource(pool, shared, pause_event, frames_played, stall_timeout_s=lambda: 60.0, idle_flags=idle_flags)
    source.publish(5, make_network(cfg, layout, len(cfg.inputs)).state_dict())
    source.pause()
    source.start()
    try:
        assert source.get(timeout_s=12.0) is None  # started, loaded, but starts no race while paused
        health = source.health()
        assert health.alive == 1 and health.replaced == [] and health.paused
        assert source.idle_games_here() == 1  # waiting out the pause: its core is the learner's
        source.resume()
        assert source.idle_games_here() == 0  # at once, before the collector wakes: no oversubscribed core
        envelope = None
        deadline = time.time() + 60
        while envelope is None and time.time() < deadline:
            envelope = source.get(timeout_s=1.0)
        assert envelope is not None
        assert idle_flags[0] == 0  # it played
        rollout, _, meta = validate_envelope(envelope, RolloutShape((1, cfg.H_downsized, cfg.W_downsized), layout.dim, len(cfg.inputs)))
        assert meta["source"] == "local" and set(rollout["policy_version"]) == {5}
        assert len(rollout["policy_version"]) == len(rollout["actions"]) > 0
    finally:
        source.stop()
    assert not pool.slots[0].process.is_alive()
