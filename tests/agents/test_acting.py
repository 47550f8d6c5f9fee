"""The collectors' inference network (trackmania_rl/agents/acting.py): TorchScript, weight refresh, and
the short acting program against the plain forward."""

import numpy as np
import pytest
import torch
from torch import nn

from tests.helpers import layout_for, tiny_config
from trackmania_rl.agents.acting import make_inference_network
from trackmania_rl.agents.exploration import Inferer, midpoint_taus
from trackmania_rl.agents.iqn import IQNNetwork

N_ACTIONS = 12


def test_jit_output_equals_eager(cfg, layout, random_states):
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
    for _ in range(2):  # the learner keeps publishing new weights: each refresh must reach the acting network
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
    # IMPALA's residual encoder: its features through torch, the rest of the program folded as for the others
    dict(network_encoder="impala", H_downsized=20, W_downsized=24, conv_layers=[(4, 1, 1), (6, 1, 1)], iqn_k=4),
    # stacked frames as channels (a game that gives only pixels: games/gymnasium), both encoders
    dict(frame_stack=4, H_downsized=21, W_downsized=18, conv_layers=[(8, 4, 2), (6, 3, 2)], iqn_k=4),
    dict(frame_stack=3, network_encoder="impala", H_downsized=12, W_downsized=10, conv_layers=[(4, 1, 1)], iqn_k=4),
]


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("architecture", range(len(ACTING_ARCHITECTURES)))
def test_inferer_acting_program_computes_forward(jit, architecture, random_states):
    """The collectors' short acting program (normalisations folded into the first layers, fixed quantile
    embedding, joined heads, mean over quantiles before the linear last layers) gives the quantile mean
    of the plain forward at the midpoint fractions, on several architectures, before and after weight
    refreshes; the floats may come as float64."""
    cfg = tiny_config(**ACTING_ARCHITECTURES[architecture])
    # a residual encoder's padded convolutions round differently by batch size (oneDNN's blocking): float32 rounding
    tolerance = dict(rtol=1e-4, atol=1e-4) if cfg.network_encoder == "impala" else dict(rtol=1e-5, atol=1e-6)
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
                np.testing.assert_allclose(q_forward, expected[i], **tolerance)
            for state_float in (floats[i].numpy(), floats[i].double().numpy()):
                action, was_greedy, value, q = inferer.get_exploration_action(img[i].numpy(), state_float)
                assert q.dtype == np.float32 and q.shape == (N_ACTIONS,)
                np.testing.assert_allclose(q, q_forward, **tolerance)
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
    collector.module.convolutions[0].padding = (1, 1)
    with pytest.raises(ValueError, match="padding"):
        Inferer(collector, cfg, N_ACTIONS)


def test_acting_program_refuses_a_frame_of_another_size(cfg, layout):
    inferer = Inferer(make_inference_network(cfg, layout, N_ACTIONS, jit=False), cfg, N_ACTIONS)
    floats = layout.mean.copy()
    inferer.get_exploration_action(np.zeros((1, cfg.H_downsized, cfg.W_downsized), np.uint8), floats)
    for shape in ((1, cfg.H_downsized + 1, cfg.W_downsized), (2, cfg.H_downsized, cfg.W_downsized)):
        with pytest.raises(ValueError, match="frame of shape"):
            inferer.get_exploration_action(np.zeros(shape, np.uint8), floats)
