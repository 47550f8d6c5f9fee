"""Transition storage for torchrl: each state stored once in a ring, transitions pointing at their state and next state."""

from __future__ import annotations

import bisect
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torchrl.data.replay_buffers.storages import Storage
from torchrl.data.replay_buffers.writers import Writer

from trackmania_rl.replay.experience import Experience
from trackmania_rl.serialization import atomic_torch_save, safe_torch_load

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

    def still_holds(self, slots, state_gids) -> np.ndarray:
        """Per slot: True while it holds the transition it held when sampled (its state's global id unchanged; a
        slot rewritten or evicted since then no longer does)."""
        slots = np.asarray(slots, dtype=np.int64)
        return self.is_live(slots) & (self._state_gid_np[slots] == np.asarray(state_gids, dtype=np.int64))

    def replay_age(self, slots) -> np.ndarray:
        """For transitions at these slots: how many states were stored after each one's own state (its age in
        the buffer, about the transitions stored since)."""
        return self.states_written - self._state_gid_np[np.asarray(slots, dtype=np.int64)]

    def append(self, exp: Experience) -> torch.Tensor:
        """Write the transitions of `exp` (oldest first, evicting the oldest stored ones); returns their slots."""
        self._check_experience(exp)
        self.last_evicted = np.zeros(0, dtype=np.int64)
        exp = self._fit(exp)
        n_new = len(exp)
        if n_new == 0:
            return torch.zeros(0, dtype=torch.int64)
        return self._append_fitted(exp, [{name: getattr(exp, name) for name in self.STATE_FIELDS}])

    def _append_fitted(self, exp: Experience, state_parts: list[dict]) -> torch.Tensor:
        """`append` once `exp` fits: its transitions, whose states are `state_parts` one after the other (the state
        fields of each part; `exp`'s own state fields are not read)."""
        n_new = len(exp)
        capacity, state_capacity = self.max_size, self.state_capacity
        # 1. room in the transition ring: drop the oldest (their slots are overwritten just below)
        overflow = max(0, self.size + n_new - capacity)
        self.head = (self.head + overflow) % capacity
        self.size -= overflow
        # 2. states, at global ids [first_gid, first_gid + n_states)
        first_gid = self.states_written
        for part in state_parts:
            for name in self.STATE_FIELDS:
                _ring_write(self.states[name], self.states_written % state_capacity, part[name])
            self.states_written += len(part["frames"])
        # 3. transitions, after the newest
        first_slot = (self.head + self.size) % capacity
        slots = torch.from_numpy((first_slot + np.arange(n_new, dtype=np.int64)) % capacity)
        rows = np.empty((n_new, self.table.shape[1]), dtype=np.float64)
        rows[:, self.column["state_gid"]] = first_gid + exp.state_index
        rows[:, self.column["next_state_gid"]] = first_gid + exp.next_state_index
        rows[:, self.column["action"]] = exp.action
        rows[:, self.column["n_steps"]] = exp.n_steps
        rows[:, self.column["terminal_actions"]] = exp.terminal_actions
        rows[:, self.rewards_columns] = exp.rewards
        rows[:, self.gammas_columns] = exp.gammas
        _ring_write(self.table, first_slot, rows)
        self.size += n_new
        self.transitions_written += n_new
        # 4. the state ring may have overwritten states of the oldest transitions: evict those
        lowest_live_gid = self.states_written - state_capacity
        if lowest_live_gid > 0:
            n_dead = bisect.bisect_left(
                range(self.size), True, key=lambda k: bool(self._state_gid_np[(self.head + k) % capacity] >= lowest_live_gid)
            )
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
            state_gid=rows[:, c["state_gid"]].astype(np.int64),  # which transition each slot held (written_as)
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
        """The live content as plain tensors, the states not copied: a full replay holds most of the machine's
        memory, and a copy of its frames for each checkpoint would double that. The live states are one range of the
        state ring: saved as a view of that range, or, once it wraps around the ring's end, as the whole ring (every
        slot written by then) with `state_offset`, the slot of the oldest one (`saved_experience` reads either)."""
        header = {
            "capacity": self.max_size,
            "state_capacity": self.state_capacity,
            "frame_shape": list(self.frame_shape),
            "float_dim": self.float_dim,
            "n_steps": self.n_steps,
            "transitions_written": self.transitions_written,
        }
        if self.size == 0:
            exp = _empty_experience(self.frame_shape, self.float_dim, self.n_steps)
            return {**header, "content": {name: torch.from_numpy(getattr(exp, name)) for name in _CONTENT_DTYPES}}
        rows = self.table.index_select(0, torch.from_numpy(self.physical_order())).numpy()
        first_gid = int(rows[0, self.column["state_gid"]])
        first_slot, n_states = first_gid % self.state_capacity, self.states_written - first_gid
        if first_slot + n_states <= self.state_capacity:  # views of exactly the live range: torch.save writes only it
            states = {name: torch.from_numpy(ring.numpy()[first_slot : first_slot + n_states]) for name, ring in self.states.items()}
            offset = 0
        else:
            states, offset = dict(self.states), first_slot
        transitions = {
            "state_index": rows[:, self.column["state_gid"]] - first_gid,
            "next_state_index": rows[:, self.column["next_state_gid"]] - first_gid,
            "action": rows[:, self.column["action"]],
            "n_steps": rows[:, self.column["n_steps"]],
            "rewards": rows[:, self.rewards_columns],
            "gammas": rows[:, self.gammas_columns],
            "terminal_actions": rows[:, self.column["terminal_actions"]],
        }
        content = {name: torch.from_numpy(np.ascontiguousarray(a, dtype=_NUMPY_DTYPES[name])) for name, a in transitions.items()}
        return {**header, "state_offset": offset, "content": {**states, **content}}

    def load_state_dict(self, state_dict: dict[str, Any], n_actions: int | None = None) -> np.ndarray:
        """Replace the content with a saved one (keeping the newest part if it does not fit); returns the
        positions, in the saved order, of the transitions kept.

        The saved content is checked first (`check_saved_storage`: InvalidBufferFile, nothing changed); a valid
        one made for other frames, floats or n_steps raises ValueError. Saved states that fit are written straight
        into the state ring (from a file mapped into memory, they are never held twice)."""
        check_saved_storage(state_dict, n_actions)
        if tuple(state_dict["frame_shape"]) != self.frame_shape or int(state_dict["float_dim"]) != self.float_dim:
            raise ValueError(
                f"saved buffer holds frames {tuple(state_dict['frame_shape'])} and {state_dict['float_dim']} floats; "
                f"this buffer expects {self.frame_shape} and {self.float_dim}"
            )
        if int(state_dict["n_steps"]) != self.n_steps:
            raise ValueError(f"saved buffer was built with n_steps={state_dict['n_steps']}, this one with {self.n_steps}")
        saved = {name: t.numpy() for name, t in state_dict["content"].items()}
        n_transitions = len(saved["action"])
        n_states = int(saved["next_state_index"].max()) + 1 if n_transitions else 0
        self._empty()
        if 0 < n_transitions <= self.max_size and n_states <= self.state_capacity:
            parts = _rotated_parts(saved, int(state_dict.get("state_offset", 0)), n_states)
            self._append_fitted(Experience(**{**saved, **parts[0]}), parts)
        else:
            self.append(saved_experience(state_dict))
        self.last_evicted = np.zeros(0, dtype=np.int64)
        self.transitions_written = int(state_dict["transitions_written"])
        return np.arange(n_transitions - self.size, n_transitions)

    def dumps(self, path):
        atomic_torch_save(self.state_dict(), Path(path).with_suffix(".pt"))

    def loads(self, path):
        self.load_state_dict(safe_torch_load(Path(path).with_suffix(".pt")))


def _ring_write(ring: torch.Tensor, first: int, rows: np.ndarray) -> None:
    """rows[k] -> ring[(first + k) % len(ring)] as at most two slice copies: plain memory copies, several times
    faster than index_copy_ on uint8 frames (len(rows) <= len(ring))."""
    ring = ring.numpy()
    head = min(len(rows), len(ring) - first)
    ring[first : first + head] = rows[:head]
    ring[: len(rows) - head] = rows[head:]


def _rotated_parts(saved: dict, offset: int, n_states: int) -> list[dict]:
    """The first `n_states` saved states in their logical order, as one or two views of the saved rows (a saved ring
    starts at `offset` and wraps around its end)."""
    n_rows = len(saved["frames"])
    head = min(n_states, n_rows - offset)
    parts = [{name: saved[name][offset : offset + head] for name in TransitionStorage.STATE_FIELDS}]
    if head < n_states:
        parts.append({name: saved[name][: n_states - head] for name in TransitionStorage.STATE_FIELDS})
    return parts


def saved_experience(state_dict: dict[str, Any]) -> Experience:
    """A checked saved storage (`check_saved_storage`) as one Experience, its states in their logical order (a copy
    of them when they were saved as a wrapped ring)."""
    saved = {name: t.numpy() for name, t in state_dict["content"].items()}
    n_states = len(saved["frames"])
    parts = _rotated_parts(saved, int(state_dict.get("state_offset", 0)), n_states)
    if len(parts) > 1:
        saved.update({name: np.concatenate([part[name] for part in parts]) for name in TransitionStorage.STATE_FIELDS})
    return Experience(**saved)


class InvalidBufferFile(ValueError):
    """A saved buffer is damaged or not one: wrong types, dtypes, shapes or values. The message says what."""


_CONTENT_DTYPES = {
    "frames": torch.uint8,
    "state_float": torch.float32,
    "potential": torch.float32,
    "state_index": torch.int64,
    "next_state_index": torch.int64,
    "action": torch.int64,
    "n_steps": torch.int64,
    "rewards": torch.float32,
    "gammas": torch.float32,
    "terminal_actions": torch.float32,
}


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_saved_storage(state_dict, n_actions: int | None = None) -> None:
    """Check a saved storage (`TransitionStorage.state_dict()` read back) before anything is loaded: types,
    dtypes and shapes of every field, frames uint8 (S, *frame_shape), actions in [0, n_actions) (when given),
    n_steps in [1, N], finite floats, rewards and gammas, gammas in [0, 1], terminal_actions >= 0 (inf
    allowed), state indices within the stored states with next > state. InvalidBufferFile says what is wrong."""

    def bad(what: str):
        raise InvalidBufferFile(what)

    if not isinstance(state_dict, dict):
        bad(f"the storage is a {type(state_dict).__name__}, not a dict")
    for key in ("frame_shape", "float_dim", "n_steps", "transitions_written", "content"):
        if key not in state_dict:
            bad(f"the storage has no `{key}`")
    frame_shape, float_dim, n = state_dict["frame_shape"], state_dict["float_dim"], state_dict["n_steps"]
    if not isinstance(frame_shape, (list, tuple)) or len(frame_shape) != 3 or not all(_int(x) and x > 0 for x in frame_shape):
        bad(f"`frame_shape` {frame_shape!r} is not three positive integers")
    if not (_int(float_dim) and float_dim > 0) or not (_int(n) and n > 0):
        bad(f"`float_dim` {float_dim!r} and `n_steps` {n!r} must be positive integers")
    content = state_dict["content"]
    if not isinstance(content, dict):
        bad("`content` is not a dict of tensors")
    for name, dtype in _CONTENT_DTYPES.items():
        tensor = content.get(name)
        if not isinstance(tensor, torch.Tensor):
            bad(f"`{name}` is missing or not a tensor")
        if tensor.dtype != dtype:
            bad(f"`{name}` has dtype {tensor.dtype}, expected {dtype}")
    s, t = len(content["frames"]), len(content["action"])
    offset = state_dict.get("state_offset", 0)
    if not _int(offset) or not (0 <= offset < max(s, 1)):
        bad(f"`state_offset` {offset!r} is not a slot of the {s} stored states")
    shapes = {
        "frames": (s, *frame_shape),
        "state_float": (s, float_dim),
        "potential": (s,),
        "state_index": (t,),
        "next_state_index": (t,),
        "action": (t,),
        "n_steps": (t,),
        "rewards": (t, n),
        "gammas": (t, n),
        "terminal_actions": (t,),
    }
    for name, shape in shapes.items():
        if tuple(content[name].shape) != tuple(shape):
            bad(f"`{name}` has shape {tuple(content[name].shape)}, expected {tuple(shape)}")
    written = state_dict["transitions_written"]
    if not _int(written) or written < t:
        bad(f"`transitions_written` {written!r} is not an integer >= the {t} transitions stored")
    for name in ("state_float", "potential", "rewards", "gammas"):
        if not bool(torch.isfinite(content[name]).all()):
            bad(f"`{name}` holds NaN or infinite values")
    if t == 0:
        return
    action, n_steps = content["action"], content["n_steps"]
    if int(action.min()) < 0 or (n_actions is not None and int(action.max()) >= n_actions):
        limit = f"[0, {n_actions})" if n_actions is not None else ">= 0"
        bad(f"`action` holds values in [{int(action.min())}, {int(action.max())}], expected {limit}")
    if int(n_steps.min()) < 1 or int(n_steps.max()) > n:
        bad(f"`n_steps` holds values in [{int(n_steps.min())}, {int(n_steps.max())}], expected [1, {n}]")
    gammas = content["gammas"]
    if float(gammas.min()) < 0 or float(gammas.max()) > 1:
        bad("`gammas` holds values outside [0, 1]")
    terminal = content["terminal_actions"]
    if bool(torch.isnan(terminal).any()) or float(terminal.min()) < 0:
        bad("`terminal_actions` holds NaN or negative values")
    state_index, next_state_index = content["state_index"], content["next_state_index"]
    if int(state_index.min()) < 0 or int(next_state_index.max()) >= s:
        bad(f"state indices point outside the {s} stored states")
    if not bool((next_state_index > state_index).all()):
        bad("a transition's next state is not after its state")


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


_NUMPY_DTYPES = {name: torch.empty(0, dtype=dtype).numpy().dtype for name, dtype in _CONTENT_DTYPES.items()}
