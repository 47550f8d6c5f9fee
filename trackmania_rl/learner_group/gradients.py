"""The gradients of every rank, averaged in each train step (Trainer.gradient_exchange, agents/training.py).

The exchange happens between backward and clipping: every rank then holds the same gradient, so the clip, the
non-finite skip and the optimizer step come out the same everywhere, and the weights stay equal (a learner group's
digests check it). The mean of N ranks' batch means is the gradient of the mean loss over the N x batch_size
transitions: a step of the group is one step on an effective batch of N x batch_size.
A parameter without a gradient has none on every rank (same network, same loss): it is left as it is.

Two ways, the setting `learners_gradient_exchange`:
- `AfterBackwardExchange` ("after_backward"): every gradient copied into one flat buffer once backward has finished,
  one all_reduce, copied back.
- `OverlappedExchange` ("overlap"): the gradients in buckets of about BUCKET_BYTES, in the order backward produces
  them (the last layers first); a bucket's all_reduce starts as soon as its last gradient is accumulated (a
  post-accumulate-grad hook), so the exchange runs while backward goes on, as torch's DistributedDataParallel does.
  The buckets are started in the same order on every rank (bucket k only after bucket k - 1) whatever order the
  hooks fire in, so the collectives always match. The hooks act only between `start()` and `finish()`: any other
  backward through the network (a probe, a test) exchanges nothing.
Both time what the train step waits for the exchange (`seconds`): the overlapped one only its wait after backward.
"""

from __future__ import annotations

import time

import torch

from trackmania_rl.learner_group.rendezvous import wait

BUCKET_BYTES = 512 * 1024  # a few buckets for these networks (1.7-4 MB of gradients): the first starts early in backward
EXCHANGES = ("overlap", "after_backward")


class _Bucket:
    def __init__(self, parameters: list, device):
        self.parameters = parameters
        self.flat = torch.zeros(sum(p.numel() for p in parameters), dtype=torch.float32, device=device)
        self.views = {}
        offset = 0
        for p in parameters:
            self.views[p] = self.flat[offset : offset + p.numel()]
            offset += p.numel()
        self.filled: set = set()
        self.work = None

    def average_into_grads(self, ranks: int) -> None:
        """The ranks' summed gradients divided by their number, copied back into each parameter that has a gradient."""
        self.flat.div_(ranks)
        for p in self.parameters:
            if p.grad is not None:
                p.grad.copy_(self.views[p].view_as(p.grad))


class AfterBackwardExchange:
    def __init__(self, pg, ranks: int, parameters):
        self.pg = pg
        self.ranks = ranks
        parameters = list(parameters)
        self.bucket = _Bucket(parameters, parameters[0].device)  # every gradient in one all_reduce
        self.flat = self.bucket.flat
        self.exchanges = 0
        self.seconds = 0.0  # the train step's wait for the exchange (the figure learners.allreduce_ms)

    def start(self) -> None:
        return None

    def close(self) -> None:
        return None

    def finish(self) -> None:
        bucket = self.bucket
        for p in bucket.parameters:
            if p.grad is not None:
                bucket.views[p].copy_(p.grad.reshape(-1))
        begin = time.perf_counter()
        wait(self.pg.allreduce([bucket.flat]), "the gradient all_reduce")
        self.seconds += time.perf_counter() - begin
        self.exchanges += 1
        bucket.average_into_grads(self.ranks)


class OverlappedExchange:
    def __init__(self, pg, ranks: int, parameters, bucket_bytes: int = BUCKET_BYTES):
        self.pg = pg
        self.ranks = ranks
        self.parameters = [p for p in parameters if p.requires_grad]
        self.buckets: list[_Bucket] = []
        current, size = [], 0
        for p in reversed(self.parameters):  # backward reaches the last layers first
            current.append(p)
            size += 4 * p.numel()
            if size >= bucket_bytes:
                self.buckets.append(_Bucket(current, p.device))
                current, size = [], 0
        if current:
            self.buckets.append(_Bucket(current, current[0].device))
        self.bucket_of = {p: bucket for bucket in self.buckets for p in bucket.parameters}
        self.handles = [p.register_post_accumulate_grad_hook(self._on_gradient) for p in self.parameters]
        self.armed = False
        self.next_bucket = 0  # the next bucket to start: in index order on every rank
        self.exchanges = 0
        self.seconds = 0.0
        self.started_during_backward = 0  # buckets whose all_reduce began before backward had finished, summed over steps

    def start(self) -> None:
        for bucket in self.buckets:
            bucket.filled.clear()
            bucket.work = None
        self.next_bucket = 0
        self.armed = True

    def _on_gradient(self, p) -> None:
        if not self.armed:
            return
        bucket = self.bucket_of[p]
        bucket.views[p].copy_(p.grad.reshape(-1))
        bucket.filled.add(p)
        self._start_ready_buckets()

    def _start_ready_buckets(self) -> None:
        while self.next_bucket < len(self.buckets):
            bucket = self.buckets[self.next_bucket]
            if len(bucket.filled) < len(bucket.parameters):
                return
            bucket.work = self.pg.allreduce([bucket.flat])
            self.next_bucket += 1

    def finish(self) -> None:
        self.armed = False
        self.started_during_backward += self.next_bucket
        begin = time.perf_counter()
        for bucket in self.buckets[self.next_bucket :]:  # a parameter without a gradient: zeros, on every rank alike
            for p in bucket.parameters:
                if p not in bucket.filled:
                    bucket.views[p].zero_()
                    bucket.filled.add(p)
        self._start_ready_buckets()
        for bucket in self.buckets:
            wait(bucket.work, "the gradient all_reduce")
        self.seconds += time.perf_counter() - begin
        self.exchanges += 1
        for bucket in self.buckets:
            bucket.average_into_grads(self.ranks)

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


def make_gradient_exchange(kind: str, pg, ranks: int, parameters, bucket_bytes: int = BUCKET_BYTES):
    """The exchange of setting `learners_gradient_exchange` (module docstring)."""
    if kind == "overlap":
        return OverlappedExchange(pg, ranks, parameters, bucket_bytes)
    if kind == "after_backward":
        return AfterBackwardExchange(pg, ranks, parameters)
    raise ValueError(f"learners_gradient_exchange must be one of {EXCHANGES}, not {kind!r}")
