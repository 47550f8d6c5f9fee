"""A collector process playing SuperTuxKart in the learner's pool (rollouts/local/): when its game's process aborts
(SIGABRT, what the game's own fatal errors raise), the race in play is dropped, the game rebuilt, and the same collector
goes on delivering races. Real processes: the pool, the collector, the game."""

import os
import signal
import time

import pytest
import torch.multiprocessing as torch_mp

from tests.games.supertuxkart.conftest import game_process_of, write_kart_config
from trackmania_rl.agents.iqn import make_network
from trackmania_rl.config.loader import load_config
from trackmania_rl.config.whole_copy import whole_config_text
from trackmania_rl.games import float_layout_for
from trackmania_rl.rollouts.local.collector import collector_main
from trackmania_rl.rollouts.local.pool import CollectorPool
from trackmania_rl.rollouts.local.shared_network import SharedNetwork

pytestmark = [pytest.mark.supertuxkart, pytest.mark.slow]

# short races on one short track: the untrained network's races end by the 5 s no-progress cut-off or the 20 s one
SHORT = """
map_cycle = [("olivermath", 0, True, True)]
cutoff_rollout_if_race_not_finished_within_duration_ms = 20_000
"""


def test_a_collector_whose_game_aborts_drops_that_race_and_goes_on(tmp_path, capfd):
    live = tmp_path / "config_live.py"  # a run's live config is written whole (no base)
    live.write_text(whole_config_text(write_kart_config(tmp_path, SHORT)))
    cfg = load_config(live)
    layout = float_layout_for(cfg)
    ctx = torch_mp.get_context("spawn")
    shared = SharedNetwork(make_network(cfg, layout, len(cfg.inputs)), ctx)
    shared.publish(1, make_network(cfg, layout, len(cfg.inputs)).state_dict())
    args = (str(live), "supertuxkart", 1, shared, ctx.Value("q", 0, lock=False), ctx.Event())
    logs = []
    pool = CollectorPool(ctx, collector_main, args=args, count=1, queue_size=1, log=logs.append, max_restarts=3)

    # deadlines that only catch a hang: on a machine busy with other runs, a collector's start alone took minutes
    def next_race(timeout_s=600):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pool.check(stall_timeout_s=600)
            got = pool.get_rollout(timeout_s=0.5)
            if got is not None:
                return got[1]
        return None

    pool.start()
    try:
        first = next_race()
        assert first is not None and first[2]["map_name"] == "olivermath"
        collector = pool.slots[0].process
        game = game_process_of(collector.pid)
        assert game is not None
        os.kill(game, signal.SIGABRT)
        deadline = time.monotonic() + 600
        while game_process_of(collector.pid) in (None, game) and time.monotonic() < deadline:
            time.sleep(0.2)  # the collector finds its game dead at its next request, and starts another
        rebuilt = game_process_of(collector.pid)
        assert rebuilt not in (None, game), "the collector did not rebuild its game"
        later = [next_race() for _ in range(3)]  # the queue's race of before the abort, then races of the new game
        assert all(race is not None and race[1]["n_actions"] > 0 for race in later)
        # the same collector process went on: the pool never had to restart it
        assert pool.slots[0].process is collector and collector.is_alive() and pool.slots[0].restarts == 0
    finally:
        pool.stop()
    out = capfd.readouterr().out
    assert "crashed and is dropped" in out and "exit status -6" in out, out[-3000:]
