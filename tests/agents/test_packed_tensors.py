"""Named tensors packed into one flat byte tensor (agents/packed_tensors.py): what the prefetch thread copies to the GPU
in one go and the graphed step takes in with one copy."""

import pytest
import torch

from trackmania_rl.agents.packed_tensors import ALIGN_BYTES, HostCopy, PackedLayout


def _fields():
    g = torch.Generator().manual_seed(0)
    return {
        "state_img": torch.randint(0, 256, (3, 5, 7), dtype=torch.uint8, generator=g),  # 105 bytes: the next is padded
        "state_float": torch.randn(3, 4, generator=g),
        "action": torch.randint(0, 12, (3,), generator=g),  # int64
        "gamma": torch.tensor(0.99, dtype=torch.float64),  # 0-dim
        "flags": torch.tensor([True, False, True]),
    }


def test_every_field_comes_back_from_the_flat_tensor_with_its_dtype_shape_and_values():
    fields = _fields()
    layout = PackedLayout.of(fields)
    flat, views = layout.allocate("cpu")
    PackedLayout.fill(views, fields)
    assert layout.names == tuple(fields)
    assert all(f.offset % ALIGN_BYTES == 0 for f in layout.fields)
    again = layout.views(flat.clone())  # read back from a copy of the bytes alone
    for name, tensor in fields.items():
        assert again[name].dtype == tensor.dtype and again[name].shape == tensor.shape
        assert torch.equal(again[name], tensor), name
    assert layout.nbytes == flat.numel() >= sum(t.numel() * t.element_size() for t in fields.values())


def test_layouts_compare_equal_only_for_the_same_fields_shapes_and_dtypes():
    fields = _fields()
    assert PackedLayout.of(fields) == PackedLayout.of({k: v.clone() for k, v in fields.items()})
    assert PackedLayout.of(fields) != PackedLayout.of({**fields, "action": fields["action"].int()})
    assert PackedLayout.of(fields) != PackedLayout.of({**fields, "state_float": torch.zeros(4, 4)})


def test_a_flat_tensor_of_the_wrong_size_or_dtype_is_refused():
    layout = PackedLayout.of(_fields())
    with pytest.raises(ValueError, match=f"{layout.nbytes} bytes"):
        layout.views(torch.zeros(layout.nbytes - 1, dtype=torch.uint8))
    with pytest.raises(ValueError, match="uint8"):
        layout.views(torch.zeros(layout.nbytes, dtype=torch.int8))


def test_a_host_copy_of_cpu_weights_is_a_copy_not_the_weights():
    weights = {"w": torch.randn(4, 3), "b": torch.zeros(3)}
    copied = HostCopy(weights).wait()
    weights["w"].add_(1.0)
    assert not torch.equal(copied["w"], weights["w"]) and torch.equal(copied["b"], weights["b"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_host_copy_of_gpu_weights_lands_whole_and_is_not_changed_by_later_steps():
    weights = {"w": torch.randn(64, 33, device="cuda"), "count": torch.tensor(7, device="cuda"), "b": torch.randn(5, device="cuda").half()}
    expected = {k: v.cpu() for k, v in weights.items()}
    pending = HostCopy(weights)
    weights["w"].mul_(0)  # a later step, queued after the copy
    copied = pending.wait()
    for name, tensor in expected.items():
        assert copied[name].device.type == "cpu" and torch.equal(copied[name], tensor), name
