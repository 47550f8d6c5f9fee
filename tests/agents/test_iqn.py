"""The IQN network (trackmania_rl/agents/iqn.py): save and load, quantile fractions, device choice."""

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from trackmania_rl.agents.acting import make_inference_network
from trackmania_rl.agents.exploration import Inferer
from trackmania_rl.agents.iqn import (
    IQNNetwork,
    NotAStateDict,
    StateDictMismatch,
    WeightsFileUnreadable,
    load_network,
    load_state_dict_into,
    make_network,
    read_state_dict,
    save_network,
)
from trackmania_rl.agents.training import Trainer, make_optimizer
from trackmania_rl.device import choose_device
from trackmania_rl.replay.buffers import make_buffer
from trackmania_rl.replay.experience import fill_buffers

N_ACTIONS = 12


def test_network_save_load_round_trip(cfg, layout, tmp_path, random_states):
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
    trainer = Trainer(online, target, make_optimizer(online, cfg, 1e-3), cfg, device, precision=torch.bfloat16)
    assert trainer.use_amp
    loss, grad_norm = trainer.train_on_batch(buffer, do_learn=True)
    assert np.isfinite(loss)
    collector = make_inference_network(cfg, layout, N_ACTIONS, jit=True, device=device)
    collector.load_state_dict_from(online)
    action, _, value, q = Inferer(collector, cfg, N_ACTIONS, device=device).get_exploration_action(
        np.zeros((1, cfg.H_downsized, cfg.W_downsized), np.uint8), layout.mean.copy()
    )
    assert 0 <= action < N_ACTIONS and q.shape == (N_ACTIONS,)


# ---------------------------------------------------------------------------------------------------------
# layers by name, and the one loader of weights
# ---------------------------------------------------------------------------------------------------------


def test_named_layers_are_the_sequential_layers_whose_positions_make_the_state_dict_keys(cfg, layout):
    net = IQNNetwork(cfg, layout, N_ACTIONS)
    assert net.convolutions == (net.img_head[0], net.img_head[2]) and all(isinstance(c, nn.Conv2d) for c in net.convolutions)
    assert net.float_input_layer is net.float_feature_extractor[0] and net.float_output_layer is net.float_feature_extractor[2]
    assert net.advantage_hidden_layer is net.A_head[0] and net.advantage_output_layer is net.A_head[2]
    assert net.value_hidden_layer is net.V_head[0] and net.value_output_layer is net.V_head[2]
    assert net.advantage_output_layer.out_features == N_ACTIONS and net.value_output_layer.out_features == 1
    # the keys of every saved model (models/carracing_default/weights.torch among them)
    layers = {"img_head": (0, 2), "float_feature_extractor": (0, 2), "iqn_fc": None, "A_head": (0, 2), "V_head": (0, 2)}
    expected = []
    for name, positions in layers.items():
        prefixes = [name] if positions is None else [f"{name}.{i}" for i in positions]
        expected += [f"{prefix}.{kind}" for prefix in prefixes for kind in ("weight", "bias")]
    assert list(net.state_dict()) == ["float_mean", "float_std"] + expected
    scripted = torch.jit.script(net)  # the properties stay out of TorchScript
    assert [k for k in scripted.state_dict() if k != "cos_frequencies"] == list(net.state_dict())  # + the non-persistent buffer


def test_load_state_dict_into_checks_entries_and_shapes_before_loading(cfg, layout):
    net = IQNNetwork(cfg, layout, N_ACTIONS)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    other = IQNNetwork(cfg, layout, N_ACTIONS + 1).state_dict()
    other["extra.weight"] = torch.zeros(1)
    del other["V_head.0.bias"]
    with pytest.raises(StateDictMismatch) as error:
        load_state_dict_into(net, other, "checkpoint X")
    message = str(error.value)
    assert isinstance(error.value, RuntimeError) and message.startswith("checkpoint X does not match the network (")
    assert "missing entries: V_head.0.bias" in message and "unexpected entries: extra.weight" in message
    assert f"A_head.2.weight ({N_ACTIONS + 1}, 16) vs ({N_ACTIONS}, 16)" in message
    assert error.value.missing == ["V_head.0.bias"] and error.value.unexpected == ["extra.weight"]
    assert len(error.value.shape_mismatches) == 2  # A_head.2 weight and bias
    for k, v in net.state_dict().items():  # nothing was loaded
        assert torch.equal(v, before[k])
    # more than MAX_LISTED_ENTRIES of a kind: the first ones, and how many more
    with pytest.raises(StateDictMismatch, match=r"missing entries: (\S+, ){3}\S+ and 14 more"):
        load_state_dict_into(net, {"float_mean": net.float_mean, "float_std": net.float_std})


def test_load_state_dict_into_loads_and_strips_the_compile_prefix(cfg, layout):
    source, net = IQNNetwork(cfg, layout, N_ACTIONS), IQNNetwork(cfg, layout, N_ACTIONS)
    load_state_dict_into(net, {f"_orig_mod.{k}": v for k, v in source.state_dict().items()})
    for k, v in source.state_dict().items():
        assert torch.equal(net.state_dict()[k], v)
    for bad in ([torch.zeros(1)], {"a": 1}, {1: torch.zeros(1)}):
        with pytest.raises(NotAStateDict, match="state_dict is not a state_dict"):
            load_state_dict_into(net, bad)


def test_load_network_refuses_files_that_are_not_state_dicts(cfg, layout, tmp_path):
    net = IQNNetwork(cfg, layout, N_ACTIONS)
    with pytest.raises(FileNotFoundError):
        load_network(net, tmp_path / "missing.torch")
    (tmp_path / "garbage.torch").write_bytes(b"not a torch file")
    (tmp_path / "empty.torch").write_bytes(b"")
    torch.save({"w": torch.zeros(1), "optimizer": Path("x")}, tmp_path / "object.torch")  # an object weights_only refuses
    for name in ("garbage.torch", "empty.torch", "object.torch"):
        with pytest.raises(WeightsFileUnreadable, match="weights_only=True failed") as error:
            load_network(net, tmp_path / name)
        assert str(tmp_path / name) in str(error.value) and error.value.reason
    assert "empty or truncated" in str(pytest.raises(WeightsFileUnreadable, load_network, net, tmp_path / "empty.torch").value)
    torch.save([torch.zeros(1)], tmp_path / "list.torch")
    with pytest.raises(NotAStateDict, match="list.torch is not a state_dict"):
        load_network(net, tmp_path / "list.torch")
    save_network(net, tmp_path / "weights.torch")
    state_dict = read_state_dict(tmp_path / "weights.torch")
    assert list(state_dict) == list(net.state_dict()) and all(torch.equal(v, net.state_dict()[k]) for k, v in state_dict.items())


def test_the_impala_encoder_is_a_residual_stack_that_scripts_saves_and_trains(layout, tmp_path, random_states):
    """network_encoder = "impala": a stage per conv_layers entry (its channels), each halving the frame, two residual
    blocks a stage that start as the identity; the network scripts, saves and loads, and a Linesight network's weights
    do not fit it."""
    from tests.helpers import make_rollout, tiny_config
    from trackmania_rl.agents.iqn import ImpalaEncoder, ResidualBlock

    cfg = tiny_config(network_encoder="impala", conv_layers=[(4, 1, 1), (6, 1, 1)], H_downsized=20, W_downsized=24)
    net = IQNNetwork(cfg, layout, N_ACTIONS)
    assert isinstance(net.img_head, ImpalaEncoder) and net.encoder == "impala"
    assert net.conv_head_output_dim == 6 * 5 * 6  # 20 x 24 -> 10 x 12 -> 5 x 6, 6 channels
    blocks = [m for m in net.modules() if isinstance(m, ResidualBlock)]
    assert len(blocks) == 4 and all(torch.count_nonzero(b.conv1.weight) == 0 for b in blocks)
    x = torch.randn(2, 4, 10, 12)
    torch.testing.assert_close(blocks[0](x), x)  # identity at the start
    img, floats = random_states(cfg, layout, 3)
    taus = torch.rand(3, 4)
    scripted = torch.jit.script(net)
    with torch.no_grad():
        torch.testing.assert_close(scripted(img, floats, 4, taus)[0], net(img, floats, 4, taus)[0])
    save_network(net, tmp_path / "impala.pt")
    other = IQNNetwork(cfg, layout, N_ACTIONS)
    load_network(other, tmp_path / "impala.pt")
    with torch.no_grad():
        torch.testing.assert_close(other(img, floats, 4, taus)[0], net(img, floats, 4, taus)[0])
    with pytest.raises(StateDictMismatch):
        load_network(
            IQNNetwork(cfg.replace(network_encoder="linesight", conv_layers=[(4, 3, 2)]), layout, N_ACTIONS), tmp_path / "impala.pt"
        )
    # a learning step moves the residual branches off the identity
    trainer = Trainer(net, IQNNetwork(cfg, layout, N_ACTIONS), make_optimizer(net, cfg, 1e-3), cfg, torch.device("cpu"))
    buffer = make_buffer(cfg, layout, 200, batch_size=16, rng=np.random.default_rng(0))
    fill_buffers(make_rollout(cfg, layout, 120, True), buffer, None, cfg, layout, 0.99, np.random.default_rng(1))
    trainer.train_on_batch(buffer)
    assert any(torch.count_nonzero(b.conv1.weight) > 0 for b in blocks)
