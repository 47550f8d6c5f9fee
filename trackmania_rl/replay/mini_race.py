"""The mini-race clock drawn at sampling time and the transform that turns stored transitions into training targets (DESIGN §3.5)."""

from __future__ import annotations

import numpy as np
import torch

from trackmania_rl.games.float_layout import MINI_RACE_CLOCK, FloatLayout


def draw_mini_race_clock(rng: np.random.Generator, size: int, horizon: int, long_term: int, max_term: int) -> np.ndarray:
    """t = max(0, |u| - M) with u uniform in [-(L - M), H + M): long horizons (small t) are oversampled."""
    u = rng.integers(-(long_term - max_term), horizon + max_term, size=size)
    return np.maximum(0, np.abs(u) - max_term)


class MiniRaceTransform:
    """Sampling-time transform (DESIGN §3.5), used as the buffer's collate function.

    Per sample: clock t (`draw_mini_race_clock`); m = n - max(0, t + n - H);
    terminal = m >= terminal_actions or t + n >= H; gamma_eff = gammas[m-1] (0 if terminal);
    reward = rewards[m-1] + gamma_eff Phi(s') - Phi(s); clock float of the state = t, of the next state = t + n.
    The result is moved to `device`.
    """

    def __init__(self, cfg, layout: FloatLayout, device: torch.device | str = "cpu", rng: np.random.Generator | None = None):
        self.clock_index = layout.slice(MINI_RACE_CLOCK).start
        self.device = torch.device(device)
        self.rng = rng if rng is not None else np.random.default_rng()
        self.update_config(cfg)

    def update_config(self, cfg) -> None:
        self.horizon = int(cfg.temporal_mini_race_duration_actions)
        self.long_term = int(cfg.oversample_long_term_steps)
        self.max_term = int(cfg.oversample_maximum_term_steps)

    def __call__(self, data: dict) -> dict:
        """`data`: the storage's raw fields (torch tensors or numpy arrays on the CPU). Returns torch tensors."""
        n = np.asarray(data["n_steps"]).astype(np.int64, copy=False)
        batch = len(n)
        t = draw_mini_race_clock(self.rng, batch, self.horizon, self.long_term, self.max_term)
        t_next = t + n
        m = n - np.maximum(t_next - self.horizon, 0)  # steps inside the mini-race, >= 1 since t < H
        terminal = (m >= np.asarray(data["terminal_actions"])) | (t_next >= self.horizon)
        rows = np.arange(batch)
        gamma_eff = np.where(terminal, 0.0, np.asarray(data["gammas"])[rows, m - 1])
        reward = (
            np.asarray(data["rewards"])[rows, m - 1]
            + gamma_eff * np.asarray(data["next_state_potential"])
            - np.asarray(data["state_potential"])
        )
        state_float, next_state_float = torch.as_tensor(data["state_float"]), torch.as_tensor(data["next_state_float"])
        state_float.numpy()[:, self.clock_index] = t
        next_state_float.numpy()[:, self.clock_index] = t_next
        out = {
            "state_img": torch.as_tensor(data["state_img"]),
            "state_float": state_float,
            "action": torch.from_numpy(np.asarray(data["action"]).astype(np.int64, copy=False)),
            "reward": torch.from_numpy(reward.astype(np.float32)),
            "next_state_img": torch.as_tensor(data["next_state_img"]),
            "next_state_float": next_state_float,
            "gamma_eff": torch.from_numpy(gamma_eff.astype(np.float32)),
            "terminal": torch.from_numpy(terminal),
            "mini_race_clock": torch.from_numpy(t),
            "n_steps": torch.from_numpy(n),
        }
        if "state_gid" in data:  # which transitions were sampled: a later priority update checks they are still there
            out["state_gid"] = torch.as_tensor(data["state_gid"])
        if self.device.type != "cpu":
            out = {k: v.to(self.device, non_blocking=True) for k, v in out.items()}
        return out
