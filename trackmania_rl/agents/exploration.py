"""Action selection from one state: greedy on the mean Q at fixed quantile fractions, epsilon and
epsilon-Boltzmann exploration (collectors, evaluation, analysis)."""

from __future__ import annotations

import numpy as np
import torch


def midpoint_taus(n_quantiles: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(1, K) fractions (k + 0.5) / K: a deterministic quantile grid whose mean estimates E[Z]."""
    return ((torch.arange(n_quantiles, dtype=torch.float32) + 0.5) / n_quantiles).unsqueeze(0).to(device)


class Inferer:
    """Action selection from one state (collectors, analysis).

    Q(a) = mean over `iqn_k` quantiles at the fixed midpoint fractions (deterministic for a given network).
    Exploring (`is_explo`): with probability epsilon a uniformly random action, else with probability
    epsilon_boltzmann argmax(Q + tau_epsilon_boltzmann N(0, 1)), else greedy. Not exploring: greedy.
    Returns (action, action_was_greedy = action == argmax Q, value = max Q, Q as float32 (A,)); ties go to
    the lowest index. `network` is any callable with IQNNetwork's forward (eager, TorchScript or compiled).
    """

    def __init__(
        self,
        network,
        cfg,
        n_actions: int,
        device: torch.device | str = "cpu",
        rng: np.random.Generator | None = None,
        is_explo: bool = True,
    ):
        self.network = network
        self.n_actions = int(n_actions)
        self.device = torch.device(device)
        self.rng = rng if rng is not None else np.random.default_rng()
        self.is_explo = is_explo
        self.epsilon = 0.0
        self.epsilon_boltzmann = 0.0
        self.tau_epsilon_boltzmann = float(cfg.tau_epsilon_boltzmann)
        self.n_quantiles = int(cfg.iqn_k)
        self.taus = midpoint_taus(self.n_quantiles, self.device)
        # on the CPU, an InferenceNetwork (agents/acting.py) acts through its short program for the mean Q
        # at these fixed fractions; other networks, and any network on a GPU, through forward
        mean_q_at = getattr(network, "mean_q_at", None)
        self._mean_q = mean_q_at(self.taus) if mean_q_at is not None and self.device.type == "cpu" else None

    def set_exploration(self, epsilon: float, epsilon_boltzmann: float, tau_epsilon_boltzmann: float | None = None) -> None:
        self.epsilon, self.epsilon_boltzmann = float(epsilon), float(epsilon_boltzmann)
        if tau_epsilon_boltzmann is not None:
            self.tau_epsilon_boltzmann = float(tau_epsilon_boltzmann)

    def prepare(self) -> None:
        """Bring the acting program up to date with the network's weights now rather than at the next
        decision (a collector calls it right after each weight refresh, so that the rewrite is done, and
        timed, with the refresh)."""
        if self._mean_q is not None:
            self._mean_q.prepare()

    def infer_network(self, frame: np.ndarray, state_float: np.ndarray, taus: torch.Tensor | None = None) -> np.ndarray:
        """Quantile values (K, A) for one state (frame uint8 (C, H, W), floats (D,))."""
        img = torch.from_numpy(np.ascontiguousarray(frame)).unsqueeze(0).to(self.device)
        floats = torch.from_numpy(np.ascontiguousarray(state_float, dtype=np.float32)).unsqueeze(0).to(self.device)
        taus = self.taus if taus is None else taus.to(self.device)
        with torch.inference_mode():
            q, _ = self.network(img, floats, int(taus.shape[1]), taus)
        return q[0].float().cpu().numpy()

    def get_exploration_action(self, frame: np.ndarray, state_float: np.ndarray) -> tuple[int, bool, float, np.ndarray]:
        if self._mean_q is not None:
            q_values = self._mean_q(frame, state_float)
        else:
            q_values = self.infer_network(frame, state_float).mean(axis=0)  # float32
        greedy_action = int(q_values.argmax())
        action = greedy_action
        if self.is_explo:
            r = self.rng.random()
            if r < self.epsilon:
                action = int(self.rng.integers(self.n_actions))
            elif r < self.epsilon + self.epsilon_boltzmann:
                action = int(np.argmax(q_values + self.tau_epsilon_boltzmann * self.rng.standard_normal(self.n_actions)))
        return action, action == greedy_action, float(q_values[greedy_action]), q_values

    __call__ = get_exploration_action
