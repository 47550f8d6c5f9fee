"""Action selection from one state (trackmania_rl/agents/exploration.py): greedy, epsilon and
epsilon-Boltzmann modes of the Inferer."""

import numpy as np
import pytest
import torch
from torch import nn

from trackmania_rl.agents.exploration import Inferer


class ConstantQ(nn.Module):
    def __init__(self, q):
        super().__init__()
        self.q = torch.as_tensor(q, dtype=torch.float32)

    def forward(self, img, floats, n_quantiles, taus=None):
        return self.q.expand(img.shape[0], n_quantiles, -1), taus


def argmax_probabilities(q: np.ndarray, tau: float) -> np.ndarray:
    """P(argmax(q + tau Z) = a) for Z standard normal per action: the integral over a's noise z of the normal density
    times the chance that every other action b stays below, Phi((q_a - q_b) / tau + z), on a fine grid."""
    z = torch.linspace(-9, 9, 20_001, dtype=torch.float64)
    density = torch.exp(-(z**2) / 2) / np.sqrt(2 * np.pi)
    q = torch.as_tensor(q, dtype=torch.float64)
    probabilities = []
    for a in range(len(q)):
        others = [torch.special.ndtr((q[a] - q[b]) / tau + z) for b in range(len(q)) if b != a]
        probabilities.append(float(torch.trapezoid(density * torch.stack(others).prod(dim=0), z)))
    return np.array(probabilities)


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

    # epsilon-Boltzmann: argmax(Q + tau N(0, 1)); each action as often as that law says for the temperature asked
    draws, q_values = 4_000, np.array([0.0, 5.0, 1.0, 2.0])
    for tau in (0.5, 1.5, 4.0):
        inferer.set_exploration(epsilon=0.0, epsilon_boltzmann=1.0, tau_epsilon_boltzmann=tau)
        counts = np.bincount([inferer.get_exploration_action(frame, floats)[0] for _ in range(draws)], minlength=4)
        expected = argmax_probabilities(q_values, tau)
        sigma = np.sqrt(expected * (1 - expected) / draws)
        assert np.all(np.abs(counts / draws - expected) <= 4 * sigma + 1e-3), (tau, counts / draws, expected)
    # the temperatures give clearly different laws: an Inferer that ignored tau could not match all three
    assert argmax_probabilities(q_values, 4.0)[1] < 0.6 < 0.95 < argmax_probabilities(q_values, 0.5)[1]
    assert argmax_probabilities(q_values, 1.5).sum() == pytest.approx(1.0)

    inferer.is_explo = False  # eval: greedy whatever epsilon
    inferer.set_exploration(epsilon=1.0, epsilon_boltzmann=1.0)
    assert {inferer.get_exploration_action(frame, floats)[0] for _ in range(50)} == {1}
