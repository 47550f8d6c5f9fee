"""IQN agent (Dabney et al. 2018) with Linesight's architecture, on any device (DESIGN §3.6).

- `IQNNetwork(cfg, layout, n_actions)`: conv head on the uint8 frames (C = frame_stack channels, 3 x that in colour; mapped to
  [-1, 1) inside the network:
  (x - 128) / 128): Linesight's plain convolutions (`network_encoder = "linesight"`, `conv_layers`) or an IMPALA-style
  residual encoder (`"impala"`, `ImpalaEncoder`), float MLP on the float vector normalised by the layout's mean/std (registered buffers,
  so they are saved with the weights), cosine quantile embedding cos(pi i tau), i = 1..E, Hadamard product
  with the state features, dueling heads. forward(img, floats, n_quantiles, taus=None) -> (Q (B, N, A), taus (B, N)).
- Named layers: `convolutions`, `float_input_layer`, `float_output_layer`, `advantage_hidden_layer`,
  `advantage_output_layer`, `value_hidden_layer`, `value_output_layer` (read-only properties over the
  nn.Sequential attributes, whose names and order make the state_dict keys of every saved model).
- `save_network` / `load_network`: the weights and normalisation as a tensor file (weights_only loads).
- Loading weights, the one owner: `load_network(network, path)` reads a state_dict file
  (`read_state_dict`: weights_only, refuses anything but a dict of named tensors, strips torch.compile's
  prefix) and loads it with `load_state_dict_into(network, state_dict)`, which checks the entries and
  their shapes first and raises `StateDictMismatch` naming the missing, unexpected and mismatched ones.
  Errors are `WeightsError`s (RuntimeError); a missing file raises FileNotFoundError.
The learning step is in training.py, action selection in exploration.py, the collectors' acting program
in acting.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

from trackmania_rl.config.loader import frame_shape
from trackmania_rl.config.schema import NETWORK_ENCODERS
from trackmania_rl.games.float_layout import FloatLayout
from trackmania_rl.serialization import atomic_torch_save, safe_torch_load, torch_load_failure

LEAKY_SLOPE = 0.01
# positions of the linear layers in the float MLP (Linear, LeakyReLU, Linear, LeakyReLU) and in each
# dueling head (Linear, LeakyReLU, Linear); read through IQNNetwork's named-layer properties
_FIRST_LINEAR, _SECOND_LINEAR = 0, 2


class ResidualBlock(nn.Module):
    """x + conv(relu(conv(relu(x)))), 3x3 convolutions keeping the size and the channels (IMPALA's block)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ImpalaEncoder(nn.Module):
    """The residual encoder of IMPALA (Espeholt et al. 2018), as the larger image encoder Linesight's maintainers list
    among their wishes: per stage a 3x3 convolution to its channels, a 3x3 max-pool of stride 2 (the size halves,
    rounded up) and two residual blocks; ReLU and flatten at the end. One stage per entry of `channels`."""

    def __init__(self, channels: list[int], in_channels: int = 1):
        super().__init__()
        stages: list[nn.Module] = []
        for out_channels in channels:
            stages += [
                nn.Conv2d(in_channels, out_channels, 3, padding=1),
                nn.MaxPool2d(3, stride=2, padding=1),
                ResidualBlock(out_channels),
                ResidualBlock(out_channels),
            ]
            in_channels = out_channels
        self.stages = nn.Sequential(*stages)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(torch.relu(self.stages(x)), 1)


class IQNNetwork(nn.Module):
    # the named-layer properties are for Python code (acting program, tests), not for TorchScript, which
    # would otherwise try to compile them when the network is scripted
    __jit_unused_properties__ = [
        "convolutions",
        "float_input_layer",
        "float_output_layer",
        "advantage_hidden_layer",
        "advantage_output_layer",
        "value_hidden_layer",
        "value_output_layer",
    ]

    def __init__(self, cfg, layout: FloatLayout, n_actions: int):
        super().__init__()
        self.n_actions = int(n_actions)
        self.float_dim = int(layout.dim)
        self.embedding_dim = int(cfg.iqn_embedding_dimension)
        self.image_shape = image_shape = frame_shape(cfg)
        self.encoder = str(cfg.network_encoder)
        if self.encoder == "impala":  # one stage per conv layer, with its channels (its kernel and stride unused)
            self.img_head = ImpalaEncoder([int(out_channels) for out_channels, _, _ in cfg.conv_layers], in_channels=image_shape[0])
        elif self.encoder == "linesight":
            layers: list[nn.Module] = []
            channels = image_shape[0]  # the stacked frames
            for out_channels, kernel, stride in cfg.conv_layers:
                layers += [nn.Conv2d(channels, out_channels, kernel, stride), nn.LeakyReLU(LEAKY_SLOPE)]
                channels = out_channels
            layers.append(nn.Flatten())
            self.img_head = nn.Sequential(*layers)
        else:
            raise ValueError(f"config setting `network_encoder` = {self.encoder!r}: expected one of {list(NETWORK_ENCODERS)}")
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
        for module in self.modules():
            if isinstance(module, ResidualBlock):  # each block starts as the identity: stacked blocks keep the scale
                nn.init.zeros_(module.conv1.weight)
        nn.init.orthogonal_(self.iqn_fc.weight, gain * math.sqrt(2))  # cos features have variance 1/2
        nn.init.orthogonal_(self.advantage_output_layer.weight, 1.0)
        nn.init.orthogonal_(self.value_output_layer.weight, 1.0)

    # ----------------------------------------------------------------------------------------------
    # Layers by name. The attributes `img_head`, `float_feature_extractor`, `A_head` and `V_head` stay
    # nn.Sequential, in this order: their positions are the state_dict keys (`A_head.2.weight`...).
    # ----------------------------------------------------------------------------------------------
    @property
    def convolutions(self) -> tuple[nn.Conv2d, ...]:
        """The conv head's convolutions, first to last."""
        return tuple(layer for layer in self.img_head.modules() if isinstance(layer, nn.Conv2d))

    @property
    def float_input_layer(self) -> nn.Linear:
        """The float MLP's first layer (normalised floats -> hidden)."""
        return self.float_feature_extractor[_FIRST_LINEAR]

    @property
    def float_output_layer(self) -> nn.Linear:
        """The float MLP's second layer (hidden -> float features)."""
        return self.float_feature_extractor[_SECOND_LINEAR]

    @property
    def advantage_hidden_layer(self) -> nn.Linear:
        """The advantage head's first layer (features x quantile embedding -> hidden)."""
        return self.A_head[_FIRST_LINEAR]

    @property
    def advantage_output_layer(self) -> nn.Linear:
        """The advantage head's last layer (hidden -> one advantage per action)."""
        return self.A_head[_SECOND_LINEAR]

    @property
    def value_hidden_layer(self) -> nn.Linear:
        """The value head's first layer (features x quantile embedding -> hidden)."""
        return self.V_head[_FIRST_LINEAR]

    @property
    def value_output_layer(self) -> nn.Linear:
        """The value head's last layer (hidden -> the state value)."""
        return self.V_head[_SECOND_LINEAR]

    def sample_taus(self, batch_size: int, n_quantiles: int, device: torch.device, generator: torch.Generator | None = None):
        """Stratified, antithetic: (k + U) / N for k < N/2 and their mirrors 1 - tau (plain stratified if N is odd)."""
        count = n_quantiles // 2 if n_quantiles % 2 == 0 else n_quantiles
        uniform = torch.rand(batch_size, count, device=device, generator=generator)
        low = (torch.arange(count, device=device, dtype=torch.float32) + uniform) / n_quantiles
        return torch.cat([low, 1.0 - low], dim=1) if n_quantiles % 2 == 0 else low

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

    def training_forward(
        self,
        img: torch.Tensor,
        state_float: torch.Tensor,
        n_quantiles: int,
        low_precision: torch.dtype | None = None,
        taus: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """forward for the learning step, optionally mixed precision: with `low_precision` (torch.bfloat16) the
        conv head, the float MLP, the embedding's linear layer and the heads' hidden layers run under autocast,
        while what needs the resolution stays float32: the cosines of the quantile embedding, the heads' output
        layers and the dueling combination (Q values of 50-100 have a bf16 step of 0.25-0.5, more than typical
        advantage gaps). `taus`: fixed fractions (1 or B, N), else sampled. Returns float32 (Q (B, N, A), taus
        (B, N)). Not part of the scripted forward."""
        device_type = img.device.type
        enabled = low_precision is not None and low_precision != torch.float32
        # no autocast weight cache: each weight is cast once per call anyway, and a CUDA graph must not capture a cache
        low = low_precision if enabled else torch.bfloat16
        with torch.autocast(device_type, dtype=low, enabled=enabled, cache_enabled=False):
            features = self.state_features(img, state_float, channels_last=device_type == "cpu")
            if taus is None:
                taus = self.sample_taus(img.shape[0], n_quantiles, img.device)
            else:
                taus = taus.float().expand(img.shape[0], -1)
            cosines = torch.cos(taus.unsqueeze(-1) * self.cos_frequencies)  # float32: cos is not autocast
            x = features.unsqueeze(1) * self.iqn_activation(self.iqn_fc(cosines))
            advantage_hidden = nn.functional.leaky_relu(self.advantage_hidden_layer(x), LEAKY_SLOPE)
            value_hidden = nn.functional.leaky_relu(self.value_hidden_layer(x), LEAKY_SLOPE)
        with torch.autocast(device_type, enabled=False):
            advantage = self.advantage_output_layer(advantage_hidden.float())
            value = self.value_output_layer(value_hidden.float())
            return value + advantage - advantage.mean(dim=-1, keepdim=True), taus

    # forward in parts; the collectors' acting program (agents/acting.py) computes the same function from
    # these layers and `quantile_embedding`

    def state_features(self, img: torch.Tensor, state_float: torch.Tensor, channels_last: bool = False) -> torch.Tensor:
        """(B, F): conv features of the frame, then MLP features of the normalised floats. `channels_last` runs the
        convolutions in that layout (the learning step on the CPU: see `channels_last_frames`); same values."""
        frames = (img.float() - 128.0) / 128.0
        if channels_last:
            frames = channels_last_frames(frames)
        img_features = self.img_head(frames)
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


def channels_last_frames(frames: torch.Tensor) -> torch.Tensor:
    """The frames (B, C, H, W) in channels-last layout, so that the convolutions that read them, and the ones after,
    run channels-last: on the CPU oneDNN computes them in that layout natively and otherwise reorders every
    activation and gradient (measured on an AMD EPYC, Zen 4, batch 128, one thread: the train step 5-8 % faster in
    bfloat16 and 5-15 % faster in float32). With one channel both layouts hold the same bytes, but torch reads contiguous
    strides as NCHW: new strides over the same memory say channels-last without a copy. The weights keep their
    layout, so checkpoints, published weights and the optimizer state do not change."""
    if frames.shape[1] != 1:
        return frames.contiguous(memory_format=torch.channels_last)
    frames = frames.contiguous()
    height, width = frames.shape[2], frames.shape[3]
    return frames.as_strided(frames.shape, [height * width, 1, width, 1])


def make_network(cfg, layout: FloatLayout, n_actions: int, device: torch.device | str = "cpu") -> IQNNetwork:
    return IQNNetwork(cfg, layout, n_actions).to(device)


def strip_compile_prefix(state_dict: dict) -> dict:
    """State dict keys without torch.compile's `_orig_mod.` prefix (checkpoints stay portable)."""
    return {k.replace("_orig_mod.", ""): v for k, v in state_dict.items()}


def save_network(network: nn.Module, path: str | Path) -> None:
    atomic_torch_save(strip_compile_prefix(network.state_dict()), path)


# --------------------------------------------------------------------------------------------------
# Loading weights: the one owner (evaluation, the learner's resume and the tools all load through here)
# --------------------------------------------------------------------------------------------------
MAX_LISTED_ENTRIES = 4  # mismatching entries named in an error message, per kind


class WeightsError(RuntimeError):
    """Weights that cannot be loaded into a network; the message names the file or the entries at fault."""


class WeightsFileUnreadable(WeightsError):
    """torch.load with weights_only=True failed: not a torch file, or one holding objects other than
    tensors. `reason` is the useful part of torch's message."""

    def __init__(self, path: Path, reason: str):
        self.path, self.reason = path, reason
        super().__init__(
            f"weights file {path} cannot be loaded as a state_dict: it is not a torch file, or it holds objects "
            f"other than tensors (torch.load with weights_only=True failed: {reason})"
        )


class NotAStateDict(WeightsError):
    """The weights are not a dict of named tensors."""

    def __init__(self, source: str):
        self.source = source
        super().__init__(f"{source} is not a state_dict (a dict of named tensors)")


class StateDictMismatch(WeightsError):
    """The state_dict's entries or shapes differ from the network's. `missing`, `unexpected` (entry
    names) and `shape_mismatches` ("name (weights shape) vs (network shape)") list them all; `problems`
    names them (at most MAX_LISTED_ENTRIES of each kind)."""

    def __init__(self, source: str, missing: list[str], unexpected: list[str], shape_mismatches: list[str]):
        self.source = source
        self.missing, self.unexpected, self.shape_mismatches = missing, unexpected, shape_mismatches
        problems = []
        for what, items in (
            ("missing entries", missing),
            ("unexpected entries", unexpected),
            ("shape mismatches (weights vs config)", shape_mismatches),
        ):
            if items:
                more = f" and {len(items) - MAX_LISTED_ENTRIES} more" if len(items) > MAX_LISTED_ENTRIES else ""
                problems.append(f"{what}: {', '.join(items[:MAX_LISTED_ENTRIES])}{more}")
        self.problems = "; ".join(problems)
        super().__init__(f"{source} does not match the network ({self.problems})")


def read_state_dict(path: str | Path, map_location="cpu") -> dict[str, torch.Tensor]:
    """The state_dict saved in a file (by `save_network`, or the learner's checkpoints), with
    torch.compile's prefix stripped. Loads with weights_only=True (nothing is unpickled). Raises
    FileNotFoundError, WeightsFileUnreadable or NotAStateDict."""
    path = Path(path)
    try:
        state_dict = safe_torch_load(path, map_location=map_location)
    except FileNotFoundError:
        raise
    except Exception as e:  # not a torch file, or one holding objects that weights_only refuses
        raise WeightsFileUnreadable(path, torch_load_failure(e)) from e
    return _checked_state_dict(state_dict, f"weights file {path}")


def load_state_dict_into(network: nn.Module, state_dict, source: str = "state_dict") -> None:
    """Load an in-memory state_dict (e.g. just read from a checkpoint) into `network`, checked first:
    NotAStateDict if it is not a dict of named tensors, StateDictMismatch naming the missing, unexpected
    and mismatched entries (nothing is loaded then). torch.compile's `_orig_mod.` prefix is ignored on
    both sides. `source` names the weights in the messages (e.g. "weights file <path>")."""
    state_dict = _checked_state_dict(state_dict, source)
    target = getattr(network, "_orig_mod", network)  # a compiled network: its module, whose keys have no prefix
    expected = target.state_dict()
    missing = sorted(set(expected) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(expected))
    shapes = [
        f"{k} {tuple(state_dict[k].shape)} vs {tuple(v.shape)}"
        for k, v in expected.items()
        if k in state_dict and state_dict[k].shape != v.shape
    ]
    if missing or unexpected or shapes:
        raise StateDictMismatch(source, missing, unexpected, shapes)
    target.load_state_dict(state_dict, strict=True)


def load_network(network: nn.Module, path: str | Path) -> None:
    """Load weights and normalisation saved by `save_network` (or a checkpoint's weights file) into
    `network`, on the network's device: `read_state_dict` then `load_state_dict_into`. Raises
    FileNotFoundError or a WeightsError naming what does not fit."""
    path = Path(path)
    state_dict = read_state_dict(path, map_location=next(network.parameters()).device)
    load_state_dict_into(network, state_dict, f"weights file {path}")


def _checked_state_dict(state_dict, source: str) -> dict[str, torch.Tensor]:
    """A dict of named tensors with torch.compile's prefix stripped; NotAStateDict otherwise."""
    if not isinstance(state_dict, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state_dict.items()):
        raise NotAStateDict(source)
    return strip_compile_prefix(state_dict)
