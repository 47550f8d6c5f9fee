"""Samplers of transition slots: uniform, and prioritized (proportional, with importance weights) over a sum tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torchrl.data.replay_buffers.samplers import Sampler

from trackmania_rl.replay.storage import TransitionStorage
from trackmania_rl.serialization import atomic_torch_save, safe_torch_load


class UniformSampler(Sampler):
    """Uniform sampling with replacement over the live transitions."""

    def __init__(self, rng: np.random.Generator | None = None):
        self.rng = rng if rng is not None else np.random.default_rng()

    def sample(self, storage: TransitionStorage, batch_size: int):
        if len(storage) == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        logical = self.rng.integers(0, len(storage), size=batch_size)
        return torch.from_numpy(storage.logical_to_physical(logical)), {}

    def resize(self, capacity: int, kept_old_slots: np.ndarray) -> None:
        return

    def update_config(self, cfg) -> None:
        return

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any], kept: np.ndarray | None = None) -> None:
        return

    def _empty(self):
        return

    def dumps(self, path):
        return

    def loads(self, path):
        return


class SumTree:
    """Binary sum tree over `capacity` non-negative leaves (numpy float64, vectorised updates and search)."""

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        self.n_leaves = 1 << max(0, (self.capacity - 1).bit_length())
        self.depth = self.n_leaves.bit_length() - 1
        self.tree = np.zeros(2 * self.n_leaves, dtype=np.float64)  # node 1 = root; leaves at [n_leaves, 2 n_leaves)

    @property
    def total(self) -> float:
        return float(self.tree[1])

    @property
    def leaves(self) -> np.ndarray:
        return self.tree[self.n_leaves : self.n_leaves + self.capacity]

    def set(self, index: np.ndarray, values: np.ndarray) -> None:
        position = np.asarray(index, dtype=np.int64) + self.n_leaves
        self.tree[position] = values
        for _ in range(self.depth):
            position = position // 2
            self.tree[position] = self.tree[2 * position] + self.tree[2 * position + 1]

    def rebuild(self) -> None:
        for level in range(self.depth - 1, -1, -1):
            nodes = np.arange(1 << level, 2 << level)
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]

    def find(self, mass: np.ndarray) -> np.ndarray:
        """For each value in [0, total), the leaf whose cumulative interval holds it."""
        mass = np.array(mass, dtype=np.float64)
        position = np.ones(len(mass), dtype=np.int64)
        for _ in range(self.depth):
            left = 2 * position
            left_mass = self.tree[left]
            go_right = mass >= left_mass
            mass = np.where(go_right, mass - left_mass, mass)
            position = np.where(go_right, left + 1, left)
        return position - self.n_leaves


class PrioritizedSampler(Sampler):
    """Proportional prioritized replay (Schaul et al. 2016) on a numpy sum tree.

    Leaf = (|priority| + eps)^alpha; new transitions get the largest leaf seen so far. A batch is drawn
    stratified: the total mass is cut into `batch_size` equal strata and one point is drawn in each, so a
    transition holding the whole mass of a stratum is picked exactly once for it. Importance weights
    w_i = (N P(i))^-beta are divided by the batch maximum. (torchrl's own PrioritizedSampler relies on a
    compiled extension that does not load with torch 2.13.0+cpu.)
    """

    def __init__(self, storage: TransitionStorage, alpha: float, beta: float, eps: float, rng: np.random.Generator | None = None):
        self.storage = storage
        self.alpha, self.beta, self.eps = float(alpha), float(beta), float(eps)
        self.rng = rng if rng is not None else np.random.default_rng()
        self.tree = SumTree(storage.capacity)
        self.max_leaf = 1.0

    def update_config(self, cfg) -> None:
        self.alpha, self.beta, self.eps = float(cfg.prio_alpha), float(cfg.prio_beta), float(cfg.prio_epsilon)

    @property
    def default_priority(self) -> float:
        return self.max_leaf

    def extend(self, index: torch.Tensor) -> None:
        index = np.asarray(index, dtype=np.int64)
        if len(index):
            self.tree.set(index, np.full(len(index), self.max_leaf))
        evicted = self.storage.last_evicted
        if len(evicted):
            self.tree.set(evicted, np.zeros(len(evicted)))

    def add(self, index) -> None:
        self.extend(torch.as_tensor(index).reshape(-1))

    def update_priority(self, index, priority, *, storage=None) -> None:
        index = np.asarray(torch.as_tensor(index).detach().cpu(), dtype=np.int64).reshape(-1)
        priority = np.asarray(torch.as_tensor(priority).detach().cpu().double(), dtype=np.float64).reshape(-1)
        if priority.size == 1 and index.size > 1:
            priority = np.full(index.size, priority.item())
        live = self.storage.is_live(index)
        index, priority = index[live], priority[live]
        if not len(index):
            return
        leaf = (np.abs(priority) + self.eps) ** self.alpha
        leaf = np.where(np.isfinite(leaf), leaf, self.max_leaf)
        self.tree.set(index, leaf)
        self.max_leaf = max(self.max_leaf, float(leaf.max()))

    def sample(self, storage: TransitionStorage, batch_size: int):
        total = self.tree.total
        if len(storage) == 0 or total <= 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        mass = (np.arange(batch_size) + self.rng.random(batch_size)) * (total / batch_size)
        mass = np.minimum(mass, np.nextafter(total, 0.0))
        index = self.tree.find(mass)
        leaf = self.tree.leaves[np.minimum(index, self.tree.capacity - 1)]
        bad = (leaf <= 0) | (index >= self.tree.capacity)
        if bad.any():  # rounding at a stratum edge: redraw those proportionally the slow, exact way
            cumulative = np.cumsum(self.tree.leaves)
            index[bad] = np.searchsorted(cumulative, self.rng.random(int(bad.sum())) * cumulative[-1], side="right")
            leaf = self.tree.leaves[index]
        probability = leaf / total
        weight = (len(storage) * probability) ** (-self.beta)
        weight = weight / weight.max()
        return torch.from_numpy(index), {"_weight": torch.from_numpy(weight.astype(np.float32))}

    def resize(self, capacity: int, kept_old_slots: np.ndarray) -> None:
        """Follow a storage resize: the kept transitions moved to slots 0..len-1 in FIFO order."""
        leaves = self.tree.leaves[np.asarray(kept_old_slots, dtype=np.int64)].copy()
        self.tree = SumTree(capacity)
        self.tree.leaves[: len(leaves)] = leaves
        self.tree.rebuild()

    def state_dict(self) -> dict[str, Any]:
        order = self.storage.physical_order()
        return {
            "leaves": torch.from_numpy(self.tree.leaves[order].copy()),
            "max_leaf": self.max_leaf,
            "alpha": self.alpha,
            "beta": self.beta,
            "eps": self.eps,
        }

    def load_state_dict(self, state_dict: dict[str, Any], kept: np.ndarray | None = None) -> None:
        """Leaves saved oldest first; `kept` = which of them the storage kept (it loads into slots 0..len-1)."""
        leaves = state_dict["leaves"].numpy()
        if kept is not None:
            leaves = leaves[kept]
        self.tree = SumTree(self.storage.capacity)
        self.tree.leaves[: len(leaves)] = leaves
        self.tree.rebuild()
        self.max_leaf = float(state_dict["max_leaf"])

    def _empty(self):
        self.tree = SumTree(self.storage.capacity)
        self.max_leaf = 1.0

    def dumps(self, path):
        atomic_torch_save(self.state_dict(), Path(path).with_suffix(".pt"))

    def loads(self, path):
        self.load_state_dict(safe_torch_load(Path(path).with_suffix(".pt")))
