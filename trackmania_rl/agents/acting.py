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
rewrites itself from them (`Inferer.prepare` right after the refresh, or at its next call).

Acting at batch 1 on the CPU, what counts is the cost right after a render: the render evicts the code and
the weights from the caches, so each operation costs several times its warm cost (a lone small tensor add:
~3 us warm, ~80 us after a render). Measured with the default config (iqn_k = 8) on 2 Xeon 2.8 GHz vCPUs,
torch 2.13.0+cpu, 1 thread, one decision right after a render, medians of ~430 decisions: the previous,
torch-only acting program alternated with this numpy-buffer one in one process, three runs: 1072 / 924 /
1095 us -> 694 / 631 / 706 us; the TorchScript forward alternated with it by `python scripts/benchmark.py
game` (`game.decision_us_after_render`): 1.55-1.69 ms against 0.73-0.79 ms. torch.compile (inductor, C++
wrapper) of the torch-only program was no faster after a render (~1.0 ms).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from torch import nn

from trackmania_rl.agents.iqn import LEAKY_SLOPE, IQNNetwork, strip_compile_prefix
from trackmania_rl.games.float_layout import FloatLayout

LEAKY_SLOPE_F32 = np.float32(LEAKY_SLOPE)


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
        self.weights_generation = 0  # bumped by every refresh: the acting program rewrites its matrices
        self._copy_source, self._copy_pairs = None, []  # the shared network last copied from, (ours, its) tensors

    def __call__(self, img: torch.Tensor, state_float: torch.Tensor, n_quantiles: int, taus: torch.Tensor | None = None):
        return self.acting(img, state_float, n_quantiles, taus)

    def mean_q_at(self, taus: torch.Tensor) -> MeanQAtFixedTaus:
        """`q(frame, state_float) -> (A,)`: the mean over the fractions `taus` (1, N) of this network's Q
        values for one state, by the collectors' short acting program (kept up to date with every refresh)."""
        return MeanQAtFixedTaus(self, taus)

    @torch.no_grad()
    def load_state_dict_from(self, shared_network: nn.Module) -> None:
        """Copy the shared network's weights and normalisation into the acting network (in place).

        Call it with the shared network's lock held. Raises KeyError / RuntimeError on any mismatch, before
        copying anything.
        """
        if self._copy_source is not shared_network:  # matched once per shared network: its tensors are kept
            source = strip_compile_prefix(shared_network.state_dict())
            if set(source) != self._expected_keys:
                expected = self._expected_keys
                raise KeyError(
                    f"shared network entries differ: missing {sorted(expected - set(source))}, unexpected {sorted(set(source) - expected)}"
                )
            pairs = []
            for name, tensor in source.items():
                ours = self._acting_tensors[name]
                if ours.shape != tensor.shape:  # checked before anything is copied: no half-overwritten network
                    raise RuntimeError(f"shared network entry {name!r} has shape {tuple(tensor.shape)}, this network's {tuple(ours.shape)}")
                pairs.append((ours, tensor))
            self._copy_pairs, self._copy_source = pairs, shared_network
        for destination, tensor in self._copy_pairs:
            destination.copy_(tensor)
        self.weights_generation += 1

    def state_dict(self) -> dict:
        return self.module.state_dict()


class MeanQAtFixedTaus:
    """A collector's acting computation on the CPU: `q(frame, state_float) -> np.ndarray (A,)`, the network's
    Q values averaged over the fixed quantile fractions `taus` (1, N), i.e. the mean over quantiles of
    `IQNNetwork.forward(img, floats, N, taus)`, for one state (frame (C, H, W), or (H, W) when C = 1, floats (D,)).

    Why not forward: acting at batch 1 right after a render, the CPU caches hold neither the code nor the
    weights, and every operation pays for that (a lone small torch add: ~3 us warm, ~80 us after a
    render). So the same function runs as few operations as possible, on buffers kept between calls,
    through numpy (whose calls touch far less code than torch's dispatcher) and torch's matrix products
    (MKL on one thread: numpy's OpenBLAS would start its own threads):
    - convolutions are matrix products on image patches, in channels-last order, so that the patches of
      the next layer are strided views of this layer's output (one copy each, no padding allowed);
    - every layer's bias is a row of its weight matrix, against a column of ones kept in its input;
    - LeakyReLU is max(x, slope x), in place or straight into the next layer's input;
    - the frame's (x - 128) / 128 is folded into the first convolution (W / 128, b - sum(W)) and the
      floats' (x - mean) / std into the first float layer (W / std, b - (W / std) mean);
    - the last convolution's output is written into the features in forward's channels-first order;
    - the quantile embedding of the fixed fractions is computed once; the A and V heads' first layers are
      one matrix;
    - the mean over quantiles and the dueling combination V + A - mean(A) are linear, so they are folded
      into the last matrix: the N quantiles' hidden vectors side by side times N stacked copies of it.
    The result equals forward's to float rounding (~1e-7; tests/agents/test_acting.py checks several
    architectures). The folding is for Linesight's plain convolutions; another encoder (`network_encoder =
    "impala"`: padding, pooling, residual sums) computes the frame's features through its torch module, the rest of
    the program unchanged. After every weight refresh (`InferenceNetwork.load_state_dict_from` bumps the
    generation) the weights are rewritten into the kept matrices, by `prepare()` or at the next call. Not
    thread-safe: every call reuses the same buffers. Measured in docs/performance.md."""

    def __init__(self, network: InferenceNetwork, taus: torch.Tensor):
        if taus.dim() != 2 or taus.shape[0] != 1:
            raise ValueError(f"fixed fractions must have shape (1, N), got {tuple(taus.shape)}")
        if network.device.type != "cpu":
            raise ValueError(f"the acting program runs on the CPU; this network is on {network.device}")
        self._folded = network.module.encoder == "linesight"  # the encoder's convolutions as matrix products
        for conv in network.module.convolutions if self._folded else ():
            if conv.padding != (0, 0) or conv.dilation != (1, 1) or conv.groups != 1:
                raise ValueError("the folded acting program supports convolutions without padding, dilation or groups")
        self.network = network
        self.taus = taus.detach().to(dtype=torch.float32).cpu().clone()
        self._generation = -1
        self._build()

    def _build(self) -> None:
        """Allocate every buffer and weight matrix once, with the strided views that connect them."""
        m = self.network.module
        channels, height, width = m.image_shape
        self._frame_shape = (channels, height, width)
        # the folded convolutions read the frame channels-last: a stack of frames is transposed into this first
        self._channels_last = np.empty((height, width, channels), np.uint8) if channels > 1 else None
        self._convs = []
        for conv in m.convolutions if self._folded else ():
            (kh, kw), (sh, sw) = conv.kernel_size, conv.stride
            out_h, out_w = (height - kh) // sh + 1, (width - kw) // sw + 1
            n_in = kh * kw * channels
            layer = _Layer(np.ones((out_h * out_w, n_in + 1), np.float32), conv.out_channels)  # last column: ones (bias)
            # the inputs matrix as (out_h, out_w, kh, kw, c) patches, and where each patch lies in the
            # channels-last (height, width, channels) input, in elements: in the frame for the first layer,
            # else a view of the previous layer's output
            layer.patches = _strided(
                layer.inputs, (out_h, out_w, kh, kw, channels), (out_w * (n_in + 1), n_in + 1, kw * channels, channels, 1)
            )
            patch_strides = (sh * width * channels, sw * channels, width * channels, channels, 1)
            if self._convs:
                layer.source = _strided(self._convs[-1].out, layer.patches.shape, patch_strides)
            else:
                self._frame_patch_strides = patch_strides
            self._convs.append(layer)
            height, width, channels = out_h, out_w, conv.out_channels
        conv_dim = channels * height * width if self._folded else m.conv_head_output_dim
        float_in, float_out = m.float_input_layer, m.float_output_layer
        self._float_in = _Layer(np.ones((1, float_in.in_features + 1), np.float32), float_in.out_features)
        self._float_out = _Layer(np.ones((1, float_out.in_features + 1), np.float32), float_out.out_features)
        self._features = np.empty(conv_dim + float_out.out_features, np.float32)
        if self._folded:
            self._conv_features = self._features[:conv_dim].reshape(channels, height * width).T  # forward's channels-first
        else:
            self._conv_features = self._features[:conv_dim]
            self._frame = torch.empty((1, *self._frame_shape), dtype=torch.float32)
        self._float_features = self._features[None, conv_dim:]
        n_quantiles = self.taus.shape[1]
        a_hidden, a_out = m.advantage_hidden_layer, m.advantage_output_layer
        n_hidden = a_hidden.out_features + m.value_hidden_layer.out_features
        self._embedding = np.empty((n_quantiles, self._features.size), np.float32)
        self._hidden = _Layer(np.ones((n_quantiles, self._features.size + 1), np.float32), n_hidden)
        self._q = _Layer(np.ones((1, n_quantiles * n_hidden + 1), np.float32), a_out.out_features)  # every quantile's hidden, side by side
        self._quantile_hidden = self._q.inputs[0, :-1].reshape(n_quantiles, n_hidden)

    @torch.no_grad()
    def _rewrite(self) -> None:
        """The network's current weights -> the program's matrices, in place."""
        m = self.network.module
        for i, (conv, layer) in enumerate(zip(m.convolutions if self._folded else (), self._convs, strict=True)):
            weight, bias = _numpy(conv.weight), _numpy(conv.bias)
            if i == 0:  # the frame's (x - 128) / 128
                weight, bias = weight / 128.0, bias - weight.sum(axis=(1, 2, 3))
            layer.set(weight.transpose(0, 2, 3, 1).reshape(weight.shape[0], -1), bias)  # inputs in (kh, kw, c) order
        float_in, float_out = m.float_input_layer, m.float_output_layer
        weight = _numpy(float_in.weight) / _numpy(m.float_std)
        self._float_in.set(weight, _numpy(float_in.bias) - weight @ _numpy(m.float_mean))
        self._float_out.set(_numpy(float_out.weight), _numpy(float_out.bias))
        self._embedding[:] = _numpy(m.quantile_embedding(self.taus)[0])
        a_hidden, a_out = m.advantage_hidden_layer, m.advantage_output_layer
        v_hidden, v_out = m.value_hidden_layer, m.value_output_layer
        n_a = a_hidden.out_features
        self._hidden.set(_numpy(a_hidden.weight), _numpy(a_hidden.bias), columns=slice(0, n_a))
        self._hidden.set(_numpy(v_hidden.weight), _numpy(v_hidden.bias), columns=slice(n_a, None))
        # q = V + A - mean(A), averaged over the quantiles: one (N * 2H + 1, A) matrix, a block per quantile
        a_weight, a_bias = _numpy(a_out.weight), _numpy(a_out.bias)
        n_quantiles = self.taus.shape[1]
        blocks = self._q.weights[:-1].reshape(n_quantiles, -1, a_out.out_features)  # (N, 2H, A)
        blocks[:, :n_a] = (a_weight - a_weight.mean(axis=0)).T / n_quantiles
        blocks[:, n_a:] = _numpy(v_out.weight).T / n_quantiles
        self._q.weights[-1] = a_bias - a_bias.mean() + _numpy(v_out.bias)
        self._generation = self.network.weights_generation

    def prepare(self) -> None:
        """Rewrite the matrices now if the network's weights changed since (else the next call does)."""
        if self._generation != self.network.weights_generation:
            self._rewrite()

    def __call__(self, frame: np.ndarray, state_float: np.ndarray) -> np.ndarray:
        self.prepare()
        frame = np.ascontiguousarray(frame)
        channels, height, width = self._frame_shape
        if frame.shape[-2:] != (height, width) or frame.size != channels * height * width:
            raise ValueError(f"expected a frame of shape {self._frame_shape}, got {frame.shape}")
        if self._folded:
            first, *others = self._convs
            if self._channels_last is not None:
                np.copyto(self._channels_last, frame.reshape(self._frame_shape).transpose(1, 2, 0))
                frame = self._channels_last
            np.copyto(first.patches, _strided(frame, first.patches.shape, self._frame_patch_strides))  # to float32
            first.run(activation_into=first.out)
            for layer in others:
                np.copyto(layer.patches, layer.source)
                layer.run(activation_into=layer.out)
            np.copyto(self._conv_features, self._convs[-1].out)
        else:
            with torch.no_grad():
                self._frame.copy_(torch.from_numpy(frame).reshape(self._frame.shape)).sub_(128.0).div_(128.0)
                np.copyto(self._conv_features, self.network.module.img_head(self._frame)[0].numpy())
        np.copyto(self._float_in.inputs[0, :-1], state_float)
        self._float_in.run(activation_into=self._float_out.inputs[:, :-1])
        self._float_out.run(activation_into=self._float_features)
        np.multiply(self._features, self._embedding, out=self._hidden.inputs[:, :-1])
        self._hidden.run(activation_into=self._quantile_hidden)
        self._q.run()
        return self._q.out[0].copy()


class _Layer:
    """One matrix product of the acting program, on kept buffers: `out = inputs @ weights`, the inputs
    ending with a column of ones and the weights with the bias row; then LeakyReLU into a destination."""

    def __init__(self, inputs: np.ndarray, n_out: int):
        self.inputs = inputs
        self.weights = np.empty((inputs.shape[1], n_out), np.float32)
        self.out = np.empty((inputs.shape[0], n_out), np.float32)
        self._scaled = np.empty_like(self.out)
        self._tensors = tuple(torch.from_numpy(a) for a in (self.inputs, self.weights, self.out))

    def set(self, weight: np.ndarray, bias: np.ndarray, columns: slice = slice(None)) -> None:
        """A torch layer's (outputs, inputs) weight and its bias, into these output columns."""
        self.weights[:-1, columns] = weight.T
        self.weights[-1, columns] = bias

    def run(self, activation_into: np.ndarray | None = None) -> None:
        """out = inputs @ weights (torch: MKL on one thread); LeakyReLU(out) = max(out, slope out) is
        written into `activation_into` when given."""
        inputs, weights, out = self._tensors
        torch.mm(inputs, weights, out=out)
        if activation_into is not None:
            np.multiply(self.out, LEAKY_SLOPE_F32, out=self._scaled)
            np.maximum(self.out, self._scaled, out=activation_into)


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().numpy()


def _strided(array: np.ndarray, shape: tuple, element_strides: tuple) -> np.ndarray:
    """A view of `array`'s memory with the given shape and strides counted in elements."""
    return np.ndarray(shape, array.dtype, buffer=array, strides=tuple(s * array.itemsize for s in element_strides))


def make_inference_network(cfg, layout: FloatLayout, n_actions: int, jit: bool, device: torch.device | str = "cpu") -> InferenceNetwork:
    return InferenceNetwork(cfg, layout, n_actions, jit=jit, device=device)


def use_acting_torch_settings() -> None:
    """Torch settings of a process that only acts, at batch 1 on the CPU (a collector): one thread (the
    acting program's matrix products run on it), and forward's convolutions (analysis, videos) without
    oneDNN (mkldnn). oneDNN's batch-1 convolutions of the default network are slower
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
