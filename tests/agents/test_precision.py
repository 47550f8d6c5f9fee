"""Mixed precision for the learning step: bfloat16 where it is kept, float32 where the resolution matters, and the
start-up probe that chooses (trackmania_rl/agents/precision.py, IQNNetwork.training_forward)."""

import os
import signal
import threading
import time

import pytest
import torch

from trackmania_rl.agents import precision
from trackmania_rl.agents.iqn import make_network
from trackmania_rl.agents.precision import choose_precision, random_batch
from trackmania_rl.agents.training import Trainer, make_optimizer

N_ACTIONS = 12


def test_float32_training_forward_is_forward(cfg, layout, random_states):
    network = make_network(cfg, layout, N_ACTIONS)
    img, floats = random_states(cfg, layout, 5)
    torch.manual_seed(3)
    q, taus = network(img, floats, 8)
    torch.manual_seed(3)
    q_training, taus_training = network.training_forward(img, floats, 8, torch.float32)
    torch.testing.assert_close(taus_training, taus)
    torch.testing.assert_close(q_training, q)
    # at given fractions (the benchmark's bfloat16 acting path): the same fractions for every state of the batch
    fixed = torch.linspace(0.1, 0.9, 8).unsqueeze(0)
    q_fixed, taus_fixed = network.training_forward(img, floats, 8, torch.float32, taus=fixed)
    assert taus_fixed.shape == (5, 8) and torch.equal(taus_fixed[3], fixed[0])
    torch.testing.assert_close(q_fixed, network(img, floats, 8, fixed)[0])


def test_the_learning_step_on_the_cpu_runs_the_convolutions_channels_last_with_the_same_values(cfg, layout, random_states):
    network = make_network(cfg, layout, N_ACTIONS)
    img, floats = random_states(cfg, layout, 10)
    layouts = []
    for convolution in network.convolutions:
        convolution.register_forward_hook(lambda module, inputs, output: layouts.append(output.is_contiguous()))
    torch.manual_seed(5)
    network.training_forward(img, floats, 8, torch.float32)
    assert layouts == [False] * len(network.convolutions)  # channels-last strides, not NCHW
    layouts.clear()
    torch.manual_seed(5)
    q, _ = network(img, floats, 8)
    assert layouts == [True] * len(network.convolutions)  # the collectors' and evaluation's forward: as it was
    # frames that are a strided view (every other state of a batch) get the same values as their compact copy
    every_other = img[::2], floats[::2]
    assert not every_other[0].is_contiguous()
    torch.manual_seed(6)
    q_view, _ = network.training_forward(*every_other, 8, torch.float32)
    torch.manual_seed(6)
    q_compact, _ = network(every_other[0].contiguous(), every_other[1].contiguous(), 8)
    torch.testing.assert_close(q_view, q_compact)


def test_bfloat16_keeps_the_cosines_output_layers_and_combine_in_float32(cfg, layout, random_states):
    network = make_network(cfg, layout, N_ACTIONS)
    img, floats = random_states(cfg, layout, 16)
    seen = {}

    def record(name):
        def hook(module, inputs, output):
            seen[name] = (inputs[0].dtype, output.dtype)

        return hook

    for name in ("advantage_output_layer", "value_output_layer", "advantage_hidden_layer", "iqn_fc"):
        getattr(network, name).register_forward_hook(record(name))
    network.img_head[0].register_forward_hook(record("first_convolution"))
    torch.manual_seed(4)
    q, taus = network.training_forward(img, floats, 8, torch.bfloat16)
    assert seen["first_convolution"][1] == torch.bfloat16 and seen["advantage_hidden_layer"][1] == torch.bfloat16
    assert seen["iqn_fc"][0] == torch.float32  # the cosines themselves are float32
    assert seen["advantage_output_layer"] == (torch.float32, torch.float32)
    assert seen["value_output_layer"] == (torch.float32, torch.float32)
    assert q.dtype == torch.float32 and taus.dtype == torch.float32
    torch.manual_seed(4)
    q_float32, _ = network.training_forward(img, floats, 8, torch.float32)
    assert not torch.equal(q, q_float32)  # bfloat16 did run somewhere
    torch.testing.assert_close(q, q_float32, rtol=0.05, atol=0.05)


def test_a_bfloat16_train_step_learns_and_keeps_float32_weights(cfg, layout):
    online, target = make_network(cfg, layout, N_ACTIONS), make_network(cfg, layout, N_ACTIONS)
    target.load_state_dict(online.state_dict())
    trainer = Trainer(online, target, make_optimizer(online, cfg, 1e-3), cfg, "cpu", precision=torch.bfloat16)
    batch = random_batch(cfg, layout, N_ACTIONS, torch.device("cpu"), batch_size=32)
    losses = [trainer.train_on_tensors(batch)[0] for _ in range(30)]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-5:]) < sum(losses[:5])  # a fixed batch is fitted
    assert all(p.dtype == torch.float32 for p in online.parameters())
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in online.parameters())


@pytest.mark.parametrize("setting, dtype", [("float32", torch.float32), ("bfloat16", torch.bfloat16)])
def test_an_explicit_setting_is_used_without_a_probe(cfg, layout, monkeypatch, setting, dtype):
    monkeypatch.setattr(precision, "time_train_steps", lambda *a: pytest.fail("no probe for an explicit setting"))
    logged = []
    choice = choose_precision(setting, cfg, layout, N_ACTIONS, torch.device("cpu"), logged.append)
    assert choice.dtype == dtype and logged == [f"training precision {setting}: training_precision = {setting!r}"]


def test_auto_times_both_without_touching_the_random_state(cfg, layout):
    """The real probe: both step times measured, logged with the choice, the run's random state left as it was
    (which dtype it picks is this machine's business: the decision is tested on fixed times below)."""
    torch.manual_seed(11)
    expected_next = torch.rand(3)
    torch.manual_seed(11)
    logged = []
    choice = choose_precision("auto", cfg, layout, N_ACTIONS, torch.device("cpu"), logged.append)
    assert torch.equal(torch.rand(3), expected_next)  # the run's seeded sampling goes on as if no probe had run
    assert choice.float32_ms > 0 and choice.bfloat16_ms > 0
    assert logged == [f"training precision {choice.name}: {choice.reason}"]
    assert f"float32 {choice.float32_ms:.1f} ms, bfloat16 {choice.bfloat16_ms:.1f} ms" in logged[0]


@pytest.mark.parametrize(
    "float32_ms, bfloat16_ms, dtype, verdict",
    [
        (200.0, 100.0, torch.bfloat16, "(2.00x): bfloat16 is faster"),
        (110.0, 100.0, torch.bfloat16, "(1.10x): bfloat16 is faster"),  # exactly MIN_SPEEDUP: bfloat16
        (109.9, 100.0, torch.float32, "(1.10x): bfloat16 is not 1.1x faster"),  # just below it
        (100.0, 100.0, torch.float32, "(1.00x): bfloat16 is not 1.1x faster"),
        (100.0, 400.0, torch.float32, "(0.25x): bfloat16 is not 1.1x faster"),
    ],
)
def test_auto_keeps_bfloat16_only_at_min_speedup_or_more(float32_ms, bfloat16_ms, dtype, verdict):
    assert precision.MIN_SPEEDUP == 1.1
    choice = precision.choice_from_probe(float32_ms, bfloat16_ms, "probe X")
    assert choice.dtype == dtype and (choice.float32_ms, choice.bfloat16_ms) == (float32_ms, bfloat16_ms)
    assert choice.reason == f"auto, probe X: float32 {float32_ms:.1f} ms, bfloat16 {bfloat16_ms:.1f} ms {verdict}"


@pytest.mark.parametrize("medians, dtype", [((150.0, 60.0), torch.bfloat16), ((150.0, 140.0), torch.float32)])
def test_auto_decides_on_the_probes_times(cfg, layout, monkeypatch, medians, dtype):
    """choose_precision("auto") takes its decision from the probe's medians (given here), both ways."""
    asked = []

    def probe(cfg_, layout_, n_actions, device, dtypes):
        asked.append(dtypes)
        return dict(zip(dtypes, medians, strict=True))

    monkeypatch.setattr(precision, "time_train_steps", probe)
    logged = []
    choice = choose_precision("auto", cfg, layout, N_ACTIONS, torch.device("cpu"), logged.append)
    assert asked == [(torch.float32, torch.bfloat16)]
    assert choice.dtype == dtype and (choice.float32_ms, choice.bfloat16_ms) == medians
    assert logged == [f"training precision {choice.name}: {choice.reason}"] and f"at batch {cfg.batch_size} on cpu" in logged[0]


def test_a_signal_while_the_probe_runs_is_taken_once_its_thread_has_ended():
    """Ctrl-C (or SIGTERM) during the precision probe: the KeyboardInterrupt comes only after the probe's thread has
    ended. Raised inside Python 3.11's join(), it left the thread running unjoined, and the trainer exiting under it
    aborted ("terminate called without an active exception")."""
    ended = []

    def work():
        os.kill(os.getpid(), signal.SIGINT)  # while the calling thread waits for this one
        time.sleep(0.3)
        ended.append(threading.current_thread().name)
        return "done"

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            precision.on_threads(1, work)
            time.sleep(5)  # the pending signal is taken as soon as the calling thread runs Python again
        assert ended == ["on-threads"]
        assert precision.on_threads(1, lambda: "a later call works as before") == "a later call works as before"
    finally:
        signal.signal(signal.SIGINT, previous)
