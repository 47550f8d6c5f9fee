"""Action selection from one state (trackmania_rl/agents/exploration.py): greedy, epsilon and
epsilon-Boltzmann modes of the Inferer."""

import numpy as np
import torch
from torch import nn

from trackmania_rl.agents.exploration import Inferer


class ConstantQ(nn.Module):
    def __init__(self, q):
        super().__init__()
        self.q = torch.as_tensor(q, dtype=torch.float32)

    def forward(self, img, floats, n_quantiles, taus=None):
        return self.q.expand(img.shape[0], n_quantiles, -1), taus


def test_inferer_modes(cfg):
    frame, floats = np.zeros((1, 16, 16), np.uint8), np.zeros(5, np.float32)
    tied = Inferer(ConstantQ([1.0, 3.0, 3.0, 0.0]), cfg, 4, rng=np.random.default_rng(0))
    action, greedy, value, q = tied.get_exploration_action(frame, floats)
    assert (action, greedy, value) == (1, True, 3.0) and q.dtype == np.float32 and q.shape == (4,)  # lowest index on ties

    inferer = Inferer(ConstantQ([0.0, 5.0, 1.0, 2.0]), cfg, 4, rng=np.random.default_rng(0))
    inferer.set_exploration(epsilon=1.0, epsilon_boltzmann=0.0)
    draws = [inferer.get_exploration_action(frame, floats) for _ in range(2000)]
    counts = np.bincount([d[0] for d in draws], minlength=4)
    assert np.all(np.abs(counts / 2000 - 0.25) < 0.05)
    assert all(d[1] == (d[0] == 1) and d[2] == 5.0 for d in draws)

    inferer.set_exploration(epsilon=0.0, epsilon_boltzmann=1.0, tau_epsilon_boltzmann=1.5)
    boltzmann = np.bincount([inferer.get_exploration_action(frame, floats)[0] for _ in range(2000)], minlength=4)
    assert boltzmann[1] > 1500 and boltzmann[3] > 0 and boltzmann[3] > boltzmann[0]  # Q + 1.5 N(0,1): close actions sometimes

    inferer.is_explo = False  # eval: greedy whatever epsilon
    inferer.set_exploration(epsilon=1.0, epsilon_boltzmann=1.0)
    assert {inferer.get_exploration_action(frame, floats)[0] for _ in range(50)} == {1}
