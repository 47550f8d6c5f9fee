"""Named tensors of mixed dtypes as views of one flat byte tensor, so that moving them between host and GPU is one copy.

Why: on a GPU the learner's step is short (a captured graph, ~1.5-2.5 ms) and every torch call the training thread
makes hands the interpreter lock back and waits to take it again, behind the batch-prefetch thread and the main
thread's ingest. A batch of ~11 tensors moved field by field costs ~11 such calls per copy; packed, one.
- `PackedLayout.of(tensors)`: where each field lives in the flat tensor (16-byte aligned offsets);
- `PackedLayout.allocate(device, pin_memory)` -> (flat, views), `views(flat)`, `fill(views, tensors)`;
- `HostCopy(tensors)`: a GPU state dict into pinned host memory in one copy, without waiting for it (`wait()` gives
  the tensors): the weights the training thread leaves for the main thread to publish.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ALIGN_BYTES = 16  # every field starts at a multiple: any dtype's view of the byte tensor is then aligned
PACKED = "packed"  # the key of a batch's `Packed` (its fields are also in the batch, as views of it)


@dataclass(frozen=True)
class Field:
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int  # in bytes

    @property
    def nbytes(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count * self.dtype.itemsize


@dataclass(frozen=True)
class PackedLayout:
    fields: tuple[Field, ...]
    nbytes: int

    @classmethod
    def of(cls, tensors: dict[str, torch.Tensor]) -> PackedLayout:
        fields, offset = [], 0
        for name, tensor in tensors.items():
            field = Field(name, tensor.dtype, tuple(tensor.shape), offset)
            fields.append(field)
            offset += -(-field.nbytes // ALIGN_BYTES) * ALIGN_BYTES
        return cls(tuple(fields), offset)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """The fields as tensors sharing `flat`'s memory (a uint8 tensor of `nbytes`)."""
        if flat.dtype != torch.uint8 or flat.numel() != self.nbytes:
            raise ValueError(f"a packed batch needs a uint8 tensor of {self.nbytes} bytes, got {flat.dtype} of {flat.numel()}")
        return {f.name: flat[f.offset : f.offset + f.nbytes].view(f.dtype).view(f.shape) for f in self.fields}

    def allocate(self, device: torch.device | str, pin_memory: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        flat = torch.empty(max(1, self.nbytes), dtype=torch.uint8, device=device, pin_memory=pin_memory)[: self.nbytes]
        return flat, self.views(flat)

    @staticmethod
    def fill(views: dict[str, torch.Tensor], tensors: dict[str, torch.Tensor]) -> None:
        """Copy each named tensor into its view, in one call for all of them."""
        torch._foreach_copy_(list(views.values()), [tensors[name] for name in views])


@dataclass
class Packed:
    """A batch's fields packed on a device: `flat` and its `layout` (the batch also holds the fields as views)."""

    layout: PackedLayout
    flat: torch.Tensor


class HostCopy:
    """Tensors on their way to host memory; `wait()` returns them as host tensors once the copy has landed."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        tensors = {k: v.detach() for k, v in tensors.items()}
        first = next(iter(tensors.values()), None)
        self.event = None
        if first is None or not first.is_cuda:  # already on the host: a plain copy
            self.tensors = {k: v.to("cpu", copy=True) for k, v in tensors.items()}
            return
        layout = PackedLayout.of(tensors)
        device_flat, device_views = layout.allocate(first.device)
        layout.fill(device_views, tensors)
        host_flat, self.tensors = layout.allocate("cpu", pin_memory=True)
        host_flat.copy_(device_flat, non_blocking=True)
        self.event = torch.cuda.Event()
        self.event.record()

    def wait(self) -> dict[str, torch.Tensor]:
        if self.event is not None:
            self.event.synchronize()
            self.event = None
        return self.tensors
