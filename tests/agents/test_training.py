"""The IQN learning step (trackmania_rl/agents/training.py): loss, targets, optimizer, soft update, train
steps, and an agent that learns a small chain MDP."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from tests.helpers import MARKER, layout_for, tiny_config
from trackmania_rl.agents.exploration import Inferer
from trackmania_rl.agents.iqn import IQNNetwork, make_network
from trackmania_rl.agents.training import Trainer, make_optimizer, quantile_huber_loss, set_optimizer_hyperparameters, soft_update
from trackmania_rl.device import choose_device
from trackmania_rl.replay.buffers import make_buffer
from trackmania_rl.replay.experience import fill_buffers

N_ACTIONS = 12


# ---------------------------------------------------------------------------------------------------------
# loss and targets
# ---------------------------------------------------------------------------------------------------------


def direct_quantile_huber(online, taus, target, kappa):
    b_size, n, n_target = online.shape[0], online.shape[1], target.shape[1]
    out = []
    for b in range(b_size):
        total = 0.0
        for i in range(n):
            for j in range(n_target):
                d = float(target[b, j] - online[b, i])
                huber = 0.5 * d * d / kappa if abs(d) <= kappa else abs(d) - 0.5 * kappa
                total += abs(float(taus[b, i]) - (1.0 if d < 0 else 0.0)) * huber / n_target
        out.append(total)
    return torch.tensor(out)


@pytest.mark.parametrize("kappa", [1.0, 0.3, 5e-3])
def test_quantile_huber_loss_matches_the_formula(kappa):
    g = torch.Generator().manual_seed(1)
    online, taus, target = torch.randn(3, 4, generator=g), torch.rand(3, 4, generator=g), torch.randn(3, 5, generator=g) * 2
    torch.testing.assert_close(
        quantile_huber_loss(online, taus, target, kappa), direct_quantile_huber(online, taus, target, kappa), rtol=1e-5, atol=1e-6
    )


class FixedQ(nn.Module):
    """Returns q_state for images of 0 and q_next for images of 1, whatever the taus."""

    def __init__(self, q_state, q_next, taus):
        super().__init__()
        self.q_state, self.q_next, self.taus = q_state, q_next, taus
        self.offset = nn.Parameter(torch.zeros(()))

    def forward(self, img, floats, n_quantiles, taus=None):
        q = self.q_next if bool(img.flatten()[0] == 1) else self.q_state
        return q + self.offset, self.taus

    def training_forward(self, img, floats, n_quantiles, low_precision=None, taus=None):
        return self(img, floats, n_quantiles)


def fixed_batch():
    return {
        "state_img": torch.zeros(1, 1, 2, 2, dtype=torch.uint8),
        "next_state_img": torch.ones(1, 1, 2, 2, dtype=torch.uint8),
        "state_float": torch.zeros(1, 3),
        "next_state_float": torch.zeros(1, 3),
        "action": torch.tensor([1]),
        "reward": torch.tensor([1.0]),
        "gamma_eff": torch.tensor([0.5]),
    }


@pytest.mark.parametrize("use_ddqn", [False, True])
def test_target_picks_one_action_from_the_quantile_mean(cfg, use_ddqn):
    # target network at the next state: action 0 has quantiles (0, 10) (mean 5), action 1 has (4, 4) (mean 4)
    q_next_target = torch.tensor([[[0.0, 4.0], [10.0, 4.0]]])  # (B=1, N=2, A=2)
    q_next_online = torch.tensor([[[0.0, 9.0], [0.0, 9.0]]])  # the online network prefers action 1
    q_state = torch.tensor([[[0.0, 2.0], [0.0, 3.0]]])
    taus = torch.tensor([[0.25, 0.75]])
    online, target = FixedQ(q_state, q_next_online, taus), FixedQ(None, q_next_target, taus)
    c = cfg.replace(iqn_n=2, use_ddqn=use_ddqn, iqn_kappa=1.0)
    trainer = Trainer(online, target, torch.optim.SGD(online.parameters(), lr=0.0), c, "cpu")
    loss, per_sample = trainer.compute_loss(fixed_batch())
    # standard IQN: argmax of the mean -> action 0 -> 1 + 0.5 (0, 10); DDQN: online's action 1 -> 1 + 0.5 (4, 4)
    expected_target = torch.tensor([[3.0, 3.0]]) if use_ddqn else torch.tensor([[1.0, 6.0]])
    expected = quantile_huber_loss(torch.tensor([[2.0, 3.0]]), taus, expected_target, 1.0)
    torch.testing.assert_close(per_sample, expected)
    torch.testing.assert_close(loss, expected.mean())
    # not Linesight's per-quantile max (which would give 1 + 0.5 (4, 10))
    assert not torch.allclose(per_sample, quantile_huber_loss(torch.tensor([[2.0, 3.0]]), taus, torch.tensor([[3.0, 6.0]]), 1.0))


def test_terminal_transitions_do_not_bootstrap(cfg):
    q_next = torch.tensor([[[100.0, 100.0], [100.0, 100.0]]])
    taus = torch.tensor([[0.25, 0.75]])
    online, target = FixedQ(torch.tensor([[[0.0, 2.0], [0.0, 3.0]]]), q_next, taus), FixedQ(None, q_next, taus)
    trainer = Trainer(online, target, torch.optim.SGD(online.parameters(), lr=0.0), cfg.replace(iqn_n=2, iqn_kappa=1.0), "cpu")
    batch = fixed_batch() | {"gamma_eff": torch.tensor([0.0]), "weight": torch.tensor([0.5])}
    loss, per_sample = trainer.compute_loss(batch)
    torch.testing.assert_close(per_sample, quantile_huber_loss(torch.tensor([[2.0, 3.0]]), taus, torch.tensor([[1.0, 1.0]]), 1.0))
    torch.testing.assert_close(loss, 0.5 * per_sample.mean())  # importance-weighted mean


# ---------------------------------------------------------------------------------------------------------
# optimisation plumbing
# ---------------------------------------------------------------------------------------------------------


def test_optimizer_hyperparameters_and_decoupled_weight_decay(cfg, layout):
    net = IQNNetwork(cfg, layout, N_ACTIONS)
    opt = make_optimizer(net, cfg, lr=1e-3)
    c = cfg.replace(adam_epsilon=0.5, adam_beta1=0.5, adam_beta2=0.6, weight_decay_lr_ratio=0.5)
    set_optimizer_hyperparameters(opt, c, lr=0.1)
    for group in opt.param_groups:
        assert group["eps"] == 0.5 and group["lr"] == 0.1 and group["betas"] == (0.5, 0.6) and "epsilon" not in group
    weights_before = net.advantage_hidden_layer.weight.detach().clone()
    bias_before = net.advantage_hidden_layer.bias.detach().clone() + 1.0
    with torch.no_grad():
        net.advantage_hidden_layer.bias.add_(1.0)
    mean_before = net.float_mean.clone()
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    torch.testing.assert_close(net.advantage_hidden_layer.weight, weights_before * (1 - 0.1 * 0.5))  # p <- p (1 - lr x ratio)
    torch.testing.assert_close(net.advantage_hidden_layer.bias, bias_before)  # biases are not decayed
    torch.testing.assert_close(net.float_mean, mean_before)  # nor the layout normalisation


def test_soft_update(cfg, layout):
    online, target = IQNNetwork(cfg, layout, N_ACTIONS), IQNNetwork(cfg, layout, N_ACTIONS)
    expected = {k: 0.75 * target.state_dict()[k] + 0.25 * v for k, v in online.state_dict().items()}
    soft_update(target, online, 0.25)
    for k, v in target.state_dict().items():
        torch.testing.assert_close(v, expected[k])


def test_train_step_learns_and_updates_priorities(cfg, layout):
    from tests.helpers import make_rollout

    pcfg = cfg.replace(prio_alpha=1.0, prio_epsilon=1e-6)
    buffer = make_buffer(pcfg, layout, 200, prioritized=True, rng=np.random.default_rng(0))
    fill_buffers(make_rollout(pcfg, layout, 120, True), buffer, None, pcfg, layout, 0.99, np.random.default_rng(0))
    online = make_network(pcfg, layout, N_ACTIONS)
    target = make_network(pcfg, layout, N_ACTIONS)
    trainer = Trainer(online, target, make_optimizer(online, pcfg, 1e-3), pcfg, choose_device("cpu"))
    assert not trainer.use_amp
    before = [p.detach().clone() for p in online.parameters()]
    loss, grad_norm = trainer.train_on_batch(buffer, do_learn=False)
    assert grad_norm == 0.0 and all(torch.equal(a, b) for a, b in zip(before, online.parameters(), strict=True))
    assert np.count_nonzero(buffer.sampler.tree.leaves[:119] != 1.0) > 0  # priorities updated on test batches too
    loss, grad_norm = trainer.train_on_batch(buffer, do_learn=True)
    assert np.isfinite(loss) and grad_norm > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, online.parameters(), strict=True))


def test_a_non_finite_gradient_skips_the_step_and_keeps_the_weights(cfg, layout):
    from tests.helpers import make_rollout

    buffer = make_buffer(cfg, layout, 200, rng=np.random.default_rng(0))
    fill_buffers(make_rollout(cfg, layout, 120, True), buffer, None, cfg, layout, 0.99, np.random.default_rng(0))
    online, target = make_network(cfg, layout, N_ACTIONS), make_network(cfg, layout, N_ACTIONS)
    optimizer = make_optimizer(online, cfg, 1e-3)
    trainer = Trainer(online, target, optimizer, cfg, "cpu")
    batch = buffer.sample_batch()
    poisoned = batch | {"reward": batch["reward"].clone()}
    poisoned["reward"][0] = float("inf")  # an infinite target: the Huber loss's gradient becomes NaN
    before = [p.detach().clone() for p in online.parameters()]
    _, grad_norm, _ = trainer.train_on_tensors(poisoned, do_learn=True)
    assert not math.isfinite(grad_norm) and trainer.nonfinite_steps_skipped == 1
    assert all(torch.equal(a, b) for a, b in zip(before, online.parameters(), strict=True))
    assert not optimizer.state  # no moment was touched either
    assert all(p.grad is None for p in online.parameters())  # nothing left over for the next step
    loss, grad_norm, _ = trainer.train_on_tensors(batch, do_learn=True)
    assert math.isfinite(loss) and math.isfinite(grad_norm) and trainer.nonfinite_steps_skipped == 1
    assert all(torch.isfinite(p).all() for p in online.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, online.parameters(), strict=True))


# ---------------------------------------------------------------------------------------------------------
# the agent learns a small chain MDP
# ---------------------------------------------------------------------------------------------------------


def chain_rollout(cfg, layout, rng, length=4):
    """States 0..length-1 then the finish. Action 0 gains 1 m (reward 1), action 1 gains nothing (reward 0)."""
    actions = rng.integers(0, 2, length)
    progress = np.concatenate([[0.0], np.cumsum(actions == 0)])
    frames, floats = [], []
    for k in range(length + 1):
        frames.append(np.full((1, cfg.H_downsized, cfg.W_downsized), 40 * k, dtype=np.uint8))
        f = np.zeros(layout.dim, np.float32)
        f[layout.slice(MARKER).start] = 100.0 * k
        floats.append(f)
    return {
        "frames": frames,
        "state_float": floats,
        "meters_advanced_along_centerline": list(progress),
        "current_zone_idx": list(range(length + 1)),
        "car_gear_and_wheels": [None] * (length + 1),
        "actions": list(actions),
        "action_was_greedy": [False] * length,  # exploratory: 1-step targets
        "q_values": [np.zeros(len(cfg.inputs), np.float32)] * length,  # the rollout contract: one vector per action
        "input_w": [True] * length,
        "furthest_zone_idx": length,
        "race_time": length * cfg.ms_per_action,
    }


@pytest.mark.parametrize("use_ddqn", [False, True])
def test_agent_learns_the_values_of_a_chain(use_ddqn):
    torch.manual_seed(0)
    cfg = tiny_config(
        constant_reward_per_ms=0.0,
        reward_per_m_advanced_along_centerline=1.0,
        shaped_reward_dist_to_cur_vcp=0.0,
        reward_per_new_road_tile=0.0,
        missed_road_tile_penalty=0.0,
        use_ddqn=use_ddqn,  # default mini-race: H = 50 actions, much longer than the chain
        batch_size=64,
    )
    layout = layout_for(cfg)
    rng = np.random.default_rng(0)
    buffer = make_buffer(cfg, layout, 1000, rng=rng)
    for _ in range(60):
        fill_buffers(chain_rollout(cfg, layout, rng), buffer, None, cfg, layout, 1.0, rng)
    online, target = make_network(cfg, layout, 2), make_network(cfg, layout, 2)
    target.load_state_dict(online.state_dict())
    trainer = Trainer(online, target, make_optimizer(online, cfg, 3e-3), cfg, "cpu")
    for _ in range(500):
        trainer.train_on_batch(buffer, do_learn=True)
        trainer.soft_update_target(0.2)
    inferer = Inferer(online, cfg, 2, is_explo=False)
    rollout = chain_rollout(cfg, layout, rng)
    for k in range(4):
        q = inferer.infer_network(rollout["frames"][k], rollout["state_float"][k]).mean(axis=0)
        expected = np.array([1.0, 0.0]) + (3 - k)  # Q*(s_k, a) at clock 0: reward of a + 1 per remaining step
        np.testing.assert_allclose(q, expected, atol=0.3)
        action, was_greedy, value, _ = inferer.get_exploration_action(rollout["frames"][k], rollout["state_float"][k])
        assert action == 0 and was_greedy and value == pytest.approx(q.max(), abs=1e-5)
