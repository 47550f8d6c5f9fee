"""A collector's acting policy: its JIT inference network, kept in step with the shared network.

`update_network()` pulls newer weights from the shared network (the game calls it every
`update_inference_network_every_n_actions` actions); each decision records the policy version used.
"""

from __future__ import annotations

import numpy as np

from trackmania_rl.agents import schedules
from trackmania_rl.agents.acting import make_inference_network
from trackmania_rl.agents.exploration import Inferer


class CollectorPolicy:
    def __init__(self, cfg, layout, n_actions: int, shared_network, device="cpu", rng: np.random.Generator | None = None):
        self.inference = make_inference_network(cfg, layout, n_actions, jit=cfg.use_jit, device=device)
        self.inferer = Inferer(self.inference, cfg, n_actions, device=device, rng=rng)
        self.shared_network = shared_network
        self.version = -1  # never fetched: the first update always copies
        self.versions_used: list[int] = []
        self.epsilon = self.epsilon_boltzmann = 0.0
        self.update_network()

    def update_network(self) -> None:
        self.version = self.shared_network.fetch_into(self.inference.load_state_dict_from, self.version)
        self.inferer.prepare()  # outside the shared network's lock

    def start_race(self, cfg, frames_played: int, explore: bool) -> None:
        """Exploration for the coming race from the schedules at the learner's frame count."""
        self.update_network()
        self.versions_used = []
        self.inferer.is_explo = explore
        scheduled = schedules.values_at(cfg, frames_played)
        self.epsilon = scheduled["epsilon"] if explore else 0.0
        self.epsilon_boltzmann = scheduled["epsilon_boltzmann"] if explore else 0.0
        self.inferer.set_exploration(self.epsilon, self.epsilon_boltzmann, cfg.tau_epsilon_boltzmann)

    def __call__(self, frame: np.ndarray, state_float: np.ndarray):
        self.versions_used.append(self.version)
        return self.inferer.get_exploration_action(frame, state_float)
