"""The train step over static tensors (agents/graphed_step.py): its RAdam update against torch's, and the whole step
against the eager Trainer, without capture on the CPU and as captured CUDA graphs where a GPU is present."""

import copy

import pytest
import torch

from tests.helpers import layout_for, tiny_config
from trackmania_rl.agents.graphed_step import GraphedTrainStep, choose_cuda_graphs, radam_update, set_capturable
from trackmania_rl.agents.iqn import make_network
from trackmania_rl.agents.packed_tensors import PACKED, Packed, PackedLayout
from trackmania_rl.agents.precision import random_batch
from trackmania_rl.agents.training import Trainer, make_optimizer, set_optimizer_hyperparameters

N_ACTIONS = 12
CUDA = torch.cuda.is_available()


def _trainers(cfg, device, precision=torch.float32):
    """Two trainers with the same weights and optimizer: one eager, one for the static step."""
    layout = layout_for(cfg)
    torch.manual_seed(3)
    online, target = make_network(cfg, layout, N_ACTIONS, device), make_network(cfg, layout, N_ACTIONS, device)
    eager = Trainer(online, target, make_optimizer(online, cfg, 1e-3), cfg, device, precision=precision)
    online2, target2 = copy.deepcopy(online), copy.deepcopy(target)
    static = Trainer(online2, target2, make_optimizer(online2, cfg, 1e-3), cfg, device, precision=precision)
    return eager, static, layout


def _batch(trainer, cfg, layout, device, seed, batch_size=None):
    batch = random_batch(cfg, layout, N_ACTIONS, torch.device("cpu"), batch_size)
    g = torch.Generator().manual_seed(seed)
    batch["reward"] = torch.randn(batch["reward"].shape, generator=g)
    batch["action"] = torch.randint(0, N_ACTIONS, batch["action"].shape, generator=g)
    batch.update(trainer.draw_taus(len(batch["action"]), g))
    return {k: v.to(device) for k, v in batch.items()}


def _packed(batch: dict) -> dict:
    """The batch as the prefetch thread hands it over: its fields as views of one flat tensor, and that tensor."""
    layout = PackedLayout.of(batch)
    flat, views = layout.allocate(next(iter(batch.values())).device)
    PackedLayout.fill(views, batch)
    return {**views, PACKED: Packed(layout, flat)}


def _assert_same_weights(a: Trainer, b: Trainer, rtol=1e-4, atol=1e-5):
    for (name, pa), pb in zip(a.online.named_parameters(), b.online.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, rtol=rtol, atol=atol, msg=lambda m, name=name: f"{name}: {m}")


def test_radam_update_follows_torch_radam_through_warmup_and_rectification():
    torch.manual_seed(0)
    params = [torch.randn(5, 4), torch.randn(4)]
    mine = [p.clone().requires_grad_() for p in params]
    theirs = [p.clone().requires_grad_() for p in params]
    groups = lambda ps: [{"params": [ps[0]], "weight_decay": 0.02}, {"params": [ps[1]], "weight_decay": 0.0}]  # noqa: E731
    opt_mine = torch.optim.RAdam(groups(mine), lr=1e-2, betas=(0.9, 0.999), eps=1e-4, decoupled_weight_decay=True)
    opt_theirs = torch.optim.RAdam(groups(theirs), lr=1e-2, betas=(0.9, 0.999), eps=1e-4, decoupled_weight_decay=True)
    from trackmania_rl.agents.graphed_step import ensure_radam_state

    ensure_radam_state(opt_mine)
    lr = torch.zeros(())
    for step in range(12):  # rho_t <= 5 for the first steps (plain momentum), rectified afterwards
        value = 1e-2 * (0.8**step)  # a moving schedule: the tensor lr follows it without anything re-built
        for group in opt_theirs.param_groups:
            group["lr"] = value
        for a, b in zip(mine, theirs, strict=True):
            grad = torch.randn_like(a)
            a.grad, b.grad = grad.clone(), grad.clone()
        lr.fill_(value)
        radam_update(opt_mine, lr)
        opt_theirs.step()
        for a, b in zip(mine, theirs, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m, step=step: f"step {step}: {m}")
    assert float(opt_mine.state[mine[0]]["step"]) == float(opt_theirs.state[theirs[0]]["step"]) == 12


def _compare_steps(device, capture, cfg, precision=torch.float32, rtol=1e-4, atol=1e-5):
    eager, static, layout = _trainers(cfg, device, precision)
    set_capturable(static.optimizer, capture)
    logs = []
    static.graphed = GraphedTrainStep(static, capture=capture, log=logs.append)
    for step in range(6):
        if step == 3:  # the lr schedule moves: no re-capture
            for trainer in (eager, static):
                set_optimizer_hyperparameters(trainer.optimizer, cfg, 3e-4)
        batch = _batch(eager, cfg, layout, device, seed=step)
        do_learn = step != 4  # a hidden-test batch between learning steps
        loss_e, norm_e, per_e = eager.train_on_tensors(batch, do_learn)
        # packed batches (one copy in: the first one's layout is the step's) and, at step 2, a batch field by field
        loss_s, norm_s, per_s = static.train_on_tensors(batch if step == 2 else _packed(batch), do_learn)
        assert loss_s == pytest.approx(loss_e, rel=rtol, abs=atol)
        assert norm_s == pytest.approx(norm_e, rel=rtol, abs=atol)
        torch.testing.assert_close(per_s, per_e.float().cpu(), rtol=rtol, atol=atol)  # read back to the host
        _assert_same_weights(eager, static, rtol, atol)
    assert static.graphed.captures == 1 and not logs
    assert static.graphed.layout == _packed(batch)[PACKED].layout  # the packed batches came in as one copy
    # a new batch size is held by the step: it is built again, logged, and still matches
    batch = _batch(eager, cfg, layout, device, seed=9, batch_size=cfg.batch_size // 2)
    assert static.train_on_tensors(batch)[0] == pytest.approx(eager.train_on_tensors(batch)[0], rel=rtol, abs=atol)
    _assert_same_weights(eager, static, rtol, atol)
    assert static.graphed.captures == 2 and "batch size 32 -> 16" in logs[0]
    # a non-finite gradient skips the update on both, weights kept
    poisoned = dict(batch, reward=torch.full_like(batch["reward"], float("nan")))
    before = [p.detach().clone() for p in static.online.parameters()]
    assert not torch.isfinite(torch.tensor(static.train_on_tensors(poisoned)[1]))
    eager.train_on_tensors(poisoned)
    assert static.nonfinite_steps_skipped == eager.nonfinite_steps_skipped == 1
    for p, q in zip(static.online.parameters(), before, strict=True):
        assert torch.equal(p, q)
    batch = _batch(eager, cfg, layout, device, seed=11, batch_size=cfg.batch_size // 2)
    assert static.train_on_tensors(batch)[0] == pytest.approx(eager.train_on_tensors(batch)[0], rel=rtol, abs=atol)
    _assert_same_weights(eager, static, rtol, atol)


@pytest.mark.parametrize("use_ddqn", [False, True])
def test_the_static_step_equals_the_eager_step_on_the_cpu(use_ddqn):
    _compare_steps(torch.device("cpu"), capture=False, cfg=tiny_config(use_ddqn=use_ddqn))


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("precision", [torch.float32, torch.bfloat16])
def test_captured_cuda_graphs_equal_the_eager_step(precision):
    tolerance = {"rtol": 1e-4, "atol": 1e-5} if precision == torch.float32 else {"rtol": 2e-2, "atol": 2e-3}
    _compare_steps(torch.device("cuda"), capture=True, cfg=tiny_config(), precision=precision, **tolerance)


def test_a_hyperparameter_held_by_the_step_rebuilds_it_when_edited_live():
    cfg = tiny_config()
    eager, static, layout = _trainers(cfg, torch.device("cpu"))
    logs = []
    static.graphed = GraphedTrainStep(static, capture=False, log=logs.append)
    static.train_on_tensors(_batch(eager, cfg, layout, "cpu", 0))
    edited = tiny_config(iqn_kappa=0.5)
    static.cfg = edited
    static.train_on_tensors(_batch(eager, cfg, layout, "cpu", 1))
    assert static.graphed.captures == 2 and "kappa 1.0 -> 0.5" in logs[-1]


def test_a_batch_without_quantile_fractions_is_refused_by_the_static_step():
    cfg = tiny_config()
    _, static, layout = _trainers(cfg, torch.device("cpu"))
    static.graphed = GraphedTrainStep(static, capture=False)
    batch = random_batch(cfg, layout, N_ACTIONS, torch.device("cpu"))
    with pytest.raises(KeyError, match="taus"):
        static.train_on_tensors(batch)


def test_cuda_graph_setting_is_refused_or_chosen_by_device():
    cfg, logs = tiny_config(), []
    layout = layout_for(cfg)
    cpu = torch.device("cpu")
    with pytest.raises(ValueError, match="needs a CUDA device"):
        choose_cuda_graphs("on", cfg, layout, N_ACTIONS, cpu, torch.float32, logs.append)
    with pytest.raises(ValueError, match="must be one of"):
        choose_cuda_graphs("yes", cfg, layout, N_ACTIONS, cpu, torch.float32, logs.append)
    assert not choose_cuda_graphs("auto", cfg, layout, N_ACTIONS, cpu, torch.float32, logs.append).enabled
    assert not choose_cuda_graphs("off", cfg, layout, N_ACTIONS, cpu, torch.float32, logs.append).enabled
    assert "CUDA graphs need a CUDA device" in logs[0] and logs[1].startswith("training CUDA graphs off")


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_the_cuda_graph_probe_times_both_steps():
    cfg, logs = tiny_config(), []
    choice = choose_cuda_graphs("auto", cfg, layout_for(cfg), N_ACTIONS, torch.device("cuda"), torch.float32, logs.append)
    assert choice.eager_ms > 0 and choice.graph_ms > 0 and "eager" in logs[0] and "CUDA graph" in logs[0]
