"""Playing races: one game instance and its acting policy, taking tracks from a map cycle (DESIGN §2).

A local collector process, a Ray collector actor and the reference HTTP client all play through a
`RacePlayer`; what differs between them is where the weights come from (`weights`: any object with
`fetch_into(load_fn, have_version) -> version`, like rollouts/local/shared_network.SharedNetwork) and where
the envelope goes. Each action records the policy version it was chosen with.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from trackmania_rl.agents.policy import CollectorPolicy
from trackmania_rl.games import make_game_instance
from trackmania_rl.games.base import GameCrashed
from trackmania_rl.games.map_cycle import MapCycle
from trackmania_rl.rollouts.contract import POLICY_VERSION, Envelope


def producer_seed(run_seed: int, index: int) -> int:
    """The random seed of producer `index` (collector, actor, client) of a run: distinct per producer and per run."""
    return 1_000 + index + 100_003 * run_seed


class RacePlayer:
    """`index` of `producers_count` picks this player's share of the map cycle; `source_name` goes in every
    envelope's meta['source']."""

    def __init__(self, cfg, game_backend: str, weights, index: int, producers_count: int, source_name: str, log: Callable[[str], None]):
        self.cfg = cfg
        self.index = index
        self.source_name = source_name
        self.log = log
        self.game = make_game_instance(cfg, game_backend)
        self.policy = CollectorPolicy(cfg, self.game.float_layout, len(cfg.inputs), weights)
        self.cycle = MapCycle(cfg.map_cycle, collector_index=index, collectors_count=producers_count, seed=cfg.seed)
        self.races_played = 0
        self.last_handoff = time.perf_counter()  # when the previous race was handed on (queue, object store, HTTP)

    def update_config(self, cfg) -> None:
        """A reloaded config: live game settings (cut-offs) and the map cycle."""
        self.cfg = cfg
        self.game.update_config(cfg)
        self.cycle.set_cycle(cfg.map_cycle)

    def play(self, frames_played: int, on_action: Callable[[], None] | None = None) -> Envelope | None:
        """One race on the next track of the cycle, with exploration scheduled at `frames_played` (the learner's
        count). None when the game crashed (logged; the race is dropped). `on_action` is called before every
        decision (a heartbeat)."""
        map_spec = next(self.cycle)
        self.races_played += 1
        self.policy.start_race(self.cfg, frames_played, explore=map_spec.is_explo)
        policy = self.policy
        if on_action is None:
            acting_policy = policy
        else:

            def acting_policy(frame, state_float):
                on_action()
                return policy(frame, state_float)

        start = time.perf_counter()
        try:
            zone_centers = self.game.zone_centers_for(map_spec)  # cached by the game per seed
            rollout_results, end_race_stats = self.game.rollout(acting_policy, map_spec, zone_centers, policy.update_network)
        except GameCrashed as e:
            self.log(f"race on {map_spec.name} seed {map_spec.seed} crashed and is dropped: {e}")
            return None
        rollout_duration = time.perf_counter() - start
        rollout_results[POLICY_VERSION] = list(policy.versions_used)
        meta = {
            "source": self.source_name,
            "collector": self.index,
            "loop_number": self.races_played,
            "map_name": map_spec.name,
            "seed": map_spec.seed,
            "map_status": self.cycle.status(map_spec.name),
            "is_explo": map_spec.is_explo,
            "fill_buffer": map_spec.fill_buffer,
            "rollout_duration_s": rollout_duration,
            "worker_time_in_rollout_fraction": rollout_duration / max(1e-9, time.perf_counter() - self.last_handoff),
            "epsilon": policy.epsilon,
            "epsilon_boltzmann": policy.epsilon_boltzmann,
        }
        return Envelope(rollout_results, end_race_stats, meta)

    def handed_off(self) -> None:
        """The race was handed on: the time until the next one's end counts against its rollout fraction."""
        self.last_handoff = time.perf_counter()

    def close(self) -> None:
        self.game.close()
