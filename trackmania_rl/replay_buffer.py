"""Replay buffers: torchrl `ReplayBuffer`s over a frame-once storage, the mini-race transform, samplers (DESIGN §3.5, §5).

Layout (`TransitionStorage`, all preallocated torch tensors, FIFO):
- a ring of *states* (frame uint8 (1, H, W), floats (D,), potential), each written once, addressed by a
  global state id (slot = id % state_capacity);
- a ring of *transitions* (ids of its state and next state, action, n, rewards[N], gammas[N],
  terminal_actions).
A transition's next state is usually the state of a later transition, so one frame per transition is
stored, plus a few at the ends of train/test runs and of races. The state ring has `state_slack` more room
than the transition ring; if it fills first, the oldest transitions are evicted with their states
(FIFO order is kept either way). Sampling gathers with `index_select` (much faster than `tensor[idx]` on
uint8 frames) and the mini-race transform is vectorised over the batch.

Batches (dicts of tensors on the trainer's device) hold `state_img` / `next_state_img` uint8 (B, 1, H, W) --
images stay uint8 and the network maps them to [-1, 1) itself --, `state_float` / `next_state_float`
(B, D) float32 with the mini-race clock set, `action` int64, `reward` float32 (shaped), `gamma_eff`
float32 (0 when terminal), `terminal` bool, `mini_race_clock` int64, `n_steps` int64, `index` int64
(storage slots, for priority updates) and, from a prioritized buffer, `weight` float32 (importance weights,
max 1).

Save/load is plain data: `torch.save` of tensors and ints, read back with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import bisect
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torchrl.data import ReplayBuffer
from torchrl.data.replay_buffers.samplers import Sampler
from torchrl.data.replay_buffers.storages import Storage
from torchrl.data.replay_buffers.writers import Writer

from trackmania_rl.experience import Experience
from trackmania_rl.float_layout import MINI_RACE_CLOCK, FloatLayout
from trackmania_rl.serialization import atomic_torch_save, safe_torch_load

BUFFER_FILE_FORMAT = "trackmania_rl.transition_replay_buffer/1"
TRAIN_STATE_SLACK = 0.125  # state ring = transitions x (1 + slack) (+ a few): train runs are long (~200 steps)
TEST_STATE_SLACK = 0.5  # test runs are short (~10 steps): relatively more next-state frames at run ends


def default_state_capacity(capacity: int, n_steps: int, slack: float) -> int:
    return int(capacity + math.ceil(capacity * slack) + n_steps + 1)


# ---------------------------------------------------------------------------------------------------------
# Storage
# ---------------------------------------------------------------------------------------------------------


class TransitionStorage(Storage):
    """FIFO storage of transitions whose states (frames) are stored once. See the module docstring."""

    STATE_FIELDS = ("frames", "state_float", "potential")
    # Transitions live in one float64 table (one gather per batch instead of one per field; float64 holds the
    # integer fields exactly): these columns, then rewards[N], then gammas[N].
    COLUMNS = ("state_gid", "next_state_gid", "action", "n_steps", "terminal_actions")

    def __init__(
        self,
        capacity: int,
        frame_shape: tuple,
        float_dim: int,
        n_steps: int,
        state_capacity: int | None = None,
        state_slack: float = TRAIN_STATE_SLACK,
    ):
        super().__init__(max_size=capacity)
        self.frame_shape = tuple(int(x) for x in frame_shape)
        self.float_dim = int(float_dim)
        self.n_steps = int(n_steps)
        self.state_slack = float(state_slack)
        self._allocate(int(capacity), state_capacity or default_state_capacity(capacity, n_steps, state_slack))
        self._empty()

    # -- allocation and bookkeeping ------------------------------------------------------------------
    def _allocate(self, capacity: int, state_capacity: int) -> None:
        if capacity < 1 or state_capacity < 2:
            raise ValueError(f"replay capacity must be >= 1 (got {capacity}, state capacity {state_capacity})")
        self.max_size = capacity
        self.state_capacity = state_capacity
        self.states = {
            "frames": torch.empty((state_capacity, *self.frame_shape), dtype=torch.uint8),
            "state_float": torch.empty((state_capacity, self.float_dim), dtype=torch.float32),
            "potential": torch.empty((state_capacity,), dtype=torch.float32),
        }
        n_columns = len(self.COLUMNS) + 2 * self.n_steps
        self.table = torch.empty((capacity, n_columns), dtype=torch.float64)
        self.column = {name: k for k, name in enumerate(self.COLUMNS)}
        first = len(self.COLUMNS)
        self.rewards_columns = slice(first, first + self.n_steps)
        self.gammas_columns = slice(first + self.n_steps, first + 2 * self.n_steps)
        self._state_gid_np = self.table[:, self.column["state_gid"]].numpy()  # a view, for cheap scalar reads

    def _empty(self) -> None:
        self.head = 0  # physical slot of the oldest transition
        self.size = 0
        self.states_written = 0  # global id of the next state to write
        self.transitions_written = 0
        self.last_evicted = np.zeros(0, dtype=np.int64)  # slots freed (not overwritten) by the last append

    @property
    def capacity(self) -> int:
        return self.max_size

    def __len__(self) -> int:
        return self.size

    def nbytes(self) -> int:
        """Bytes of all preallocated tensors (states and transitions)."""
        return self.table.numel() * self.table.element_size() + sum(t.numel() * t.element_size() for t in self.states.values())

    def logical_to_physical(self, logical):
        """Slot of the k-th oldest live transition (numpy or torch integer arrays)."""
        return (self.head + logical) % self.max_size

    def physical_order(self) -> np.ndarray:
        """Slots of the live transitions, oldest first."""
        return self.logical_to_physical(np.arange(self.size, dtype=np.int64))

    def is_live(self, slots: np.ndarray) -> np.ndarray:
        return ((np.asarray(slots) - self.head) % self.max_size) < self.size

    # -- writing -------------------------------------------------------------------------------------
    def _fit(self, exp: Experience) -> Experience:
        """The newest part of `exp` that fits: <= capacity transitions and <= state_capacity states."""
        if len(exp) > self.max_size:
            exp = exp.tail(self.max_size)
        if exp.n_states > self.state_capacity:
            lo, hi = 0, len(exp)  # find the largest k whose tail fits
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if exp.tail(mid).n_states <= self.state_capacity:
                    lo = mid
                else:
                    hi = mid - 1
            exp = exp.tail(lo)
        return exp

    def append(self, exp: Experience) -> torch.Tensor:
        """Write the transitions of `exp` (oldest first, evicting the oldest stored ones); returns their slots."""
        self._check_experience(exp)
        self.last_evicted = np.zeros(0, dtype=np.int64)
        exp = self._fit(exp)
        n_new = len(exp)
        if n_new == 0:
            return torch.zeros(0, dtype=torch.int64)
        capacity, state_capacity = self.max_size, self.state_capacity
        # 1. room in the transition ring: drop the oldest (their slots are overwritten just below)
        overflow = max(0, self.size + n_new - capacity)
        self.head = (self.head + overflow) % capacity
        self.size -= overflow
        # 2. states, at global ids [first_gid, first_gid + n_states)
        first_gid = self.states_written
        state_slots = torch.from_numpy((first_gid + np.arange(exp.n_states, dtype=np.int64)) % state_capacity)
        self.states["frames"].index_copy_(0, state_slots, torch.from_numpy(np.ascontiguousarray(exp.frames)))
        self.states["state_float"].index_copy_(0, state_slots, torch.from_numpy(np.ascontiguousarray(exp.state_float, dtype=np.float32)))
        self.states["potential"].index_copy_(0, state_slots, torch.from_numpy(np.ascontiguousarray(exp.potential, dtype=np.float32)))
        self.states_written += exp.n_states
        # 3. transitions, after the newest
        slots_np = (self.head + self.size + np.arange(n_new, dtype=np.int64)) % capacity
        slots = torch.from_numpy(slots_np)
        rows = np.empty((n_new, self.table.shape[1]), dtype=np.float64)
        rows[:, self.column["state_gid"]] = first_gid + exp.state_index
        rows[:, self.column["next_state_gid"]] = first_gid + exp.next_state_index
        rows[:, self.column["action"]] = exp.action
        rows[:, self.column["n_steps"]] = exp.n_steps
        rows[:, self.column["terminal_actions"]] = exp.terminal_actions
        rows[:, self.rewards_columns] = exp.rewards
        rows[:, self.gammas_columns] = exp.gammas
        self.table.index_copy_(0, slots, torch.from_numpy(rows))
        self.size += n_new
        self.transitions_written += n_new
        # 4. the state ring may have overwritten states of the oldest transitions: evict those
        lowest_live_gid = self.states_written - state_capacity
        if lowest_live_gid > 0:
            n_dead = bisect.bisect_left(range(self.size), True, key=lambda k: bool(self._state_gid_np[(self.head + k) % capacity] >= lowest_live_gid))
            if n_dead:
                self.last_evicted = self.logical_to_physical(np.arange(n_dead, dtype=np.int64))
                self.head = (self.head + n_dead) % capacity
                self.size -= n_dead
        self._bump_mutation_revision()
        return slots

    def _check_experience(self, exp: Experience) -> None:
        if not isinstance(exp, Experience):
            raise TypeError(f"a TransitionStorage stores Experience objects, got {type(exp).__name__}")
        if exp.n_states and tuple(exp.frames.shape[1:]) != self.frame_shape:
            raise ValueError(f"frames of shape {tuple(exp.frames.shape[1:])} do not match the buffer's {self.frame_shape}")
        if exp.n_states and exp.state_float.shape[1] != self.float_dim:
            raise ValueError(f"state_float of size {exp.state_float.shape[1]} does not match the buffer's {self.float_dim}")
        if len(exp) and exp.rewards.shape[1] != self.n_steps:
            raise ValueError(f"transitions with n_steps={exp.rewards.shape[1]} do not match the buffer's {self.n_steps}")

    def set(self, cursor, data, *, set_cursor: bool = True):
        raise NotImplementedError("TransitionStorage is written through TransitionWriter / ReplayBuffer.extend(Experience)")

    # -- reading -------------------------------------------------------------------------------------
    def get(self, index) -> dict:
        """Raw fields of the transitions in slots `index` (state and next state gathered from the state ring).

        Frames and floats are gathered with torch's index_select (fast on big rows); the small per-transition
        fields come back as numpy arrays (numpy is cheaper than torch's dispatcher on a few hundred numbers).
        """
        index = torch.as_tensor(index, dtype=torch.int64).reshape(-1)
        batch = len(index)
        rows = self.table.index_select(0, index).numpy()
        c = self.column
        state_slots = np.concatenate([rows[:, c["state_gid"]], rows[:, c["next_state_gid"]]]).astype(np.int64) % self.state_capacity
        slots = torch.from_numpy(state_slots)
        frames = self.states["frames"].index_select(0, slots)
        floats = self.states["state_float"].index_select(0, slots)
        potential = self.states["potential"].numpy()[state_slots]
        out = dict(
            action=rows[:, c["action"]].astype(np.int64),
            n_steps=rows[:, c["n_steps"]].astype(np.int64),
            terminal_actions=rows[:, c["terminal_actions"]],
            rewards=rows[:, self.rewards_columns],
            gammas=rows[:, self.gammas_columns],
            state_img=frames[:batch],
            next_state_img=frames[batch:],
            state_float=floats[:batch],
            next_state_float=floats[batch:],
            state_potential=potential[:batch],
            next_state_potential=potential[batch:],
        )
        return out

    def contains(self, item) -> bool:
        return bool(np.all(self.is_live(np.asarray(item))))

    def to_experience(self) -> Experience:
        """The live content as one Experience, oldest first (for resizing and saving)."""
        if self.size == 0:
            return _empty_experience(self.frame_shape, self.float_dim, self.n_steps)
        order = torch.from_numpy(self.physical_order())
        rows = self.table.index_select(0, order).numpy()
        tr = {name: rows[:, k] for name, k in self.column.items()}
        first_gid = int(tr["state_gid"][0])
        gids = torch.arange(first_gid, self.states_written, dtype=torch.int64)
        state_slots = gids % self.state_capacity
        return Experience(
            frames=self.states["frames"].index_select(0, state_slots).numpy(),
            state_float=self.states["state_float"].index_select(0, state_slots).numpy(),
            potential=self.states["potential"].index_select(0, state_slots).numpy(),
            state_index=(tr["state_gid"] - first_gid).astype(np.int64),
            next_state_index=(tr["next_state_gid"] - first_gid).astype(np.int64),
            action=tr["action"].astype(np.int64),
            n_steps=tr["n_steps"].astype(np.int64),
            rewards=rows[:, self.rewards_columns].astype(np.float32),
            gammas=rows[:, self.gammas_columns].astype(np.float32),
            terminal_actions=tr["terminal_actions"].astype(np.float32),
        )

    def resize(self, capacity: int, state_capacity: int | None = None) -> np.ndarray:
        """Change the capacity keeping the newest transitions in FIFO order.

        Returns the old slots of the kept transitions, oldest first (they now live in slots 0..len-1).
        """
        content = self.to_experience()
        old_order = self.physical_order()
        self._allocate(int(capacity), state_capacity or default_state_capacity(capacity, self.n_steps, self.state_slack))
        written = self.transitions_written
        self._empty()
        self.append(content)
        self.transitions_written = written
        self.last_evicted = np.zeros(0, dtype=np.int64)
        return old_order[len(old_order) - self.size :]

    # -- plain-data state ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        exp = self.to_experience()
        return {
            "capacity": self.max_size,
            "state_capacity": self.state_capacity,
            "frame_shape": list(self.frame_shape),
            "float_dim": self.float_dim,
            "n_steps": self.n_steps,
            "transitions_written": self.transitions_written,
            "content": {name: torch.from_numpy(np.ascontiguousarray(getattr(exp, name))) for name in Experience.STATE_FIELDS + Experience.TRANSITION_FIELDS},
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> np.ndarray:
        """Replace the content with a saved one (keeping the newest part if it does not fit); returns the
        positions, in the saved order, of the transitions kept."""
        if tuple(state_dict["frame_shape"]) != self.frame_shape or int(state_dict["float_dim"]) != self.float_dim:
            raise ValueError(
                f"saved buffer holds frames {tuple(state_dict['frame_shape'])} and {state_dict['float_dim']} floats; "
                f"this buffer expects {self.frame_shape} and {self.float_dim}"
            )
        if int(state_dict["n_steps"]) != self.n_steps:
            raise ValueError(f"saved buffer was built with n_steps={state_dict['n_steps']}, this one with {self.n_steps}")
        content = Experience(**{name: t.numpy() for name, t in state_dict["content"].items()})
        self._empty()
        self.append(content)
        self.last_evicted = np.zeros(0, dtype=np.int64)
        self.transitions_written = int(state_dict["transitions_written"])
        return np.arange(len(content) - self.size, len(content))

    def dumps(self, path):
        atomic_torch_save(self.state_dict(), Path(path).with_suffix(".pt"))

    def loads(self, path):
        self.load_state_dict(safe_torch_load(Path(path).with_suffix(".pt")))


def _empty_experience(frame_shape, float_dim, n_steps) -> Experience:
    return Experience(
        frames=np.zeros((0, *frame_shape), np.uint8),
        state_float=np.zeros((0, float_dim), np.float32),
        potential=np.zeros(0, np.float32),
        state_index=np.zeros(0, np.int64),
        next_state_index=np.zeros(0, np.int64),
        action=np.zeros(0, np.int64),
        n_steps=np.zeros(0, np.int64),
        rewards=np.zeros((0, n_steps), np.float32),
        gammas=np.zeros((0, n_steps), np.float32),
        terminal_actions=np.zeros(0, np.float32),
    )


class TransitionWriter(Writer):
    """Appends `Experience`s to a TransitionStorage (FIFO); returns the slots written."""

    def __init__(self):
        super().__init__()
        self._write_count = 0

    def add(self, data: Experience) -> torch.Tensor:
        return self.extend(data)

    def extend(self, data: Experience) -> torch.Tensor:
        index = self._storage.append(data)
        self._write_count += len(index)
        return index

    def _empty(self, empty_write_count: bool = True) -> None:
        if empty_write_count:
            self._write_count = 0

    def state_dict(self) -> dict[str, Any]:
        return {"write_count": self._write_count}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._write_count = int(state_dict.get("write_count", 0))

    def dumps(self, path):
        atomic_torch_save(self.state_dict(), Path(path).with_suffix(".pt"))

    def loads(self, path):
        self.load_state_dict(safe_torch_load(Path(path).with_suffix(".pt")))


# ---------------------------------------------------------------------------------------------------------
# Samplers
# ---------------------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------------------
# Mini-race transform
# ---------------------------------------------------------------------------------------------------------


def draw_mini_race_clock(rng: np.random.Generator, size: int, horizon: int, long_term: int, max_term: int) -> np.ndarray:
    """t = max(0, |u| - M) with u uniform in [-(L - M), H + M): long horizons (small t) are oversampled."""
    u = rng.integers(-(long_term - max_term), horizon + max_term, size=size)
    return np.maximum(0, np.abs(u) - max_term)


class MiniRaceTransform:
    """Sampling-time transform (DESIGN §3.5), used as the buffer's collate function.

    Per sample: clock t (`draw_mini_race_clock`); m = n - max(0, t + n - H);
    terminal = m >= terminal_actions or t + n >= H; gamma_eff = gammas[m-1] (0 if terminal);
    reward = rewards[m-1] + gamma_eff Phi(s') - Phi(s); clock float of the state = t, of the next state = t + n.
    The result is moved to `device`.
    """

    def __init__(self, cfg, layout: FloatLayout, device: torch.device | str = "cpu", rng: np.random.Generator | None = None):
        self.clock_index = layout.slice(MINI_RACE_CLOCK).start
        self.device = torch.device(device)
        self.rng = rng if rng is not None else np.random.default_rng()
        self.update_config(cfg)

    def update_config(self, cfg) -> None:
        self.horizon = int(cfg.temporal_mini_race_duration_actions)
        self.long_term = int(cfg.oversample_long_term_steps)
        self.max_term = int(cfg.oversample_maximum_term_steps)

    def __call__(self, data: dict) -> dict:
        """`data`: the storage's raw fields (torch tensors or numpy arrays on the CPU). Returns torch tensors."""
        n = np.asarray(data["n_steps"]).astype(np.int64, copy=False)
        batch = len(n)
        t = draw_mini_race_clock(self.rng, batch, self.horizon, self.long_term, self.max_term)
        t_next = t + n
        m = n - np.maximum(t_next - self.horizon, 0)  # steps inside the mini-race, >= 1 since t < H
        terminal = (m >= np.asarray(data["terminal_actions"])) | (t_next >= self.horizon)
        rows = np.arange(batch)
        gamma_eff = np.where(terminal, 0.0, np.asarray(data["gammas"])[rows, m - 1])
        reward = np.asarray(data["rewards"])[rows, m - 1] + gamma_eff * np.asarray(data["next_state_potential"]) - np.asarray(data["state_potential"])
        state_float, next_state_float = torch.as_tensor(data["state_float"]), torch.as_tensor(data["next_state_float"])
        state_float.numpy()[:, self.clock_index] = t
        next_state_float.numpy()[:, self.clock_index] = t_next
        out = {
            "state_img": torch.as_tensor(data["state_img"]),
            "state_float": state_float,
            "action": torch.from_numpy(np.asarray(data["action"]).astype(np.int64, copy=False)),
            "reward": torch.from_numpy(reward.astype(np.float32)),
            "next_state_img": torch.as_tensor(data["next_state_img"]),
            "next_state_float": next_state_float,
            "gamma_eff": torch.from_numpy(gamma_eff.astype(np.float32)),
            "terminal": torch.from_numpy(terminal),
            "mini_race_clock": torch.from_numpy(t),
            "n_steps": torch.from_numpy(n),
        }
        if self.device.type != "cpu":
            out = {k: v.to(self.device, non_blocking=True) for k, v in out.items()}
        return out


# ---------------------------------------------------------------------------------------------------------
# The buffer
# ---------------------------------------------------------------------------------------------------------


class TransitionReplayBuffer(ReplayBuffer):
    """A torchrl ReplayBuffer of `Experience` transitions with the mini-race transform.

    `extend(experience)` appends; `sample_batch()` returns the batch dict of the module docstring;
    `update_priority(index, priority)` (prioritized sampler only); `resize(capacity)` keeps content and FIFO
    order; `update_config(cfg)` pushes hot-reloadable settings (mini-race oversampling, prio alpha/beta/eps).
    """

    def __init__(self, *, storage: TransitionStorage, sampler: Sampler, transform: MiniRaceTransform, batch_size: int):
        super().__init__(storage=storage, sampler=sampler, writer=TransitionWriter(), collate_fn=transform, batch_size=batch_size)
        self.mini_race_transform = transform

    @property
    def capacity(self) -> int:
        return self.storage.capacity

    @property
    def prioritized(self) -> bool:
        return isinstance(self.sampler, PrioritizedSampler)

    def sample_batch(self, batch_size: int | None = None) -> dict:
        data, info = self.sample(batch_size, return_info=True)
        data["index"] = info["index"]
        if "_weight" in info:
            data["weight"] = info["_weight"].to(self.mini_race_transform.device)
        return data

    def resize(self, capacity: int) -> None:
        with self._replay_lock:
            if int(capacity) == self.storage.capacity:
                return
            kept = self.storage.resize(int(capacity))
            self.sampler.resize(int(capacity), kept)

    def update_config(self, cfg) -> None:
        self.mini_race_transform.update_config(cfg)
        self.sampler.update_config(cfg)

    def nbytes(self) -> int:
        """Replay memory held: storage tensors plus the sampler's tree."""
        tree = getattr(self.sampler, "tree", None)
        return self.storage.nbytes() + (tree.tree.nbytes if tree is not None else 0)

    def state_dict(self) -> dict[str, Any]:
        return {"format": BUFFER_FILE_FORMAT, "storage": self.storage.state_dict(), "sampler": self.sampler.state_dict(), "writer": self._writer.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("format") != BUFFER_FILE_FORMAT:
            raise ValueError(f"not a saved transition replay buffer (format {state_dict.get('format')!r})")
        with self._replay_lock:
            kept = self.storage.load_state_dict(state_dict["storage"])
            saved_sampler = state_dict["sampler"]
            if isinstance(self.sampler, PrioritizedSampler) and "leaves" in saved_sampler:
                self.sampler.load_state_dict(saved_sampler, kept)
            else:  # saved without priorities (or loaded into a uniform buffer): fresh priorities
                self.sampler._empty()
                self.sampler.extend(torch.arange(len(self.storage)))
            self._writer.load_state_dict(state_dict.get("writer", {}))

    def dumps(self, path) -> None:
        """torchrl's directory API, in this buffer's single-file format: `path`/buffer.pt."""
        save_buffer(self, Path(path) / "buffer.pt")

    def loads(self, path) -> None:
        load_buffer(self, Path(path) / "buffer.pt")


def save_buffer(buffer: TransitionReplayBuffer, path: str | Path) -> None:
    """Write the buffer's content (and priorities) to one file, atomically (temp file + rename)."""
    atomic_torch_save(buffer.state_dict(), path)


def load_buffer(buffer: TransitionReplayBuffer, path: str | Path) -> None:
    """Replace the buffer's content with a saved one (plain tensors, read with weights_only=True).

    The saved buffer may have another capacity: the newest transitions that fit are kept, in FIFO order.
    """
    buffer.load_state_dict(safe_torch_load(path))


def make_buffer(
    cfg,
    layout: FloatLayout,
    capacity: int,
    *,
    device: torch.device | str = "cpu",
    prioritized: bool | None = None,
    batch_size: int | None = None,
    rng: np.random.Generator | None = None,
    state_slack: float = TRAIN_STATE_SLACK,
) -> TransitionReplayBuffer:
    """One buffer. `prioritized` defaults to cfg.prio_alpha > 0; `rng` drives sampling and mini-race clocks."""
    rng = rng if rng is not None else np.random.default_rng()
    storage = TransitionStorage(capacity, (1, cfg.H_downsized, cfg.W_downsized), layout.dim, cfg.n_steps, state_slack=state_slack)
    if prioritized is None:
        prioritized = cfg.prio_alpha > 0
    sampler_rng, transform_rng = rng.spawn(2)
    if prioritized:
        sampler = PrioritizedSampler(storage, cfg.prio_alpha, cfg.prio_beta, cfg.prio_epsilon, rng=sampler_rng)
    else:
        sampler = UniformSampler(rng=sampler_rng)
    transform = MiniRaceTransform(cfg, layout, device=device, rng=transform_rng)
    return TransitionReplayBuffer(storage=storage, sampler=sampler, transform=transform, batch_size=batch_size or cfg.batch_size)


def capacity_of_test_buffer(cfg, capacity: int) -> int:
    return max(1, int(capacity * cfg.buffer_test_ratio))


def make_buffers(
    cfg,
    layout: FloatLayout,
    capacity: int,
    *,
    device: torch.device | str = "cpu",
    prioritized: bool | None = None,
    batch_size: int | None = None,
    rng: np.random.Generator | None = None,
) -> tuple[TransitionReplayBuffer, TransitionReplayBuffer]:
    """(buffer, buffer_test): the test buffer holds capacity x buffer_test_ratio transitions."""
    rng = rng if rng is not None else np.random.default_rng()
    train_rng, test_rng = rng.spawn(2)
    buffer = make_buffer(cfg, layout, capacity, device=device, prioritized=prioritized, batch_size=batch_size, rng=train_rng)
    buffer_test = make_buffer(
        cfg, layout, capacity_of_test_buffer(cfg, capacity), device=device, prioritized=prioritized, batch_size=batch_size, rng=test_rng, state_slack=TEST_STATE_SLACK
    )
    return buffer, buffer_test


def resize_buffers(buffer: TransitionReplayBuffer, buffer_test: TransitionReplayBuffer, cfg, capacity: int) -> None:
    """Follow memory_size_schedule: new capacities, content and FIFO order kept (the newest part when shrinking)."""
    buffer.resize(capacity)
    buffer_test.resize(capacity_of_test_buffer(cfg, capacity))
