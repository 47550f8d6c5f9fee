"""The gradients of every rank, averaged: one all_reduce per train step (Trainer.gradient_exchange, agents/training.py).

Every parameter's gradient is copied into one flat buffer, summed over the ranks by a single all_reduce and divided
by their number, then copied back. It runs after backward and before clipping: every rank then holds the same
gradient, so the clip, the non-finite skip and the optimizer step come out the same everywhere, and the weights stay
equal (a learner group's digests check it). The mean of N ranks' batch means is the gradient of the mean loss over
the N x batch_size transitions: a step of the group is one step on an effective batch of N x batch_size.
A parameter without a gradient has none on every rank (same network, same loss): it is left as it is.
"""

from __future__ import annotations

import time

import torch

from trackmania_rl.learner_group.rendezvous import wait


class GradientExchange:
    def __init__(self, pg, ranks: int, parameters):
        self.pg = pg
        self.ranks = ranks
        self.parameters = list(parameters)
        self.flat = torch.zeros(sum(p.numel() for p in self.parameters), dtype=torch.float32, device=self.parameters[0].device)
        self.exchanges = 0
        self.seconds = 0.0  # spent in the all_reduce itself (the figure learners.allreduce_ms)

    def __call__(self, parameters=None) -> None:
        views, offset = [], 0
        for p in self.parameters:
            view = self.flat[offset : offset + p.numel()]
            offset += p.numel()
            if p.grad is not None:
                view.copy_(p.grad.reshape(-1))
                views.append((p, view))
        start = time.perf_counter()
        wait(self.pg.allreduce([self.flat]), "the gradient all_reduce")
        self.seconds += time.perf_counter() - start
        self.exchanges += 1
        self.flat.div_(self.ranks)
        for p, view in views:
            p.grad.copy_(view.view_as(p.grad))
