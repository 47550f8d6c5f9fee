"""Steps launched before their results are read (agents/step_results.py) and the update a non-finite gradient skips on
the device (graphed_step.radam_update's `apply`): the same values, weights and optimizer state as steps read at once."""

import copy

import pytest
import torch

from tests.agents.test_graphed_step import CUDA, _assert_same_weights, _batch, _packed, _trainers
from tests.helpers import tiny_config
from trackmania_rl.agents.graphed_step import GraphedTrainStep, ensure_radam_state, radam_update, set_capturable
from trackmania_rl.agents.step_results import ResultSlots, StepsInFlight


def _optimizer_and_params(seed: int):
    torch.manual_seed(seed)
    params = [torch.randn(5, 4).requires_grad_(), torch.randn(4).requires_grad_()]
    groups = [{"params": [params[0]], "weight_decay": 0.02}, {"params": [params[1]], "weight_decay": 0.0}]
    optimizer = torch.optim.RAdam(groups, lr=1e-2, betas=(0.9, 0.999), eps=1e-4, decoupled_weight_decay=True)
    ensure_radam_state(optimizer)
    return optimizer, params


def _state(optimizer, params) -> list[torch.Tensor]:
    tensors = [p.detach().clone() for p in params]
    for p in params:
        tensors += [optimizer.state[p][k].clone() for k in ("step", "exp_avg", "exp_avg_sq")]
    return tensors


def test_an_update_not_applied_changes_nothing_whatever_the_gradients_hold():
    optimizer, params = _optimizer_and_params(0)
    lr = torch.tensor(1e-2)
    for step in range(8):  # through RAdam's warm-up into the rectified steps, each applied or not
        grads = [torch.randn_like(p) for p in params]
        if step in (2, 6):  # a diverged gradient, not applied: nothing moves, no NaN reaches the moments
            grads[0][0, 0] = float("nan")
            grads[1][1] = float("inf")
        before = _state(optimizer, params)
        twin_optimizer, twin_params = copy.deepcopy((optimizer, params))
        for p, g, q in zip(params, grads, twin_params, strict=True):
            p.grad, q.grad = g.clone(), g.clone()
        applied = step not in (2, 6)
        radam_update(optimizer, lr, apply=torch.tensor(applied))
        after = _state(optimizer, params)
        if applied:  # as the update without the flag
            radam_update(twin_optimizer, lr)
            for a, b in zip(after, _state(twin_optimizer, twin_params), strict=True):
                torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
            assert not all(torch.equal(a, b) for a, b in zip(after, before, strict=True))
        else:
            assert all(torch.equal(a, b) for a, b in zip(after, before, strict=True)), f"step {step} moved the state"
    assert float(optimizer.state[params[0]]["step"]) == 6


def _launched_against_read_at_once(device: torch.device, capture: bool, read_late: bool):
    """Steps of a static trainer launched ahead (read one step late, or all at the end) against an eager twin's."""
    cfg = tiny_config()
    eager, static, layout = _trainers(cfg, device)
    set_capturable(static.optimizer, capture)
    static.graphed = GraphedTrainStep(static, capture=capture)
    in_flight = StepsInFlight(depth=1 if read_late else 10)
    expected, read = [], []
    for step in range(9):  # more steps than a ring has slots: unread results are settled before a slot is reused
        batch = _batch(eager, cfg, layout, device, seed=step)
        do_learn = step != 5
        if step == 7:
            batch["reward"] = torch.full_like(batch["reward"], float("nan"))  # skipped on the device, counted when read
        expected.append(eager.train_on_tensors(batch, do_learn))
        read += in_flight.add(static.launch_on_tensors(_packed(batch), do_learn), step)
        assert len(in_flight) <= (1 if read_late else 10)
    read += in_flight.drain()
    assert [step for step, _ in read] == list(range(9)) and len(in_flight) == 0
    for step, ((loss, norm, per_sample), (_, (loss_s, norm_s, per_sample_s))) in enumerate(zip(expected, read, strict=True)):
        assert loss_s == pytest.approx(loss, rel=1e-4, abs=1e-5, nan_ok=True), step
        assert norm_s == pytest.approx(norm, rel=1e-4, abs=1e-5, nan_ok=True), step
        torch.testing.assert_close(per_sample_s, per_sample.float().cpu(), rtol=1e-4, atol=1e-5, equal_nan=True)
    assert static.nonfinite_steps_skipped == eager.nonfinite_steps_skipped == 1
    _assert_same_weights(eager, static)


@pytest.mark.parametrize("read_late", [True, False])
def test_steps_launched_ahead_give_each_its_own_results_on_the_cpu(read_late):
    _launched_against_read_at_once(torch.device("cpu"), capture=False, read_late=read_late)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("read_late", [True, False])
def test_captured_steps_launched_ahead_give_each_its_own_results(read_late):
    _launched_against_read_at_once(torch.device("cuda"), capture=True, read_late=read_late)


def test_a_result_slot_is_reused_only_after_its_result_was_read():
    slots = ResultSlots()
    results = [slots.result_of(torch.tensor([float(i), 2.0 * i, 10.0 + i]), True, None) for i in range(ResultSlots.SLOTS + 2)]
    for i, result in enumerate(results):
        loss, norm, per_sample = result.read()
        assert (loss, norm, per_sample.tolist()) == (float(i), 2.0 * i, [10.0 + i])


def test_steps_in_flight_refuses_a_negative_depth():
    with pytest.raises(ValueError, match="steps left in flight"):
        StepsInFlight(depth=-1)
