import numpy as np
import pytest
import torch
from torch import nn

from tests.helpers import MARKER, layout_for, tiny_config
from trackmania_rl.agents.acting import make_inference_network
from trackmania_rl.agents.exploration import Inferer, midpoint_taus
from trackmania_rl.agents.iqn import IQNNetwork, load_network, make_network, save_network
from trackmania_rl.agents.training import Trainer, make_optimizer, quantile_huber_loss, set_optimizer_hyperparameters, soft_update
from trackmania_rl.device import choose_device
from trackmania_rl.replay.buffers import make_buffer
from trackmania_rl.replay.experience import fill_buffers

N_ACTIONS = 12


def random_states(cfg, layout, batch, seed=0):
    g = torch.Generator().manual_seed(seed)
    img = torch.randint(0, 256, (batch, 1, cfg.H_downsized, cfg.W_downsized), dtype=torch.uint8, generator=g)
    floats = torch.randn(batch, layout.dim, generator=g) * torch.from_numpy(layout.std) + torch.from_numpy(layout.mean)
    return img, floats


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
    weights_before = net.A_head[0].weight.detach().clone()
    bias_before = net.A_head[0].bias.detach().clone() + 1.0
    with torch.no_grad():
        net.A_head[0].bias.add_(1.0)
    mean_before = net.float_mean.clone()
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    torch.testing.assert_close(net.A_head[0].weight, weights_before * (1 - 0.1 * 0.5))  # p <- p (1 - lr x ratio)
    torch.testing.assert_close(net.A_head[0].bias, bias_before)  # biases are not decayed
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
    assert grad_norm == 0.0 and all(torch.equal(a, b) for a, b in zip(before, online.parameters()))
    assert np.count_nonzero(buffer.sampler.tree.leaves[:119] != 1.0) > 0  # priorities updated on test batches too
    loss, grad_norm = trainer.train_on_batch(buffer, do_learn=True)
    assert np.isfinite(loss) and grad_norm > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, online.parameters()))


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
        "q_values": [None] * length,
        "input_w": [True] * length,
        "race_time": length * cfg.ms_per_action,
    }


@pytest.mark.parametrize("use_ddqn", [False, True])
def test_agent_learns_the_values_of_a_chain(use_ddqn):
    torch.manual_seed(0)
    cfg = tiny_config(
        constant_reward_per_ms=0.0,
        reward_per_m_advanced_along_centerline=1.0,
        shaped_reward_dist_to_cur_vcp=0.0,
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


# ---------------------------------------------------------------------------------------------------------
# acting: inferer, JIT, weight refresh
# ---------------------------------------------------------------------------------------------------------


class ConstantQ(nn.Module):
    def __init__(self, q):
        super().__init__()
        self.q = torch.as_tensor(q, dtype=torch.float32)

    def forward(self, img, floats, n_quantiles, taus=None):
        return self.q.expand(img.shape[0], n_quantiles, -1), taus


def test_inferer_modes(cfg):
    frame, floats = np.zeros((1, 16, 16), np.uint8), np.zeros(5, np.float32)
    tied = Inferer(ConstantQ([1.0, 3.0, 3.0, 0.0]), cfg, 4, rng=np.random.default_rng(0))
    action, greedy, value, q = tied.get_exploration_action(frame, floats)
    assert (action, greedy, value) == (1, True, 3.0) and q.dtype == np.float32 and q.shape == (4,)  # lowest index on ties

    inferer = Inferer(ConstantQ([0.0, 5.0, 1.0, 2.0]), cfg, 4, rng=np.random.default_rng(0))
    inferer.set_exploration(epsilon=1.0, epsilon_boltzmann=0.0)
    draws = [inferer.get_exploration_action(frame, floats) for _ in range(2000)]
    counts = np.bincount([d[0] for d in draws], minlength=4)
    assert np.all(np.abs(counts / 2000 - 0.25) < 0.05)
    assert all(d[1] == (d[0] == 1) and d[2] == 5.0 for d in draws)

    inferer.set_exploration(epsilon=0.0, epsilon_boltzmann=1.0, tau_epsilon_boltzmann=1.5)
    boltzmann = np.bincount([inferer.get_exploration_action(frame, floats)[0] for _ in range(2000)], minlength=4)
    assert boltzmann[1] > 1500 and boltzmann[3] > 0 and boltzmann[3] > boltzmann[0]  # Q + 1.5 N(0,1): close actions sometimes

    inferer.is_explo = False  # eval: greedy whatever epsilon
    inferer.set_exploration(epsilon=1.0, epsilon_boltzmann=1.0)
    assert {inferer.get_exploration_action(frame, floats)[0] for _ in range(50)} == {1}


def test_jit_output_equals_eager(cfg, layout):
    net = make_inference_network(cfg, layout, N_ACTIONS, jit=True)
    assert isinstance(net.acting, torch.jit.ScriptModule)
    img, floats = random_states(cfg, layout, 3)
    taus = torch.rand(3, cfg.iqn_k)
    with torch.inference_mode():
        q_jit, _ = net(img, floats, cfg.iqn_k, taus)
        q_eager, _ = net.module(img, floats, cfg.iqn_k, taus)
        q_one, _ = net(img[:1], floats[:1], cfg.iqn_k, midpoint_taus(cfg.iqn_k))
    torch.testing.assert_close(q_jit, q_eager, rtol=1e-5, atol=1e-6)
    assert q_one.shape == (1, cfg.iqn_k, N_ACTIONS)


@pytest.mark.parametrize("jit", [True, False])
def test_weight_refresh_reaches_the_acting_network(cfg, layout, jit):
    shared = IQNNetwork(cfg, layout, N_ACTIONS)
    collector = make_inference_network(cfg, layout, N_ACTIONS, jit=jit)
    inferer = Inferer(collector, cfg, N_ACTIONS)
    frame, floats = np.full((1, 16, 16), 7, np.uint8), (layout.mean + layout.std).astype(np.float32)

    def shared_q():
        with torch.no_grad():
            return shared(torch.from_numpy(frame)[None], torch.from_numpy(floats)[None], cfg.iqn_k, inferer.taus)[0][0].numpy()

    assert not np.allclose(inferer.infer_network(frame, floats), shared_q())
    for step in range(2):  # the learner keeps publishing new weights: each refresh must reach the acting network
        with torch.no_grad():
            for p in shared.parameters():
                p.add_(0.05 * torch.randn_like(p))
            shared.float_mean.add_(1.0)
        collector.load_state_dict_from(shared)
        np.testing.assert_allclose(inferer.infer_network(frame, floats), shared_q(), rtol=1e-5, atol=1e-6)


def test_weight_refresh_refuses_another_network_and_follows_a_new_one(cfg, layout):
    collector = make_inference_network(cfg, layout, N_ACTIONS, jit=True)
    before = {name: tensor.clone() for name, tensor in collector.state_dict().items()}
    with pytest.raises(RuntimeError, match="shape"):  # same entries, other shapes: nothing is copied
        collector.load_state_dict_from(IQNNetwork(cfg, layout, N_ACTIONS + 1))
    for name, tensor in collector.state_dict().items():
        torch.testing.assert_close(tensor, before[name])
    other = IQNNetwork(cfg, layout, N_ACTIONS)
    other.extra = nn.Linear(2, 2)
    with pytest.raises(KeyError, match="extra"):
        collector.load_state_dict_from(other)
    for seed in range(2):  # a second shared network: the copy comes from it, not from the first
        torch.manual_seed(seed)
        shared = IQNNetwork(cfg, layout, N_ACTIONS)
        collector.load_state_dict_from(shared)
        for name, tensor in shared.state_dict().items():
            torch.testing.assert_close(collector.state_dict()[name], tensor)


ACTING_ARCHITECTURES = [
    {},  # the tiny network of learner_helpers
    dict(conv_layers=[(6, 5, 3)], dense_hidden_dimension=16, iqn_k=4),  # one convolution, odd kernel
    dict(H_downsized=24, W_downsized=20, conv_layers=[(8, 4, 2), (8, 3, 1), (4, 3, 2)], float_hidden_dim=8, iqn_k=6),
]


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("architecture", range(len(ACTING_ARCHITECTURES)))
def test_inferer_acting_program_computes_forward(jit, architecture):
    """The collectors' short acting program (normalisations folded into the first layers, fixed quantile
    embedding, joined heads, mean over quantiles before the linear last layers) gives the quantile mean
    of the plain forward at the midpoint fractions, on several architectures, before and after weight
    refreshes; the floats may come as float64."""
    cfg = tiny_config(**ACTING_ARCHITECTURES[architecture])
    layout = layout_for(cfg)
    collector = make_inference_network(cfg, layout, N_ACTIONS, jit=jit)
    inferer = Inferer(collector, cfg, N_ACTIONS)
    assert inferer._mean_q is not None
    img, floats = random_states(cfg, layout, 4, seed=architecture)
    shared = IQNNetwork(cfg, layout, N_ACTIONS)
    for refresh in range(3):
        with torch.no_grad():
            expected = shared(img, floats, cfg.iqn_k, midpoint_taus(cfg.iqn_k))[0].mean(dim=1).numpy() if refresh else None
        for i in range(4):
            with torch.inference_mode():
                q_forward = collector(img[i : i + 1], floats[i : i + 1], cfg.iqn_k, midpoint_taus(cfg.iqn_k))[0][0].mean(dim=0).numpy()
            if expected is not None:  # the refresh reached the acting program
                np.testing.assert_allclose(q_forward, expected[i], rtol=1e-5, atol=1e-6)
            for state_float in (floats[i].numpy(), floats[i].double().numpy()):
                action, was_greedy, value, q = inferer.get_exploration_action(img[i].numpy(), state_float)
                assert q.dtype == np.float32 and q.shape == (N_ACTIONS,)
                np.testing.assert_allclose(q, q_forward, rtol=1e-5, atol=1e-6)
                assert was_greedy and value == q.max() and action == int(np.argmax(q))
        with torch.no_grad():  # the learner moves on: new weights and normalisation, published to the collector
            for p in shared.parameters():
                p.add_(0.1 * torch.randn_like(p))
            shared.float_mean.add_(0.5)
            shared.float_std.mul_(1.5)
        collector.load_state_dict_from(shared)
        if refresh == 1:  # what a collector does after a refresh: the rewrite happens now, not at the next call
            inferer.prepare()
            assert inferer._mean_q._generation == collector.weights_generation


def test_acting_program_refuses_convolutions_it_cannot_fold(cfg, layout):
    collector = make_inference_network(cfg, layout, N_ACTIONS, jit=False)
    collector.module.img_head[0].padding = (1, 1)
    with pytest.raises(ValueError, match="padding"):
        Inferer(collector, cfg, N_ACTIONS)


def test_acting_program_refuses_a_frame_of_another_size(cfg, layout):
    inferer = Inferer(make_inference_network(cfg, layout, N_ACTIONS, jit=False), cfg, N_ACTIONS)
    floats = layout.mean.copy()
    inferer.get_exploration_action(np.zeros((1, cfg.H_downsized, cfg.W_downsized), np.uint8), floats)
    for shape in ((1, cfg.H_downsized + 1, cfg.W_downsized), (2, cfg.H_downsized, cfg.W_downsized)):
        with pytest.raises(ValueError, match="frame of shape"):
            inferer.get_exploration_action(np.zeros(shape, np.uint8), floats)


def test_network_save_load_round_trip(cfg, layout, tmp_path):
    net = IQNNetwork(cfg, layout, N_ACTIONS)
    with torch.no_grad():
        net.float_std.mul_(2.0)  # the normalisation travels with the weights
    assert {"float_mean", "float_std"} <= set(net.state_dict())
    save_network(net, tmp_path / "weights.pt")
    other = IQNNetwork(cfg, layout, N_ACTIONS)
    load_network(other, tmp_path / "weights.pt")
    img, floats = random_states(cfg, layout, 2)
    taus = torch.rand(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(other(img, floats, 4, taus)[0], net(img, floats, 4, taus)[0])
    torch.testing.assert_close(other.float_std, net.float_std)
    with pytest.raises(RuntimeError):
        load_network(IQNNetwork(cfg, layout, N_ACTIONS + 1), tmp_path / "weights.pt")


def test_taus_are_stratified_and_antithetic(cfg, layout):
    net = IQNNetwork(cfg, layout, N_ACTIONS)
    taus = net.sample_taus(5, 8, torch.device("cpu"))
    assert taus.shape == (5, 8) and torch.all((taus >= 0) & (taus <= 1))
    torch.testing.assert_close(taus[:, :4] + taus[:, 4:], torch.ones(5, 4))
    assert torch.all((taus[:, :4] * 8).floor() == torch.arange(4))


def test_device_choice():
    assert choose_device("cpu") == torch.device("cpu")
    assert choose_device("auto") == (torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
    with pytest.raises(ValueError):
        choose_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            choose_device("cuda:0")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_training_and_acting_on_cuda(cfg, layout):
    from tests.helpers import make_rollout

    device = choose_device("cuda")
    buffer = make_buffer(cfg, layout, 200, device=device, prioritized=True, rng=np.random.default_rng(0))
    fill_buffers(make_rollout(cfg, layout, 120, True), buffer, None, cfg, layout, 0.99, np.random.default_rng(0))
    batch = buffer.sample_batch()
    assert batch["state_img"].device.type == "cuda" and batch["weight"].device.type == "cuda"
    online, target = make_network(cfg, layout, N_ACTIONS, device), make_network(cfg, layout, N_ACTIONS, device)
    trainer = Trainer(online, target, make_optimizer(online, cfg, 1e-3), cfg, device)
    assert trainer.use_amp
    loss, grad_norm = trainer.train_on_batch(buffer, do_learn=True)
    assert np.isfinite(loss)
    collector = make_inference_network(cfg, layout, N_ACTIONS, jit=True, device=device)
    collector.load_state_dict_from(online)
    action, _, value, q = Inferer(collector, cfg, N_ACTIONS, device=device).get_exploration_action(
        np.zeros((1, cfg.H_downsized, cfg.W_downsized), np.uint8), layout.mean.copy()
    )
    assert 0 <= action < N_ACTIONS and q.shape == (N_ACTIONS,)
