import torch
import torch.multiprocessing as tmp_mp

from trackmania_rl.rollouts.local.shared_network import SharedNetwork


def _child_reads(shared, result_queue):
    target = torch.nn.Linear(3, 2)
    version = shared.fetch_into(lambda net: target.load_state_dict(net.state_dict()), 0)
    result_queue.put((version, target.weight.detach().numpy().copy()))  # numpy: no fd passing


def test_publication_reaches_another_process():
    ctx = tmp_mp.get_context("spawn")
    shared = SharedNetwork(torch.nn.Linear(3, 2), ctx)
    assert shared.version == 0
    online = torch.nn.Linear(3, 2)
    with torch.no_grad():
        online.weight.fill_(0.5)
    shared.publish(1, online.state_dict())
    assert shared.version == 1
    results = ctx.Queue()
    child = ctx.Process(target=_child_reads, args=(shared, results))
    child.start()
    version, weight = results.get(timeout=60)
    child.join(10)
    assert version == 1
    assert (weight == 0.5).all() and weight.shape == (2, 3)


def test_fetch_skips_when_version_is_known():
    ctx = tmp_mp.get_context("spawn")
    shared = SharedNetwork(torch.nn.Linear(3, 2), ctx)
    shared.publish(1, torch.nn.Linear(3, 2).state_dict())
    calls = []
    assert shared.fetch_into(calls.append, 1) == 1
    assert calls == []
    assert shared.fetch_into(calls.append, 0) == 1
    assert len(calls) == 1
