"""One IQN learning step (DESIGN §3.6): the quantile Huber loss, the optimizer, the trainer, target updates.

- `quantile_huber_loss`: per-sample loss (B,), summed over online quantiles, averaged over target quantiles.
- `Trainer`: one learning step on a replay batch; standard IQN target (next action = argmax of the target
  network's quantile mean; `use_ddqn`: argmax of the online network's), loss = mean over the batch
  (IS-weighted when prioritized), gradient clipping, no step on a non-finite gradient (counted);
  `precision` float32, or bfloat16 for mixed precision (IQNNetwork.training_forward keeps the loss, the cosines,
  the output layers and the dueling combine in float32; no loss scaling is needed with bfloat16's exponent
  range). precision.py chooses it.
- `make_optimizer` / `set_optimizer_hyperparameters`: RAdam with decoupled weight decay on weights only.
"""

from __future__ import annotations

import math
import time

import torch
from torch import nn

from trackmania_rl.agents.step_phases import StepPhases, since
from trackmania_rl.agents.step_results import StepResult

TAU_KEYS = ("taus", "next_taus_target", "next_taus_online")  # a batch's quantile fractions: online, target and ddqn


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

    def __init__(
        self,
        online: nn.Module,
        target: nn.Module,
        optimizer: torch.optim.Optimizer,
        cfg,
        device: torch.device | str,
        precision: torch.dtype = torch.float32,
    ):
        self.online = online
        self.target = target
        self.optimizer = optimizer
        self.cfg = cfg
        self.device = torch.device(device)
        self.precision = precision
        self.n_quantiles = int(cfg.iqn_n)
        self.nonfinite_steps_skipped = 0
        self.graphed = None  # a GraphedTrainStep (graphed_step.py) runs the steps when set: CUDA graphs
        # a learner group's exchange (learner_group/gradients.py): start() before backward, finish() after it and
        # before clipping: the ranks' gradients averaged, so that every rank clips, skips and steps alike
        self.gradient_exchange = None
        self.phases = StepPhases()

    @property
    def use_amp(self) -> bool:
        return self.precision != torch.float32

    def _forward(self, network, img, floats, taus=None):
        return network.training_forward(img, floats, self.n_quantiles, self.precision, taus=taus)

    def draw_taus(self, batch_size: int, generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """The quantile fractions of one step, drawn on the CPU as `compute_loss` would draw them on its device: put in
        a batch, they make the step a function of its batch (a CUDA graph replays no random draw). The online network's
        fractions at the next state are drawn too, used when use_ddqn is on (a live setting)."""
        draw = self.online.sample_taus
        return {key: draw(batch_size, self.n_quantiles, torch.device("cpu"), generator) for key in TAU_KEYS}

    def compute_loss(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch loss, per-sample loss (B,) detached). The batch loss is the mean over the batch of the
        per-sample losses, each multiplied by its importance weight when the batch has `weight`. Quantile
        fractions come from the batch when it has them (`draw_taus`), else are drawn here."""
        cfg, n = self.cfg, self.n_quantiles
        action = batch["action"]
        batch_size = action.shape[0]
        with torch.no_grad():
            next_img, next_float = batch["next_state_img"], batch["next_state_float"]
            q_next_target, _ = self._forward(self.target, next_img, next_float, batch.get("next_taus_target"))
            if cfg.use_ddqn:
                q_next_online, _ = self._forward(self.online, next_img, next_float, batch.get("next_taus_online"))
                next_action = q_next_online.mean(dim=1).argmax(dim=1)
            else:
                next_action = q_next_target.mean(dim=1).argmax(dim=1)
            z_next = q_next_target.gather(2, next_action.view(batch_size, 1, 1).expand(batch_size, n, 1)).squeeze(2)
            target = batch["reward"].unsqueeze(1) + batch["gamma_eff"].unsqueeze(1) * z_next  # (B, N)
        q, taus = self._forward(self.online, batch["state_img"], batch["state_float"], batch.get("taus"))
        q_taken = q.gather(2, action.view(batch_size, 1, 1).expand(batch_size, n, 1)).squeeze(2)
        per_sample = quantile_huber_loss(q_taken, taus, target, float(cfg.iqn_kappa))
        weight = batch.get("weight")
        loss = (per_sample * weight).mean() if weight is not None else per_sample.mean()
        return loss, per_sample.detach()

    def train_on_tensors(self, batch: dict, do_learn: bool = True) -> tuple[float, float, torch.Tensor]:
        """One step on a ready batch: (loss, grad norm before clipping (0 when not learning), per-sample loss).

        A non-finite gradient norm (an overflow, a diverging target) skips the optimizer step and counts it in
        `nonfinite_steps_skipped`: one such step would write NaN into every weight and, once published, into
        every collector, losing the run."""
        return self.launch_on_tensors(batch, do_learn).read()

    def launch_on_tensors(self, batch: dict, do_learn: bool = True) -> StepResult:
        """`train_on_tensors` whose results are read when needed: a captured step's (`graphed`) come back from the
        GPU asynchronously (agents/step_results.py), an eager step's are known at once."""
        if self.graphed is not None:
            return self.graphed.launch(batch, do_learn)
        return StepResult.known(*self._eager_step(batch, do_learn))

    def _eager_step(self, batch: dict, do_learn: bool) -> tuple[float, float, torch.Tensor]:
        phases, start = self.phases, time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        with torch.set_grad_enabled(do_learn):  # test batches build no graph
            loss, per_sample = self.compute_loss(batch)
        grad_norm = 0.0
        if not do_learn:
            phases.testing += time.perf_counter() - start
            phases.test_steps += 1
            return float(loss.detach()), grad_norm, per_sample
        elapsed, start = since(start)
        phases.forward += elapsed
        exchange = self.gradient_exchange
        if exchange is not None:
            exchange.start()
        loss.backward()
        elapsed, start = since(start)
        phases.backward += elapsed
        if exchange is not None:
            exchange.finish()
            elapsed, start = since(start)
            phases.exchange += elapsed
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.online.parameters(), self.cfg.clip_grad_norm))
        if math.isfinite(grad_norm):
            torch.nn.utils.clip_grad_value_(self.online.parameters(), self.cfg.clip_grad_value)
            self.optimizer.step()
        else:
            self.optimizer.zero_grad(set_to_none=True)
            self.nonfinite_steps_skipped += 1
        phases.optimizer += time.perf_counter() - start
        phases.learning_steps += 1
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
    """target <- (1 - tau) target + tau online, buffers copied; the target is a network of the online one's
    architecture (same parameters and buffers, in the same order)."""
    target_params, online_params = list(target.parameters()), list(online.parameters())
    if len(target_params) != len(online_params):
        raise ValueError(f"soft update between networks of {len(target_params)} and {len(online_params)} parameters")
    torch._foreach_lerp_(target_params, online_params, float(tau))  # one call: on a GPU, one launch per dtype, not one per tensor
    for b_target, b_online in zip(target.buffers(), online.buffers(), strict=True):
        b_target.copy_(b_online)
