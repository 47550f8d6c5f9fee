"""The learning step as captured CUDA graphs, where that is faster (DESIGN §2, §5: a GPU learner's step is launch-bound).

On a GPU the eager step launches ~235 small kernels while the GPU computes ~1.3 ms of ~10 ms (an H100, batch 128 to
2048 alike). A CUDA graph records those launches once and replays them with one call. `GraphedTrainStep` keeps
`Trainer.train_on_tensors`'s meaning with three graphs over static tensors (the batch is copied into them):
- learn: forward (target and online networks), loss, backward, gradient-norm clipping, value clipping;
- optimizer: the RAdam update (`radam_update`: torch's RAdam with decoupled weight decay, written with foreach ops
  and the learning rate in a device tensor, so that the lr schedule moves without re-capturing), applied only when
  the learn graph's gradient norm is finite: decided on the GPU (the same skip as the eager step, with no host
  synchronisation);
- test: the loss of a hidden-test batch, no gradient.
`launch` replays them and returns at once: the step's [loss, gradient norm, per-sample losses] come back through an
asynchronous copy to pinned memory (agents/step_results.py), read when the caller needs them, so the CPU prepares the
next step while the GPU runs this one; `step` is `launch` read at once. A batch packed by the prefetch thread
(agents/packed_tensors.py) is copied into the static tensors, views of one flat tensor, in one copy. The quantile
fractions come with the batch (`Trainer.draw_taus`): a graph replays no random draw. Values baked into the graphs
(batch size, precision, quantiles, kappa, use_ddqn, clipping, betas, eps, weight decay) are checked before every
step; a live edit of one (or a new batch size) re-captures them, logged. The optimizer's state stays torch's RAdam
state (the same checkpoints); its step counts live on the GPU while graphs are on (`set_capturable`).

`capture=False` runs the same static-tensor step eagerly: the CPU tests check it against the eager Trainer.
`choose_cuda_graphs` is `training_cuda_graphs`: "off", "on" (CUDA only) or "auto" (a start-up probe, logged).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from trackmania_rl.agents.iqn import make_network
from trackmania_rl.agents.packed_tensors import PACKED, PackedLayout
from trackmania_rl.agents.precision import random_batch
from trackmania_rl.agents.step_results import ResultSlots, StepResult
from trackmania_rl.agents.training import Trainer, make_optimizer
from trackmania_rl.device import wait_for_device

CUDA_GRAPH_SETTINGS = ("auto", "on", "off")
WARMUP_STEPS = 3  # eager steps on a side stream before capture: kernels chosen, allocator pools filled
MIN_SPEEDUP = 1.1  # "auto" keeps the graphs only if the probe finds them this much faster
PROBE_WARMUP_STEPS = 2
PROBE_TIMED_ROUNDS = 7


# ---------------------------------------------------------------------------------------------------------
# RAdam with the learning rate in a tensor
# ---------------------------------------------------------------------------------------------------------
def set_capturable(optimizer: torch.optim.Optimizer, capturable: bool) -> None:
    """Put the RAdam step counts where the update runs: on the parameters' device as float32 tensors for graphs
    (torch's capturable mode), on the CPU otherwise. Called after creating or loading the optimizer's state."""
    for group in optimizer.param_groups:
        group["capturable"] = bool(capturable)
        for p in group["params"]:
            state = optimizer.state.get(p)
            if state and "step" in state:
                device = p.device if capturable else torch.device("cpu")
                state["step"] = torch.as_tensor(state["step"], dtype=torch.float32).to(device)


def ensure_radam_state(optimizer: torch.optim.Optimizer) -> None:
    """Create torch RAdam's per-parameter state where it does not exist yet (a fresh run): zero moments, step 0."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state[p]
            if "exp_avg" not in state:
                step_device = p.device if group.get("capturable") else torch.device("cpu")
                state["step"] = torch.zeros((), dtype=torch.float32, device=step_device)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)


@torch.no_grad()
def radam_update(optimizer: torch.optim.Optimizer, lr: torch.Tensor, apply: torch.Tensor | None = None) -> None:
    """One RAdam step (Liu et al. 2019; torch's RAdam with decoupled_weight_decay=True) over every parameter that
    has a gradient, `lr` a 0-dim tensor on the parameters' device. Every parameter of the optimizer is stepped
    together (the learner's case), so one step count serves the bias corrections. No host synchronisation.
    `apply`, a 0-dim bool tensor on that device: when False the step changes nothing (weights, moments, step
    counts), whatever the gradients hold (a non-finite gradient is not read into the moments)."""
    if apply is not None:
        keep = apply.to(lr.dtype)  # 1.0: the step; 0.0: lr, the moments' rates and the count increment all 0
        lr = lr * keep
    for group in optimizer.param_groups:
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            continue
        beta1, beta2 = group["betas"]
        states = [optimizer.state[p] for p in params]
        steps = [s["step"] for s in states]
        exp_avgs, exp_avg_sqs = [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]
        grads = [p.grad for p in params]
        if apply is None:
            torch._foreach_add_(steps, 1)
        else:  # no non-finite value reaches the moments; the flag as a list (the one-tensor overload reads it on the host)
            grads = [torch.where(apply, g, 0.0) for g in grads]
            torch._foreach_add_(steps, [keep] * len(steps))
        t = steps[0]
        rho_inf = 2 / (1 - beta2) - 1
        bias_correction1 = 1 - torch.pow(beta1, t)
        bias_correction2 = 1 - torch.pow(beta2, t)
        rho_t = rho_inf - 2 * t * torch.pow(beta2, t) / bias_correction2
        rect = torch.sqrt(torch.clamp((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t), min=0.0))
        rectified = rho_t > 5.0
        # update = adaptive x m / (sqrt(v) + eps) + plain x m: the rectified step, or plain momentum while rho_t <= 5
        adaptive = torch.where(rectified, -lr * rect * torch.sqrt(bias_correction2) / bias_correction1, 0.0)
        plain = torch.where(rectified, 0.0, -lr / bias_correction1)
        if group["weight_decay"] != 0:
            torch._foreach_mul_(params, 1 - lr * group["weight_decay"])
        if apply is None:
            torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
            torch._foreach_mul_(exp_avg_sqs, beta2)
        else:  # m += (1 - beta1) keep (g - m); v *= 1 - (1 - beta2) keep: unchanged when keep is 0
            moved = torch._foreach_sub(grads, exp_avgs)
            torch._foreach_mul_(moved, (1 - beta1) * keep)
            torch._foreach_add_(exp_avgs, moved)
            torch._foreach_mul_(exp_avg_sqs, 1 - (1 - beta2) * keep)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
        denominator = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_add_(denominator, group["eps"])
        update = torch._foreach_div(exp_avgs, denominator)
        torch._foreach_mul_(update, adaptive)
        momentum = torch._foreach_mul(exp_avgs, plain)
        torch._foreach_add_(update, momentum)
        torch._foreach_add_(params, update)


# ---------------------------------------------------------------------------------------------------------
# The step over static tensors
# ---------------------------------------------------------------------------------------------------------
def baked_values(trainer: Trainer, batch_size: int, inputs: tuple[str, ...]) -> tuple:
    """What a captured step holds fixed: a change of any of these needs a new capture."""
    cfg, group = trainer.cfg, trainer.optimizer.param_groups[0]
    return (
        int(batch_size),
        inputs,
        trainer.precision,
        trainer.n_quantiles,
        bool(cfg.use_ddqn),
        float(cfg.iqn_kappa),
        float(cfg.clip_grad_norm),
        float(cfg.clip_grad_value),
        tuple(float(b) for b in group["betas"]),
        float(group["eps"]),
        tuple(float(g["weight_decay"]) for g in trainer.optimizer.param_groups),
    )


class GraphedTrainStep:
    """`launch(batch, do_learn) -> StepResult`: Trainer.launch_on_tensors's contract (loss, grad norm before clipping,
    per-sample loss, read when needed) on static tensors, replayed as CUDA graphs (`capture=True`) or run eagerly on
    them (`capture=False`); `step` reads it at once. The batch must carry the quantile fractions
    (`Trainer.draw_taus`) and, for a prioritized buffer, `weight`."""

    def __init__(self, trainer: Trainer, capture: bool = True, log: Callable[[str], None] = print):
        self.trainer = trainer
        self.capture = capture
        self.log = log
        self.params = list(trainer.online.parameters())
        self.baked: tuple | None = None
        self.captures = 0
        self.static: dict[str, torch.Tensor] = {}
        self.results = ResultSlots()

    # -- building --------------------------------------------------------------------------------------
    def _inputs(self, batch: dict) -> tuple[str, ...]:
        keys = ["state_img", "state_float", "action", "reward", "next_state_img", "next_state_float", "gamma_eff"]
        keys += ["taus", "next_taus_target"]
        if self.trainer.cfg.use_ddqn:
            keys.append("next_taus_online")
        if "weight" in batch:
            keys.append("weight")
        missing = [k for k in keys if k not in batch]
        if missing:
            raise KeyError(f"a graphed train step needs {missing} in its batch (quantile fractions: Trainer.draw_taus)")
        return tuple(keys)

    def _build(self, batch: dict, inputs: tuple[str, ...], baked: tuple) -> None:
        trainer = self.trainer
        device = trainer.device
        self.results.settle()  # the steps launched before this one are read before their graphs go
        # the static inputs are views of one flat tensor: a packed batch of the same layout comes in with one copy
        packed = batch.get(PACKED)
        self.layout = packed.layout if packed is not None else PackedLayout.of({k: batch[k] for k in inputs})
        self.static_flat, views = self.layout.allocate(device)
        self.static = {k: views[k] for k in inputs}
        self._copy_in(batch)
        self.lr = torch.zeros((), dtype=torch.float32, device=device)
        self.lr_value: float | None = None  # what self.lr holds: refilled only when the schedule moves
        ensure_radam_state(trainer.optimizer)
        self.graphs = None
        if self.capture:
            self._capture()
        self.baked = baked
        self.captures += 1

    def _copy_in(self, batch: dict) -> None:
        packed = batch.get(PACKED)
        if packed is not None and packed.layout == self.layout:
            self.static_flat.copy_(packed.flat, non_blocking=True)
            return
        for key, tensor in self.static.items():
            tensor.copy_(batch[key], non_blocking=True)

    def _learn(self) -> torch.Tensor:
        """The step's flat result (step_results.py): loss, gradient norm, per-sample losses, float32."""
        trainer, cfg = self.trainer, self.trainer.cfg
        loss, per_sample = trainer.compute_loss(self.static)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.clip_grad_norm)
        torch.nn.utils.clip_grad_value_(self.params, cfg.clip_grad_value)
        return torch.cat([loss.detach().float().view(1), grad_norm.float().view(1), per_sample.float()])

    def _test(self) -> torch.Tensor:
        with torch.no_grad():
            loss, per_sample = self.trainer.compute_loss(self.static)
        return torch.cat([loss.float().view(1), torch.zeros(1, device=loss.device), per_sample.float()])

    def _optimizer_step(self) -> None:
        radam_update(self.trainer.optimizer, self.lr, apply=torch.isfinite(self.learn_out[1]))

    def _capture(self) -> None:
        optimizer = self.trainer.optimizer
        torch.cuda.synchronize(self.trainer.device)
        side = torch.cuda.Stream(self.trainer.device)
        side.wait_stream(torch.cuda.current_stream(self.trainer.device))
        with torch.cuda.stream(side):  # warm-up without an optimizer step: the weights are not touched
            for _ in range(WARMUP_STEPS):
                optimizer.zero_grad(set_to_none=True)
                self._learn()
                self._test()
        torch.cuda.current_stream(self.trainer.device).wait_stream(side)
        optimizer.zero_grad(set_to_none=True)  # backward allocates the static gradients inside the capture
        learn, step, test = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(learn):
            self.learn_out = self._learn()
        self.grads = [p.grad for p in self.params]  # the learn graph writes them, the optimizer graph reads them
        with torch.cuda.graph(step, pool=learn.pool()):
            self._optimizer_step()
        with torch.cuda.graph(test, pool=learn.pool()):
            self.test_out = self._test()
        self.graphs = {"learn": learn, "step": step, "test": test}

    # -- running ---------------------------------------------------------------------------------------
    def step(self, batch: dict, do_learn: bool = True) -> tuple[float, float, torch.Tensor]:
        return self.launch(batch, do_learn).read()

    def _count_skipped(self) -> None:
        self.trainer.nonfinite_steps_skipped += 1

    def launch(self, batch: dict, do_learn: bool = True) -> StepResult:
        inputs = self._inputs(batch)
        baked = baked_values(self.trainer, batch["action"].shape[0], inputs)
        if baked != self.baked:
            if self.baked is not None:
                self.log(f"train step re-captured: batch size or a hyperparameter held by the step changed ({_changes(self.baked, baked)})")
            self._build(batch, inputs, baked)
        else:
            self._copy_in(batch)
        if not do_learn:
            if self.graphs is not None:
                self.graphs["test"].replay()
            else:
                self.test_out = self._test()
            return self.results.result_of(self.test_out, False, None)
        lr = float(self.trainer.optimizer.param_groups[0]["lr"])
        if lr != self.lr_value:
            self.lr.fill_(lr)
            self.lr_value = lr
        if self.graphs is not None:
            self.graphs["learn"].replay()
            self.graphs["step"].replay()  # no update when the learn graph's gradient norm is not finite
        else:
            self.trainer.optimizer.zero_grad(set_to_none=True)
            self.learn_out = self._learn()
            self._optimizer_step()
        return self.results.result_of(self.learn_out, True, self._count_skipped)


_BAKED_NAMES = ("batch size", "inputs", "precision", "quantiles", "use_ddqn", "kappa", "clip_grad_norm", "clip_grad_value", "betas", "eps")
_BAKED_NAMES += ("weight decay",)


def _changes(old: tuple, new: tuple) -> str:
    return ", ".join(f"{name} {a} -> {b}" for name, a, b in zip(_BAKED_NAMES, old, new, strict=True) if a != b)


# ---------------------------------------------------------------------------------------------------------
# training_cuda_graphs: off, on, or auto (a probe)
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CudaGraphChoice:
    enabled: bool
    reason: str
    eager_ms: float | None = None
    graph_ms: float | None = None


def time_graph_against_eager(trainer_factory: Callable[[], Trainer], batch: dict, device: torch.device) -> tuple[float, float]:
    """Median ms of one eager and one graphed train step on the same networks' copies and batch, alternated."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(0)
        eager, graphed = trainer_factory(), trainer_factory()
        set_capturable(graphed.optimizer, True)
        runner = GraphedTrainStep(graphed, capture=True, log=lambda m: None)
        steps = {"eager": lambda: eager.train_on_tensors(batch, True), "graph": lambda: runner.step(batch, True)}
        times = {name: [] for name in steps}
        for round_index in range(PROBE_WARMUP_STEPS + PROBE_TIMED_ROUNDS):
            for name, run in steps.items():
                wait_for_device(device)
                start = time.perf_counter()
                run()
                wait_for_device(device)
                if round_index >= PROBE_WARMUP_STEPS:
                    times[name].append(1000 * (time.perf_counter() - start))
    return statistics.median(times["eager"]), statistics.median(times["graph"])


def check_cuda_graphs_setting(setting: str, device: torch.device) -> None:
    """ValueError for a value that is not a setting, or "on" for a device without CUDA."""
    if setting not in CUDA_GRAPH_SETTINGS:
        raise ValueError(f"training_cuda_graphs must be one of {CUDA_GRAPH_SETTINGS}, got {setting!r}")
    if setting == "on" and torch.device(device).type != "cuda":
        raise ValueError(f"training_cuda_graphs = 'on' needs a CUDA device; this run's device is {device} (use 'auto' or 'off')")


def choose_cuda_graphs(setting: str, cfg, layout, n_actions: int, device: torch.device, precision: torch.dtype, log) -> CudaGraphChoice:
    """`training_cuda_graphs`: "off"; "on" (ValueError without CUDA: the start refuses it); "auto": on a CUDA device,
    time both steps at the run's batch size and precision and keep the graphs if they are MIN_SPEEDUP faster."""
    check_cuda_graphs_setting(setting, device)
    if setting == "off":
        choice = CudaGraphChoice(False, "training_cuda_graphs = 'off'")
    elif device.type != "cuda":
        choice = CudaGraphChoice(False, f"auto: CUDA graphs need a CUDA device, this run's is {device.type}")
    elif setting == "on":
        choice = CudaGraphChoice(True, "training_cuda_graphs = 'on'")
    else:

        def trainer_factory() -> Trainer:
            online, target = make_network(cfg, layout, n_actions, device), make_network(cfg, layout, n_actions, device)
            return Trainer(online, target, make_optimizer(online, cfg, 1e-6), cfg, device, precision=precision)

        probe_trainer = trainer_factory()
        batch = random_batch(cfg, layout, n_actions, device)
        taus = probe_trainer.draw_taus(int(cfg.batch_size), torch.Generator().manual_seed(0))  # the run's random state untouched
        batch.update({k: v.to(device) for k, v in taus.items()})
        try:
            eager_ms, graph_ms = time_graph_against_eager(trainer_factory, batch, device)
        except RuntimeError as e:  # a capture this torch or driver refuses: "auto" trains eagerly rather than not at all
            choice = CudaGraphChoice(False, f"auto: the probe could not capture the train step ({type(e).__name__}: {e})")
        else:
            faster = eager_ms / graph_ms >= MIN_SPEEDUP
            verdict = "graphs are faster" if faster else f"graphs are not {MIN_SPEEDUP}x faster"
            choice = CudaGraphChoice(
                faster,
                f"auto, probe of the train step at batch {cfg.batch_size} on {device}: eager {eager_ms:.2f} ms, "
                f"CUDA graph {graph_ms:.2f} ms ({eager_ms / graph_ms:.2f}x): {verdict}",
                eager_ms,
                graph_ms,
            )
    log(f"training CUDA graphs {'on' if choice.enabled else 'off'}: {choice.reason}")
    return choice
