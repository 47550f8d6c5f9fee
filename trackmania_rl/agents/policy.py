"""A collector's acting policy: its JIT inference network, kept in step with the shared network.

`update_network()` pulls newer weights from the shared network (the game calls it every
`update_inference_network_every_n_actions` actions); each decision records the policy version used.
`RacePolicy` is the part every race's policy shares, wherever its Q values are computed: each race's
exploration from the schedules (a Ray actor's game process explores over Q values its actor computed,
rollouts/ray/env_worker.py).
"""

from __future__ import annotations

import numpy as np

from trackmania_rl.agents import schedules
from trackmania_rl.agents.acting import make_inference_network
from trackmania_rl.agents.exploration import Explorer, Inferer


class RacePolicy:
    """What a game's `rollout` acts with: `policy(frame, state_float) -> (action, was_greedy, value, q_values)`,
    `update_network()`; `start_race` sets the race's exploration, `versions_used` lists each decision's policy
    version. A subclass sets `explorer` and implements the two calls."""

    explorer: Explorer

    def __init__(self):
        self.versions_used: list[int] = []
        self.epsilon = self.epsilon_boltzmann = 0.0

    def update_network(self) -> None:
        raise NotImplementedError

    def start_race(self, cfg, frames_played: int, explore: bool) -> None:
        """Exploration for the coming race from the schedules at the learner's frame count."""
        self.update_network()
        self.versions_used = []
        self.explorer.is_explo = explore
        scheduled = schedules.values_at(cfg, frames_played)
        self.epsilon = scheduled["epsilon"] if explore else 0.0
        self.epsilon_boltzmann = scheduled["epsilon_boltzmann"] if explore else 0.0
        self.explorer.set_exploration(self.epsilon, self.epsilon_boltzmann, cfg.tau_epsilon_boltzmann)


class CollectorPolicy(RacePolicy):
    def __init__(self, cfg, layout, n_actions: int, shared_network, device="cpu", rng: np.random.Generator | None = None):
        super().__init__()
        self.inference = make_inference_network(cfg, layout, n_actions, jit=cfg.use_jit, device=device)
        self.inferer = self.explorer = Inferer(self.inference, cfg, n_actions, device=device, rng=rng)
        self.shared_network = shared_network
        self.version = -1  # never fetched: the first update always copies
        self.update_network()

    def update_network(self) -> None:
        self.version = self.shared_network.fetch_into(self.inference.load_state_dict_from, self.version)
        self.inferer.prepare()  # outside the shared network's lock

    def __call__(self, frame: np.ndarray, state_float: np.ndarray):
        self.versions_used.append(self.version)
        return self.inferer.get_exploration_action(frame, state_float)
