"""The learner's training batches: sampled from the replay buffers (a hidden-test batch now and then), on the train
step's device (DESIGN §2: a GPU learner prepares the next batch while the current one trains).

- `BatchFeed` samples when asked, in the training thread: the CPU learner's case, where a sampling thread would
  take a core the train step uses.
- `PrefetchingBatchFeed` (CUDA): a thread samples the next batches, packs the step's fields into one pinned host
  buffer (agents/packed_tensors.py: a ring of them, reused once their copy has landed) and copies it to the GPU in
  one non_blocking copy on a stream of its own, `PREFETCH_DEPTH` ahead; the train step waits only for the copy's
  event, and a graphed step takes the whole batch into its inputs in one copy (`batch[PACKED]`). The batches also
  carry the step's quantile fractions, drawn on the CPU (`Trainer.draw_taus`): the GPU step then holds no random
  draw and can be a CUDA graph (agents/graphed_step.py).
A prefetched batch was sampled up to PREFETCH_DEPTH steps before it trains: with prioritized replay its
priorities are that many updates old (the stored transitions themselves are copied, whatever happens to them).
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from trackmania_rl.agents.packed_tensors import PACKED, Packed, PackedLayout
from trackmania_rl.agents.training import TAU_KEYS

# what the train step reads; the rest of a sampled batch (mini-race clock, n-steps, terminal) stays on the host
STEP_KEYS = ("state_img", "state_float", "action", "reward", "next_state_img", "next_state_float", "gamma_eff", "weight")
PREFETCH_DEPTH = 2
HOST_SLOTS = PREFETCH_DEPTH + 2  # pinned buffers per batch layout: the oldest one's copy has long landed when reused
MAX_LAYOUTS = 4  # batch layouts whose pinned buffers are kept (training and hidden-test batches, a batch-size edit)


@dataclass
class PinnedSlot:
    """A pinned host buffer a batch is packed into before its copy to the GPU, and the event of that copy."""

    flat: torch.Tensor
    views: dict
    copied: torch.cuda.Event | None = None


class BatchFeed:
    """`next() -> (is_test, batch)`: a batch from the hidden-test buffer with probability buffer_test_ratio (when it
    holds transitions), else from the training buffer; `batch["index"]` and `batch["state_gid"]` (which transitions,
    for priority updates) stay on the CPU. `settings()` gives the live config (buffer_test_ratio is read at each draw).
    `test_draws` (default `rng`) decides which batches are test ones: one draw per batch, whatever the test buffer
    holds, so that generators seeded alike (a learner group's ranks) pick the same batches."""

    def __init__(
        self,
        buffer,
        buffer_test,
        trainer,
        device: torch.device,
        rng: np.random.Generator,
        settings: Callable,
        test_draws: np.random.Generator | None = None,
    ):
        self.buffer, self.buffer_test = buffer, buffer_test
        self.trainer = trainer
        self.device = torch.device(device)
        self.rng = rng
        self.test_draws = rng if test_draws is None else test_draws
        self.settings = settings
        self.with_taus = self.device.type == "cuda"
        self.taus_generator = torch.Generator().manual_seed(int(rng.integers(2**62))) if self.with_taus else None

    def _sample_on_host(self) -> tuple[bool, dict]:
        draw = self.test_draws.random()
        is_test = len(self.buffer_test) > 0 and draw < self.settings().buffer_test_ratio
        batch = (self.buffer_test if is_test else self.buffer).sample_batch()
        if self.with_taus:
            batch.update(self.trainer.draw_taus(len(batch["action"]), self.taus_generator))
        return is_test, batch

    def next(self) -> tuple[bool, dict]:
        is_test, batch = self._sample_on_host()
        if self.device.type != "cpu":
            batch = {k: (v.to(self.device) if k in STEP_KEYS + TAU_KEYS else v) for k, v in batch.items()}
        return is_test, batch

    def close(self) -> None:
        return None


class PrefetchingBatchFeed(BatchFeed):
    """BatchFeed on CUDA with the next batches prepared by a thread (module docstring). It starts sampling once the
    training buffer holds transitions; `close` stops the thread. An error in the thread comes out of `next`."""

    def __init__(self, buffer, buffer_test, trainer, device: torch.device, rng: np.random.Generator, settings: Callable, test_draws=None):
        super().__init__(buffer, buffer_test, trainer, device, rng, settings, test_draws)
        self._ready: queue.Queue = queue.Queue(maxsize=PREFETCH_DEPTH)
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="batch-prefetch", daemon=True)
        self._thread.start()

    @staticmethod
    def _host_slot(layout: PackedLayout, rings: dict) -> PinnedSlot:
        """The next pinned host buffer of this layout, once the copy that last read it has landed."""
        ring = rings.get(layout)
        if ring is None:
            if len(rings) >= MAX_LAYOUTS:  # live batch-size edits: the oldest ring goes (torch frees it once copied)
                rings.pop(next(iter(rings)))
            ring = rings[layout] = deque(PinnedSlot(*layout.allocate("cpu", pin_memory=True)) for _ in range(HOST_SLOTS))
        ring.rotate(-1)
        slot = ring[-1]
        if slot.copied is not None:
            slot.copied.synchronize()
        return slot

    def _run(self) -> None:
        torch.set_num_threads(1)  # index_select of one batch: the train step's thread needs the cores more
        stream = torch.cuda.Stream(self.device)
        rings: dict = {}  # PackedLayout -> its pinned host buffers (a new batch size or set of fields: a new ring)
        try:
            while not self._stop.is_set():
                if len(self.buffer) == 0:
                    self._stop.wait(0.01)
                    continue
                is_test, host = self._sample_on_host()
                fields = {k: v for k, v in host.items() if k in STEP_KEYS + TAU_KEYS}
                layout = PackedLayout.of(fields)
                slot = self._host_slot(layout, rings)
                PackedLayout.fill(slot.views, fields)
                with torch.cuda.stream(stream):
                    flat = torch.empty(layout.nbytes, dtype=torch.uint8, device=self.device)
                    flat.copy_(slot.flat, non_blocking=True)
                    copied = torch.cuda.Event()
                    copied.record(stream)
                slot.copied = copied
                batch = layout.views(flat)
                batch[PACKED] = Packed(layout, flat)
                batch.update({k: v for k, v in host.items() if k not in fields})  # index, state_gid...: host side
                while not self._stop.is_set():
                    try:
                        self._ready.put((is_test, batch, copied), timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as e:  # noqa: BLE001 - handed to the training thread, which stops the run with it
            self.error = e

    def next(self) -> tuple[bool, dict]:
        while True:
            if self.error is not None:
                raise RuntimeError(f"the batch prefetch thread failed: {type(self.error).__name__}: {self.error}") from self.error
            try:
                is_test, batch, copied = self._ready.get(timeout=0.1)
                break
            except queue.Empty:
                continue
        current = torch.cuda.current_stream(self.device)
        current.wait_event(copied)
        batch[PACKED].flat.record_stream(current)  # made on the prefetch stream, freed after use on this one (the views too)
        return is_test, batch

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def make_batch_feed(
    buffer, buffer_test, trainer, device: torch.device, rng: np.random.Generator, settings: Callable, test_draws=None
) -> BatchFeed:
    """The prefetching feed on CUDA, the synchronous one elsewhere."""
    feed = PrefetchingBatchFeed if torch.device(device).type == "cuda" else BatchFeed
    return feed(buffer, buffer_test, trainer, device, rng, settings, test_draws)
