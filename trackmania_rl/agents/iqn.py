"""IQN agent (Dabney et al. 2018) with Linesight's architecture, on any device (DESIGN §3.6).

- `IQNNetwork(cfg, layout, n_actions)`: conv head on the uint8 frame (mapped to [-1, 1) inside the network:
  (x - 128) / 128), float MLP on the float vector normalised by the layout's mean/std (registered buffers,
  so they are saved with the weights), cosine quantile embedding cos(pi i tau), i = 1..E, Hadamard product
  with the state features, dueling heads. forward(img, floats, n_quantiles, taus=None) -> (Q (B, N, A), taus (B, N)).
- `save_network` / `load_network`: the weights and normalisation as a tensor file (weights_only loads).
The learning step is in training.py, action selection in exploration.py, the collectors' acting program
in acting.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

from trackmania_rl.games.float_layout import FloatLayout
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
        self.A_head = nn.Sequential(
            nn.Linear(self.dense_input_dim, head_hidden), nn.LeakyReLU(LEAKY_SLOPE), nn.Linear(head_hidden, self.n_actions)
        )
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
        return (
            torch.arange(n_quantiles, device=device, dtype=torch.float32) + torch.rand(batch_size, n_quantiles, device=device)
        ) / n_quantiles

    def forward(
        self, img: torch.Tensor, state_float: torch.Tensor, n_quantiles: int, taus: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
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
