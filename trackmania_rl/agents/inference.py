"""The collectors' inference network: JIT-compiled, with weights refreshed from the shared uncompiled network.

Choice of compiler, measured here (IQN of the default config, 64x64 frame, 66 floats, 12 actions, K = 32
quantiles, batch 1, CPU, torch 2.13.0+cpu, 1 thread, median of 300 calls, run twice):
    eager 1.35-1.39 ms | torch.jit.script 1.08-1.19 ms (builds in 0.06 s)
    | torch.compile(dynamic=False) 1.19-1.26 ms (builds in 4-28 s, needs a C++ compiler)
    | script + freeze + optimize_for_inference 0.76 ms, but freezing bakes the weights in as constants,
      so every weight refresh would need a re-freeze (~55 ms): not usable for a network refreshed every
      few actions.
So `jit=True` means torch.jit.script (not frozen). `scripts/benchmark.py learner` re-measures it
(`learner.inference_ms_p50` and the eager figure beside it).

The weight refresh copies the shared network's tensors *into the tensors the acting module computes with*
(its own state_dict entries, in place), so it reaches the network that acts whether it is scripted, compiled
or eager (Linesight's jit=False path acted with a deep copy that never received new weights).

Acting at batch 1 on the CPU (collectors), savings that leave the Q values as they were, measured with
the default config (iqn_k = 8) on 2 Xeon 2.8 GHz vCPUs, torch 2.13.0+cpu, 1 thread, whole Inferer calls,
A/B in 30 alternating blocks of 200 calls, ratio of medians:
- `at_fixed_taus`: the Inferer acts at fixed midpoint fractions, so the quantile embedding
  LeakyReLU(iqn_fc(cos(pi i tau))) is computed once per weight refresh, not per action (bit-identical Q):
  x0.85-0.89;
- Inferer's reused input tensors: x0.96-0.97 (see `Inferer._inputs`);
- `use_acting_torch_settings`: collector processes run convolutions without oneDNN: x0.81-0.84 (Q equal
  to ~1e-7).
All together x0.70-0.73 (0.70-0.77 ms -> 0.49-0.55 ms with warm caches); inside real rollouts, where the
render leaves the caches cold, the network's share of an action went from 1.36 to 0.98 ms.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from trackmania_rl.agents.iqn import IQNNetwork, strip_compile_prefix
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

    def at_fixed_taus(self, taus: torch.Tensor) -> "FixedTausQ":
        """`q(img, state_float) -> (B, N, A)`: the Q of `self(img, state_float, N, taus)`, reusing the quantile
        embedding of `taus` (1, N) until the next weight refresh."""
        return FixedTausQ(self, taus)

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


class FixedTausQ:
    """A collector's Q at fixed quantile fractions (Inferer's midpoints): the embedding
    LeakyReLU(iqn_fc(cos(pi i tau))) depends only on the weights and the fractions, so it is computed once
    per weight refresh instead of once per action, by the same scripted operations as `forward`
    (bit-identical Q). Weights must change only through `InferenceNetwork.load_state_dict_from`."""

    def __init__(self, network: InferenceNetwork, taus: torch.Tensor):
        if taus.dim() != 2 or taus.shape[0] != 1:
            raise ValueError(f"fixed fractions must have shape (1, N), got {tuple(taus.shape)}")
        self.network = network
        self.taus = taus.detach().to(device=network.device, dtype=torch.float32).clone()
        self.n_quantiles = int(self.taus.shape[1])
        self._q_with_embedding = network.acting.q_with_embedding
        self._embedding: torch.Tensor | None = None
        self._generation = -1

    def __call__(self, img: torch.Tensor, state_float: torch.Tensor) -> torch.Tensor:
        if self._generation != self.network.weights_generation:
            with torch.inference_mode():
                self._embedding = self.network.acting.quantile_embedding(self.taus)  # (1, N, F)
            self._generation = self.network.weights_generation
        return self._q_with_embedding(img, state_float, self._embedding)


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
