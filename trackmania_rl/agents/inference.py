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
"""

from __future__ import annotations

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

    def __call__(self, img: torch.Tensor, state_float: torch.Tensor, n_quantiles: int, taus: torch.Tensor | None = None):
        return self.acting(img, state_float, n_quantiles, taus)

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

    def state_dict(self) -> dict:
        return self.module.state_dict()


def make_inference_network(cfg, layout: FloatLayout, n_actions: int, jit: bool, device: torch.device | str = "cpu") -> InferenceNetwork:
    return InferenceNetwork(cfg, layout, n_actions, jit=jit, device=device)
