"""The collectors' inference network, with weights refreshed in place from the shared network.

Two ways to compute with it:
- `InferenceNetwork.__call__`: IQNNetwork.forward, TorchScript when jit (quantile values at any fractions;
  analysis, videos). Compiler choice, measured with the default network at K = 32 quantiles, batch 1,
  1 CPU thread, torch 2.13.0+cpu, median of 300 calls, run twice: eager 1.35-1.39 ms, torch.jit.script
  1.08-1.19 ms, torch.compile 1.19-1.26 ms (builds in 4-28 s, needs a C++ compiler); script + freeze was
  0.76 ms but bakes the weights in, so each refresh would cost a ~55 ms re-freeze.
- `MeanQAtFixedTaus` (`mean_q_at`): what `Inferer` acts with, the mean Q at its fixed fractions by a
  shorter program of the same function (see its docstring).

The weight refresh copies the shared network's tensors *into the tensors the acting module computes with*
(its own state_dict entries, in place), so it reaches the network that acts whether it is scripted or eager
(Linesight's jit=False path acted with a deep copy that never received new weights); the acting program
rewrites itself from them at its next call.

Acting at batch 1 on the CPU, what counts is the cost right after a render: the render evicts the code and
the weights from the caches, so each operation costs several times its warm cost (a lone small tensor add:
~3 us warm, ~80 us after a render). Measured with the default config (iqn_k = 8) on 2 Xeon 2.8 GHz vCPUs,
torch 2.13.0+cpu, 1 thread, whole CollectorPolicy calls, medians of 360 calls, three alternating runs of
the previous path (TorchScript forward, quantile embedding cached per refresh) and the acting program:
after a render 1114 / 1196 / 1484 us -> 913 / 955 / 1182 us (x0.80-0.82); warm 522 / 566 / 829 us ->
387 / 451 / 658 us (x0.74-0.80). torch.compile (inductor, C++ wrapper) of the acting program was no faster
after a render (~1.0 ms). Collector processes also run convolutions without oneDNN
(`use_acting_torch_settings`): whole calls x0.81-0.84, its batch-1 convolutions being slower.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from trackmania_rl.agents.iqn import LEAKY_SLOPE, IQNNetwork, strip_compile_prefix
from trackmania_rl.float_layout import FloatLayout


class InferenceNetwork:
    """`module` is the eager IQNNetwork; `acting` is what computes (its TorchScript version when jit)."""

    def __init__(self, cfg, layout: FloatLayout, n_actions: int, jit: bool, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.module = IQNNetwork(cfg, layout, n_actions).to(self.device).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)
        self.jit = bool(jit)
        self.acting: nn.Module = torch.jit.script(self.module) if jit else self.module
        # references to the tensors the acting network computes with (filled in place by every refresh)
        self._acting_tensors = dict(self.acting.state_dict())
        self._expected_keys = set(self.module.state_dict())  # persistent entries (a scripted state_dict lists more)
        self.weights_generation = 0  # bumped by every refresh: the cached quantile embeddings are recomputed

    def __call__(self, img: torch.Tensor, state_float: torch.Tensor, n_quantiles: int, taus: torch.Tensor | None = None):
        return self.acting(img, state_float, n_quantiles, taus)

    def mean_q_at(self, taus: torch.Tensor) -> "MeanQAtFixedTaus":
        """`q(frame, state_float) -> (A,)`: the mean over the fractions `taus` (1, N) of this network's Q
        values for one state, by the collectors' short acting program (kept up to date with every refresh)."""
        return MeanQAtFixedTaus(self, taus)

    @torch.no_grad()
    def load_state_dict_from(self, shared_network: nn.Module) -> None:
        """Copy the shared network's weights and normalisation into the acting network (in place).

        Call it with the shared network's lock held. Raises KeyError / RuntimeError on any mismatch.
        """
        source = strip_compile_prefix(shared_network.state_dict())
        if set(source) != self._expected_keys:
            expected = self._expected_keys
            raise KeyError(f"shared network entries differ: missing {sorted(expected - set(source))}, unexpected {sorted(set(source) - expected)}")
        for name, tensor in source.items():
            self._acting_tensors[name].copy_(tensor)
        self.weights_generation += 1

    def state_dict(self) -> dict:
        return self.module.state_dict()


class MeanQAtFixedTaus:
    """A collector's acting computation: `q(frame, state_float) -> np.ndarray (A,)`, the network's Q values
    averaged over the fixed quantile fractions `taus` (1, N), i.e. the mean over quantiles of
    `IQNNetwork.forward(img, floats, N, taus)`, for one state (frame (1, H, W) or (H, W), floats (D,)).

    It computes the same function as forward with fewer, larger operations: acting at batch 1 on a CPU is
    paid per operation far more than per multiply (the weights are ~1.5 MB and the work ~5 MFLOP, yet the
    render before each decision leaves the code and the weights out of cache), so at every weight refresh
    the network's weights are rewritten into an equivalent shorter program:
    - the frame's (x - 128) / 128 goes into the first convolution: W / 128 and b - sum(W);
    - the floats' (x - mean) / std goes into the first float layer: W / std and b - (W / std) mean;
    - the quantile embedding of the fixed fractions is computed once (it depends on nothing else);
    - the A and V heads' first layers are one matrix product;
    - the mean over quantiles is taken before the heads' last layers (they are linear), and the dueling
      combination V + A - mean(A) is folded into one (A x 2H) matrix.
    The result equals forward's to float rounding (~1e-7; tests/test_iqn.py checks it on several
    architectures). No operation records autograd history: every tensor here is built without gradients.
    Weights must change only through `InferenceNetwork.load_state_dict_from` (it bumps the generation that
    triggers the rewrite)."""

    def __init__(self, network: InferenceNetwork, taus: torch.Tensor):
        if taus.dim() != 2 or taus.shape[0] != 1:
            raise ValueError(f"fixed fractions must have shape (1, N), got {tuple(taus.shape)}")
        for conv in _convolutions(network.module):
            if conv.padding != (0, 0) or conv.dilation != (1, 1) or conv.groups != 1:
                raise ValueError("the folded acting program supports convolutions without padding, dilation or groups")
        self.network = network
        self.taus = taus.detach().to(device=network.device, dtype=torch.float32).clone()
        self._generation = -1
        self._img_np = self._floats_np = None  # input tensors' numpy views (see `_inputs`)

    @torch.no_grad()
    def _rewrite(self) -> None:
        m = self.network.module
        convs = _convolutions(m)
        first = convs[0]
        self._conv_weights = [first.weight / 128.0] + [c.weight.clone() for c in convs[1:]]
        self._conv_biases = [first.bias - first.weight.sum(dim=(1, 2, 3))] + [c.bias.clone() for c in convs[1:]]
        self._conv_strides = [c.stride for c in convs]
        float_in, float_out = m.float_feature_extractor[0], m.float_feature_extractor[2]
        w = float_in.weight / m.float_std
        self._float_layers = [(w, float_in.bias - w @ m.float_mean), (float_out.weight.clone(), float_out.bias.clone())]
        self._embedding = m.quantile_embedding(self.taus)[0]  # (N, F)
        a_hidden, a_out = m.A_head[0], m.A_head[2]
        v_hidden, v_out = m.V_head[0], m.V_head[2]
        self._hidden_weight_t = torch.cat([a_hidden.weight, v_hidden.weight]).t().contiguous()  # (F, 2H)
        self._hidden_bias = torch.cat([a_hidden.bias, v_hidden.bias])
        n_actions = a_out.out_features
        centering = torch.eye(n_actions, device=a_out.weight.device) - 1.0 / n_actions  # A - mean(A)
        self._out_weight = torch.cat([centering @ a_out.weight, v_out.weight.expand(n_actions, -1)], dim=1).contiguous()
        self._out_bias = centering @ a_out.bias + v_out.bias
        self._generation = self.network.weights_generation

    def __call__(self, frame: np.ndarray, state_float: np.ndarray) -> np.ndarray:
        if self._generation != self.network.weights_generation:
            self._rewrite()
        x, floats = self._inputs(frame, state_float)
        for weight, bias, stride in zip(self._conv_weights, self._conv_biases, self._conv_strides):
            x = F.leaky_relu_(F.conv2d(x, weight, bias, stride), LEAKY_SLOPE)
        for weight, bias in self._float_layers:
            floats = F.leaky_relu_(F.linear(floats, weight, bias), LEAKY_SLOPE)
        features = torch.cat([x.view(1, -1), floats], dim=1)
        hidden = F.leaky_relu_(torch.addmm(self._hidden_bias, features * self._embedding, self._hidden_weight_t), LEAKY_SLOPE)
        q = torch.addmv(self._out_bias, self._out_weight, hidden.mean(dim=0))
        return q.cpu().numpy() if q.device.type != "cpu" else q.numpy()

    def _inputs(self, frame: np.ndarray, state_float: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(1, 1, H, W) and (1, D) float32 tensors holding the state, written into tensors kept between calls
        (numpy casts a uint8 frame on the way, as forward's img.float() would)."""
        image_shape = (1, 1) + frame.shape[-2:]
        if self._img_np is None or self._img_np.shape != image_shape or self._floats_np.shape[1:] != state_float.shape:
            self._img, self._floats = torch.empty(image_shape), torch.empty((1, *state_float.shape))
            self._img_np, self._floats_np = self._img.numpy(), self._floats.numpy()
        self._img_np[0, 0] = frame.reshape(image_shape[2:])
        self._floats_np[0] = state_float
        if self.network.device.type == "cpu":
            return self._img, self._floats
        return self._img.to(self.network.device), self._floats.to(self.network.device)


def _convolutions(network: IQNNetwork) -> list[nn.Conv2d]:
    return [layer for layer in network.img_head if isinstance(layer, nn.Conv2d)]


def make_inference_network(cfg, layout: FloatLayout, n_actions: int, jit: bool, device: torch.device | str = "cpu") -> InferenceNetwork:
    return InferenceNetwork(cfg, layout, n_actions, jit=jit, device=device)


def use_acting_torch_settings() -> None:
    """Torch settings of a process that only acts, at batch 1 on the CPU (a collector): one thread, and
    convolutions without oneDNN (mkldnn). oneDNN's batch-1 convolutions of the default network are slower
    than torch's own (im2col + GEMM): measured on 2 Xeon 2.8 GHz vCPUs, torch 2.13.0+cpu, 1 thread, a whole
    Inferer call ran 16-19% faster without it (A/B, alternating blocks, medians; the convolutions alone
    ~40% faster); the Q values agree to float rounding (~1e-7). A process-wide flag: never set it in the
    learner, whose batched training keeps oneDNN."""
    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = False


@contextlib.contextmanager
def acting_torch_settings():
    """`use_acting_torch_settings()` for the duration of a block (benchmarks), then the previous settings."""
    threads, mkldnn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    use_acting_torch_settings()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.backends.mkldnn.enabled = mkldnn
