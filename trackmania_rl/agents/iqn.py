"""IQN agent (Dabney et al. 2018) with Linesight's architecture, on any device (DESIGN §3.6).

- `IQNNetwork(cfg, layout, n_actions)`: conv head on the uint8 frame (mapped to [-1, 1) inside the network:
  (x - 128) / 128), float MLP on the float vector normalised by the layout's mean/std (registered buffers,
  so they are saved with the weights), cosine quantile embedding cos(pi i tau), i = 1..E, Hadamard product
  with the state features, dueling heads. forward(img, floats, n_quantiles, taus=None) -> (Q (B, N, A), taus (B, N)).
- `quantile_huber_loss`: per-sample loss (B,), summed over online quantiles, averaged over target quantiles.
- `Trainer`: one learning step on a replay batch; standard IQN target (next action = argmax of the target
  network's quantile mean; `use_ddqn`: argmax of the online network's), loss = mean over the batch
  (IS-weighted when prioritized), gradient clipping, AMP only on CUDA.
- `make_optimizer` / `set_optimizer_hyperparameters`: RAdam with decoupled weight decay on weights only.
- `Inferer`: action selection for collectors (epsilon, epsilon-Boltzmann, greedy).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional, Tuple

import numpy as np
import torch
from torch import nn

from trackmania_rl.device import is_cuda
from trackmania_rl.float_layout import FloatLayout
from trackmania_rl.serialization import atomic_torch_save, safe_torch_load

LEAKY_SLOPE = 0.01


class IQNNetwork(nn.Module):
    def __init__(self, cfg, layout: FloatLayout, n_actions: int):
        super().__init__()
        self.n_actions = int(n_actions)
        self.float_dim = int(layout.dim)
        self.embedding_dim = int(cfg.iqn_embedding_dimension)
        self.image_shape = image_shape = (1, int(cfg.H_downsized), int(cfg.W_downsized))
        layers: list[nn.Module] = []
        channels = 1
        for out_channels, kernel, stride in cfg.conv_layers:
            layers += [nn.Conv2d(channels, out_channels, kernel, stride), nn.LeakyReLU(LEAKY_SLOPE)]
            channels = out_channels
        layers.append(nn.Flatten())
        self.img_head = nn.Sequential(*layers)
        with torch.no_grad():
            self.conv_head_output_dim = int(self.img_head(torch.zeros(1, *image_shape)).shape[1])
        hidden = int(cfg.float_hidden_dim)
        self.float_feature_extractor = nn.Sequential(
            nn.Linear(self.float_dim, hidden), nn.LeakyReLU(LEAKY_SLOPE), nn.Linear(hidden, hidden), nn.LeakyReLU(LEAKY_SLOPE)
        )
        self.dense_input_dim = self.conv_head_output_dim + hidden
        self.iqn_fc = nn.Linear(self.embedding_dim, self.dense_input_dim)
        self.iqn_activation = nn.LeakyReLU(LEAKY_SLOPE)
        head_hidden = int(cfg.dense_hidden_dimension) // 2
        self.A_head = nn.Sequential(nn.Linear(self.dense_input_dim, head_hidden), nn.LeakyReLU(LEAKY_SLOPE), nn.Linear(head_hidden, self.n_actions))
        self.V_head = nn.Sequential(nn.Linear(self.dense_input_dim, head_hidden), nn.LeakyReLU(LEAKY_SLOPE), nn.Linear(head_hidden, 1))
        self.register_buffer("float_mean", torch.as_tensor(layout.mean, dtype=torch.float32).clone())
        self.register_buffer("float_std", torch.as_tensor(layout.std, dtype=torch.float32).clone())
        self.register_buffer("cos_frequencies", math.pi * torch.arange(1, self.embedding_dim + 1, dtype=torch.float32), persistent=False)
        self._initialize()

    def _initialize(self) -> None:
        gain = nn.init.calculate_gain("leaky_relu", LEAKY_SLOPE)
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                nn.init.orthogonal_(module.weight, gain)
                nn.init.zeros_(module.bias)
        nn.init.orthogonal_(self.iqn_fc.weight, gain * math.sqrt(2))  # cos features have variance 1/2
        nn.init.orthogonal_(self.A_head[-1].weight, 1.0)
        nn.init.orthogonal_(self.V_head[-1].weight, 1.0)

    def sample_taus(self, batch_size: int, n_quantiles: int, device: torch.device) -> torch.Tensor:
        """Stratified, antithetic: (k + U) / N for k < N/2 and their mirrors 1 - tau (plain stratified if N is odd)."""
        if n_quantiles % 2 == 0:
            half = n_quantiles // 2
            low = (torch.arange(half, device=device, dtype=torch.float32) + torch.rand(batch_size, half, device=device)) / n_quantiles
            return torch.cat([low, 1.0 - low], dim=1)
        return (torch.arange(n_quantiles, device=device, dtype=torch.float32) + torch.rand(batch_size, n_quantiles, device=device)) / n_quantiles

    def forward(self, img: torch.Tensor, state_float: torch.Tensor, n_quantiles: int, taus: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        batch_size = img.shape[0]
        features = self.state_features(img, state_float)  # (B, F)
        if taus is None:
            taus = self.sample_taus(batch_size, n_quantiles, img.device)
        else:
            taus = taus.to(features.dtype).expand(batch_size, -1)
        return self.q_from_features(features, self.quantile_embedding(taus)), taus

    # forward in parts; the collectors' acting program (agents/inference.py) computes the same function from
    # these layers and `quantile_embedding`

    def state_features(self, img: torch.Tensor, state_float: torch.Tensor) -> torch.Tensor:
        """(B, F): conv features of the frame, then MLP features of the normalised floats."""
        img_features = self.img_head((img.float() - 128.0) / 128.0)
        float_features = self.float_feature_extractor((state_float - self.float_mean) / self.float_std)
        return torch.cat([img_features, float_features], dim=1)

    def quantile_embedding(self, taus: torch.Tensor) -> torch.Tensor:
        """Fractions (B, N) -> (B, N, F): LeakyReLU(iqn_fc(cos(pi i tau)))."""
        embedding = torch.cos(taus.unsqueeze(-1) * self.cos_frequencies)  # (B, N, E)
        return self.iqn_activation(self.iqn_fc(embedding))

    def q_from_features(self, features: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        """State features (B, F) and quantile embedding (B or 1, N, F) -> quantile values (B, N, A)."""
        x = features.unsqueeze(1) * embedding
        advantage = self.A_head(x)
        value = self.V_head(x)
        return value + advantage - advantage.mean(dim=-1, keepdim=True)


def make_network(cfg, layout: FloatLayout, n_actions: int, device: torch.device | str = "cpu") -> IQNNetwork:
    return IQNNetwork(cfg, layout, n_actions).to(device)


def strip_compile_prefix(state_dict: dict) -> dict:
    """State dict keys without torch.compile's `_orig_mod.` prefix (checkpoints stay portable)."""
    return {k.replace("_orig_mod.", ""): v for k, v in state_dict.items()}


def save_network(network: nn.Module, path: str | Path) -> None:
    atomic_torch_save(strip_compile_prefix(network.state_dict()), path)


def load_network(network: nn.Module, path: str | Path) -> None:
    """Load weights and normalisation saved by `save_network` (weights_only=True); raises on any mismatch."""
    state_dict = safe_torch_load(path, map_location=next(network.parameters()).device)
    network.load_state_dict(strip_compile_prefix(state_dict), strict=True)


# -------------------------------------------------------------------------------------------------------------
# Loss and training
# -------------------------------------------------------------------------------------------------------------


def quantile_huber_loss(online: torch.Tensor, taus: torch.Tensor, target: torch.Tensor, kappa: float) -> torch.Tensor:
    """Per-sample quantile Huber loss (B,) for online quantiles (B, N) at fractions taus (B, N) and target samples (B, N').

    delta_ij = target_j - online_i; rho_ij = |tau_i - 1{delta_ij < 0}| L_kappa(delta_ij) / kappa with the Huber
    L_kappa = 0.5 d^2 if |d| <= kappa else kappa (|d| - kappa / 2); loss = sum over i, mean over j.
    """
    delta = target.unsqueeze(1) - online.unsqueeze(2)  # (B, N, N')
    abs_delta = delta.abs()
    huber = torch.where(abs_delta <= kappa, 0.5 * delta.pow(2) / kappa, abs_delta - 0.5 * kappa)
    weight = (taus.unsqueeze(2) - (delta.detach() < 0).to(delta.dtype)).abs()
    return (weight * huber).sum(dim=1).mean(dim=1)


def make_optimizer(network: nn.Module, cfg, lr: float) -> torch.optim.RAdam:
    """RAdam; decoupled weight decay (p <- p (1 - lr x weight_decay_lr_ratio), as AdamW) on weights only, not biases."""
    decay = [p for p in network.parameters() if p.ndim >= 2]
    no_decay = [p for p in network.parameters() if p.ndim < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay_lr_ratio, "group_name": "decay"},
        {"params": no_decay, "weight_decay": 0.0, "group_name": "no_decay"},
    ]
    return torch.optim.RAdam(groups, lr=lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_epsilon, decoupled_weight_decay=True)


def set_optimizer_hyperparameters(optimizer: torch.optim.Optimizer, cfg, lr: float) -> None:
    """Push the current lr (from its schedule), betas, eps and weight decay into every param group.

    RAdam reads the key "eps" (Linesight wrote "epsilon", so its edits had no effect).
    """
    for group in optimizer.param_groups:
        group["lr"] = float(lr)
        group["betas"] = (float(cfg.adam_beta1), float(cfg.adam_beta2))
        group["eps"] = float(cfg.adam_epsilon)
        group["weight_decay"] = float(cfg.weight_decay_lr_ratio) if group.get("group_name", "decay") == "decay" else 0.0


class Trainer:
    """Learning steps for the online network against the target network.

    `train_on_batch(buffer, do_learn)` samples a batch, computes the loss and, when `do_learn`, takes an
    optimizer step; priorities are updated for prioritized buffers (with the per-sample loss). `cfg` may be
    replaced between steps (hot reload): kappa, use_ddqn, clipping and soft_update_tau are read each step.
    """

    def __init__(self, online: nn.Module, target: nn.Module, optimizer: torch.optim.Optimizer, cfg, device: torch.device | str, scaler=None):
        self.online = online
        self.target = target
        self.optimizer = optimizer
        self.cfg = cfg
        self.device = torch.device(device)
        self.use_amp = is_cuda(self.device)
        self.scaler = scaler if scaler is not None else torch.amp.GradScaler("cuda", enabled=self.use_amp)
        self.n_quantiles = int(cfg.iqn_n)

    def _autocast(self):
        return torch.autocast(device_type=self.device.type, dtype=torch.float16, enabled=self.use_amp)

    def compute_loss(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch loss, per-sample loss (B,) detached). The batch loss is the mean over the batch of the
        per-sample losses, each multiplied by its importance weight when the batch has `weight`."""
        cfg, n = self.cfg, self.n_quantiles
        action = batch["action"]
        batch_size = action.shape[0]
        with self._autocast():
            with torch.no_grad():
                q_next_target, _ = self.target(batch["next_state_img"], batch["next_state_float"], n)
                if cfg.use_ddqn:
                    q_next_online, _ = self.online(batch["next_state_img"], batch["next_state_float"], n)
                    next_action = q_next_online.float().mean(dim=1).argmax(dim=1)
                else:
                    next_action = q_next_target.float().mean(dim=1).argmax(dim=1)
                z_next = q_next_target.float().gather(2, next_action.view(batch_size, 1, 1).expand(batch_size, n, 1)).squeeze(2)
                target = batch["reward"].unsqueeze(1) + batch["gamma_eff"].unsqueeze(1) * z_next  # (B, N)
            q, taus = self.online(batch["state_img"], batch["state_float"], n)
            q_taken = q.float().gather(2, action.view(batch_size, 1, 1).expand(batch_size, n, 1)).squeeze(2)
        per_sample = quantile_huber_loss(q_taken, taus.float(), target, float(cfg.iqn_kappa))
        weight = batch.get("weight")
        loss = (per_sample * weight).mean() if weight is not None else per_sample.mean()
        return loss, per_sample.detach()

    def train_on_tensors(self, batch: dict, do_learn: bool = True) -> tuple[float, float, torch.Tensor]:
        """One step on a ready batch: (loss, grad norm before clipping (0 when not learning), per-sample loss)."""
        self.optimizer.zero_grad(set_to_none=True)
        with torch.set_grad_enabled(do_learn):  # test batches build no graph
            loss, per_sample = self.compute_loss(batch)
        grad_norm = 0.0
        if do_learn:
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.online.parameters(), self.cfg.clip_grad_norm))
            torch.nn.utils.clip_grad_value_(self.online.parameters(), self.cfg.clip_grad_value)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        return float(loss.detach()), grad_norm, per_sample

    def train_on_batch(self, buffer, do_learn: bool = True) -> tuple[float, float]:
        """Sample from `buffer`, learn (if `do_learn`), update priorities (prioritized buffers). (loss, grad_norm)."""
        batch = buffer.sample_batch()
        loss, grad_norm, per_sample = self.train_on_tensors(batch, do_learn)
        if "weight" in batch:
            buffer.update_priority(batch["index"], per_sample.float().cpu())
        return loss, grad_norm

    @torch.no_grad()
    def soft_update_target(self, tau: float | None = None) -> None:
        """target <- (1 - tau) target + tau online (buffers copied)."""
        tau = self.cfg.soft_update_tau if tau is None else tau
        soft_update(self.target, self.online, tau)


@torch.no_grad()
def soft_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    for p_target, p_online in zip(target.parameters(), online.parameters()):
        p_target.lerp_(p_online, float(tau))
    for b_target, b_online in zip(target.buffers(), online.buffers()):
        b_target.copy_(b_online)


# -------------------------------------------------------------------------------------------------------------
# Acting
# -------------------------------------------------------------------------------------------------------------


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

    def __init__(self, network, cfg, n_actions: int, device: torch.device | str = "cpu", rng: np.random.Generator | None = None, is_explo: bool = True):
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
        # on the CPU, an InferenceNetwork (agents/inference.py) acts through its short program for the mean Q
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
        """Quantile values (K, A) for one state (frame uint8 (1, H, W), floats (D,))."""
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
