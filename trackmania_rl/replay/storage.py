"""Transition storage for torchrl: each state stored once in a ring, transitions pointing at their state and next state.

A state's picture is a stack of the game's last `frames_per_state` frames (oldest first); consecutive states of a race
share all but one of them, so the frames live in a ring of their own, each stored once, and a state keeps the place of
its newest frame: its stack is that frame and the ones before it. A state whose older frames are not the frames of the
state stored just before it (the first of a race, or one after a gap) stores its whole stack. With one frame a state
(CarRacing), the frame ring holds one frame per state.
"""

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


def default_frame_capacity(state_capacity: int, frames_per_state: int, slack: float) -> int:
    """One frame per state, and room for the whole stacks of the states that start a run (the slack's share)."""
    if frames_per_state == 1:
        return state_capacity
    return int(state_capacity + math.ceil(state_capacity * slack) + frames_per_state)


# ---------------------------------------------------------------------------------------------------------
# Storage
# ---------------------------------------------------------------------------------------------------------


class TransitionStorage(Storage):
    """FIFO storage of transitions whose states and frames are stored once. See the module docstring."""

    STATE_FIELDS = ("frame_gid", "state_float", "potential")
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
        frames_per_state: int = 1,
    ):
        super().__init__(max_size=capacity)
        self.frame_shape = tuple(int(x) for x in frame_shape)
        self.frames_per_state = int(frames_per_state)
        if self.frames_per_state < 1 or self.frame_shape[0] % self.frames_per_state:
            raise ValueError(f"{self.frame_shape[0]} channels are not {self.frames_per_state} frames of equal channels")
        self.frame_row_shape = (self.frame_shape[0] // self.frames_per_state, *self.frame_shape[1:])
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
        self.frame_capacity = default_frame_capacity(state_capacity, self.frames_per_state, self.state_slack)
        self.frames = torch.empty((self.frame_capacity, *self.frame_row_shape), dtype=torch.uint8)
        self.states = {
            "frame_gid": torch.empty((state_capacity,), dtype=torch.int64),  # global id of the state's newest frame
            "state_float": torch.empty((state_capacity, self.float_dim), dtype=torch.float32),
            "potential": torch.empty((state_capacity,), dtype=torch.float32),
        }
        # a stack's frames, from its newest frame's global id: the k - 1 before it, then it
        self._stack_offsets = torch.arange(1 - self.frames_per_state, 1, dtype=torch.int64)
        n_columns = len(self.COLUMNS) + 2 * self.n_steps
        self.table = torch.empty((capacity, n_columns), dtype=torch.float64)
        self.column = {name: k for k, name in enumerate(self.COLUMNS)}
        first = len(self.COLUMNS)
        self.rewards_columns = slice(first, first + self.n_steps)
        self.gammas_columns = slice(first + self.n_steps, first + 2 * self.n_steps)
        self._state_gid_np = self.table[:, self.column["state_gid"]].numpy()  # a view, for cheap scalar reads
        self._frame_gid_np = self.states["frame_gid"].numpy()

    def _empty(self) -> None:
        self.head = 0  # physical slot of the oldest transition
        self.size = 0
        self.states_written = 0  # global id of the next state to write
        self.frames_written = 0  # global id of the next frame to write
        self.transitions_written = 0
        self.last_evicted = np.zeros(0, dtype=np.int64)  # slots freed (not overwritten) by the last append

    @property
    def capacity(self) -> int:
        return self.max_size

    def __len__(self) -> int:
        return self.size

    def nbytes(self) -> int:
        """Bytes of all preallocated tensors (frames, states and transitions)."""
        tensors = [self.frames, self.table, *self.states.values()]
        return sum(t.numel() * t.element_size() for t in tensors)

    def logical_to_physical(self, logical):
        """Slot of the k-th oldest live transition (numpy or torch integer arrays)."""
        return (self.head + logical) % self.max_size

    def physical_order(self) -> np.ndarray:
        """Slots of the live transitions, oldest first."""
        return self.logical_to_physical(np.arange(self.size, dtype=np.int64))

    def is_live(self, slots: np.ndarray) -> np.ndarray:
        return ((np.asarray(slots) - self.head) % self.max_size) < self.size

    # -- writing -------------------------------------------------------------------------------------
    def frame_plan(self, exp: Experience) -> np.ndarray:
        """Per state of `exp`: how many of its stack's frames it stores (the newest only when the others are the newest
        of the state before it in `exp`, else all of them)."""
        k = self.frames_per_state
        counts = np.full(exp.n_states, k, dtype=np.int64)
        if k > 1 and exp.n_states > 1:
            stacks = exp.frames.reshape(exp.n_states, k, -1)
            continues = (stacks[1:, :-1] == stacks[:-1, 1:]).all(axis=(1, 2))
            counts[1:][continues] = 1
        return counts

    def _fit(self, exp: Experience) -> Experience:
        """The newest part of `exp` that fits: <= capacity transitions, <= state_capacity states and <= frame_capacity
        frames."""
        if len(exp) > self.max_size:
            exp = exp.tail(self.max_size)

        def fits(part: Experience) -> bool:
            return part.n_states <= self.state_capacity and int(self.frame_plan(part).sum()) <= self.frame_capacity

        if not fits(exp):
            lo, hi = 0, len(exp)  # find the largest k whose tail fits
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if fits(exp.tail(mid)):
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
        if len(exp) == 0:
            return torch.zeros(0, dtype=torch.int64)
        counts = self.frame_plan(exp)
        k = self.frames_per_state
        # the frames stored: per state its last `count` frames of the stack, states in order
        state_of_row = np.repeat(np.arange(exp.n_states), counts)
        ends = np.cumsum(counts)
        frame_of_row = np.arange(ends[-1]) - np.repeat(ends - counts, counts) + np.repeat(k - counts, counts)
        rows = exp.frames.reshape(exp.n_states, k, *self.frame_row_shape)[state_of_row, frame_of_row]
        states = {"frame_index": ends - 1, "state_float": [exp.state_float], "potential": [exp.potential]}
        return self._append_fitted(exp, [rows], states)

    def _append_fitted(self, exp: Experience, frame_parts: list, states: dict) -> torch.Tensor:
        """`append` once `exp` fits: its transitions (`exp`'s state fields are not read), whose states are `states`
        (`frame_index`: each one's newest frame among `frame_parts`, written one after the other; `state_float`,
        `potential`: lists of parts, written one after the other)."""
        n_new = len(exp)
        capacity, state_capacity = self.max_size, self.state_capacity
        # 1. room in the transition ring: drop the oldest (their slots are overwritten just below)
        overflow = max(0, self.size + n_new - capacity)
        self.head = (self.head + overflow) % capacity
        self.size -= overflow
        # 2. frames at global ids [first_frame, ...), states at [first_gid, first_gid + n_states)
        first_frame, first_gid = self.frames_written, self.states_written
        for part in frame_parts:
            _ring_write(self.frames, self.frames_written % self.frame_capacity, part)
            self.frames_written += len(part)
        _ring_write(self.states["frame_gid"], first_gid % state_capacity, first_frame + np.asarray(states["frame_index"], dtype=np.int64))
        for name in ("state_float", "potential"):
            written = first_gid
            for part in states[name]:
                _ring_write(self.states[name], written % state_capacity, part)
                written += len(part)
        self.states_written = written
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
        # 4. the rings may have overwritten states or frames of the oldest transitions: evict those (both are written
        # in the transitions' order, so the dead ones are the oldest)
        lowest_live_gid = self.states_written - state_capacity
        lowest_live_frame = self.frames_written - self.frame_capacity + self.frames_per_state - 1  # of a newest frame
        if lowest_live_gid > 0 or lowest_live_frame > self.frames_per_state - 1:

            def live(k: int) -> bool:
                gid = int(self._state_gid_np[(self.head + k) % capacity])
                return gid >= lowest_live_gid and int(self._frame_gid_np[gid % state_capacity]) >= lowest_live_frame

            n_dead = bisect.bisect_left(range(self.size), True, key=live)
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
    def stacks(self, state_slots: torch.Tensor) -> torch.Tensor:
        """The frame stacks (n, C, H, W) of the states in these state-ring slots, gathered from the frame ring."""
        newest = self.states["frame_gid"].index_select(0, state_slots)
        if self.frames_per_state == 1:
            return self.frames.index_select(0, newest % self.frame_capacity)
        frame_slots = ((newest[:, None] + self._stack_offsets) % self.frame_capacity).reshape(-1)
        return self.frames.index_select(0, frame_slots).view(len(state_slots), *self.frame_shape)

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
        frames = self.stacks(slots)
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

    def _live_rows(self) -> tuple[np.ndarray, int]:
        """The live transitions' table rows, oldest first, and the global id of the oldest one's state."""
        rows = self.table.index_select(0, torch.from_numpy(self.physical_order())).numpy()
        return rows, int(rows[0, self.column["state_gid"]])

    def _transition_fields(self, rows: np.ndarray, first_gid: int) -> dict:
        c = self.column
        fields = {
            "state_index": rows[:, c["state_gid"]] - first_gid,
            "next_state_index": rows[:, c["next_state_gid"]] - first_gid,
            "action": rows[:, c["action"]],
            "n_steps": rows[:, c["n_steps"]],
            "rewards": rows[:, self.rewards_columns],
            "gammas": rows[:, self.gammas_columns],
            "terminal_actions": rows[:, c["terminal_actions"]],
        }
        return {name: np.ascontiguousarray(a, dtype=_NUMPY_DTYPES[name]) for name, a in fields.items()}

    def to_experience(self) -> Experience:
        """The live content as one Experience, oldest first, each state with its whole stack (a copy: for resizing,
        notebooks and tests)."""
        if self.size == 0:
            return _empty_experience(self.frame_shape, self.float_dim, self.n_steps)
        rows, first_gid = self._live_rows()
        state_slots = torch.arange(first_gid, self.states_written, dtype=torch.int64) % self.state_capacity
        return Experience(
            frames=self.stacks(state_slots).numpy(),
            state_float=self.states["state_float"].index_select(0, state_slots).numpy(),
            potential=self.states["potential"].index_select(0, state_slots).numpy(),
            **self._transition_fields(rows, first_gid),
        )

    def resize(self, capacity: int, state_capacity: int | None = None) -> np.ndarray:
        """Change the capacity keeping the newest transitions in FIFO order.

        Returns the old slots of the kept transitions, oldest first (they now live in slots 0..len-1).
        """
        old_order = self.physical_order()
        saved = self.state_dict()  # views of the old rings, which it keeps alive until they are copied
        self._allocate(int(capacity), state_capacity or default_state_capacity(capacity, self.n_steps, self.state_slack))
        written = self.transitions_written
        self._empty()
        if not self._restore(saved, {name: t.numpy() for name, t in saved["content"].items()}):
            self.append(saved_experience(saved, newest=self.max_size))  # shrinking: the stacks of the newest rebuilt
        self.transitions_written = written
        self.last_evicted = np.zeros(0, dtype=np.int64)
        return old_order[len(old_order) - self.size :]

    # -- plain-data state ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The live content as plain tensors, the frames and states not copied: a full replay holds most of the
        machine's memory, and a copy for each checkpoint would double that. The live frames (and states) are one range
        of their ring: saved as a view of that range, or, once it wraps around the ring's end, as the whole ring (every
        slot written by then) with the slot of the oldest (`frame_offset`, `state_offset`); `frame_index` gives each
        state's newest frame among the saved ones (`saved_experience` rebuilds the stacks)."""
        header = {
            "capacity": self.max_size,
            "state_capacity": self.state_capacity,
            "frame_shape": list(self.frame_shape),
            "frames_per_state": self.frames_per_state,
            "float_dim": self.float_dim,
            "n_steps": self.n_steps,
            "transitions_written": self.transitions_written,
        }
        if self.size == 0:
            empty = {"frames": torch.zeros((0, *self.frame_row_shape), dtype=torch.uint8), "frame_index": torch.zeros(0, dtype=torch.int64)}
            exp = _empty_experience(self.frame_shape, self.float_dim, self.n_steps)
            fields = {name: torch.from_numpy(getattr(exp, name)) for name in _CONTENT_DTYPES if name != "frames"}
            return {**header, "state_offset": 0, "frame_offset": 0, "content": {**fields, **empty}}
        rows, first_gid = self._live_rows()
        frame_gids = self._frame_gid_np[np.arange(first_gid, self.states_written) % self.state_capacity]
        first_frame = int(frame_gids[0]) - (self.frames_per_state - 1)
        frames, frame_offset = _live_range(self.frames, first_frame, self.frames_written, self.frame_capacity)
        states, state_offset = {}, 0
        for name in ("state_float", "potential"):
            states[name], state_offset = _live_range(self.states[name], first_gid, self.states_written, self.state_capacity)
        content = {
            "frames": frames,
            "frame_index": torch.from_numpy(frame_gids - first_frame),
            **states,
            **{name: torch.from_numpy(a) for name, a in self._transition_fields(rows, first_gid).items()},
        }
        return {**header, "state_offset": state_offset, "frame_offset": frame_offset, "content": content}

    def load_state_dict(self, state_dict: dict[str, Any], n_actions: int | None = None) -> np.ndarray:
        """Replace the content with a saved one (keeping the newest part if it does not fit); returns the
        positions, in the saved order, of the transitions kept.

        The saved content is checked first (`check_saved_storage`: InvalidBufferFile, nothing changed); a valid
        one made for other frames, floats or n_steps raises ValueError. Saved frames and states that fit are written
        straight into the rings (from a file mapped into memory, they are never held twice)."""
        check_saved_storage(state_dict, n_actions)
        saved_k = int(state_dict.get("frames_per_state", self.frames_per_state))
        if (
            tuple(state_dict["frame_shape"]) != self.frame_shape
            or int(state_dict["float_dim"]) != self.float_dim
            or saved_k != self.frames_per_state
        ):
            raise ValueError(
                f"saved buffer holds frames {tuple(state_dict['frame_shape'])} ({saved_k} a state) and {state_dict['float_dim']} "
                f"floats; this buffer expects {self.frame_shape} ({self.frames_per_state} a state) and {self.float_dim}"
            )
        if int(state_dict["n_steps"]) != self.n_steps:
            raise ValueError(f"saved buffer was built with n_steps={state_dict['n_steps']}, this one with {self.n_steps}")
        saved = {name: t.numpy() for name, t in state_dict["content"].items()}
        self._empty()
        if not self._restore(state_dict, saved):
            self.append(saved_experience(state_dict, newest=self.max_size))
        n_transitions = len(saved["action"])
        self.last_evicted = np.zeros(0, dtype=np.int64)
        self.transitions_written = int(state_dict["transitions_written"])
        return np.arange(n_transitions - self.size, n_transitions)

    def _restore(self, state_dict: dict, saved: dict) -> bool:
        """Write a saved content whose frames are stored once straight into the empty rings, when it fits whole (its
        states and frames, unused ones included); False, nothing written, otherwise."""
        n_transitions = len(saved["action"])
        if "frame_index" not in saved or not 0 < n_transitions <= self.max_size:
            return False
        n_states = int(saved["next_state_index"].max()) + 1
        frame_index = saved["frame_index"][:n_states]
        n_frames = int(frame_index.max()) + 1
        if n_states > self.state_capacity or n_frames > self.frame_capacity:
            return False
        transitions = Experience(**_empty_states(self), **{name: saved[name] for name in Experience.TRANSITION_FIELDS})
        state_offset = int(state_dict["state_offset"])
        states = {name: _rotated(saved[name], state_offset, n_states) for name in ("state_float", "potential")}
        frames = _rotated(saved["frames"], int(state_dict["frame_offset"]), n_frames)
        self._append_fitted(transitions, frames, {"frame_index": frame_index, **states})
        return True

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


def _live_range(ring: torch.Tensor, first_gid: int, end_gid: int, ring_capacity: int) -> tuple[torch.Tensor, int]:
    """Rows [first_gid, end_gid) of a ring, not copied: a view of exactly them (torch.save then writes only them), or,
    when they wrap around the ring's end, the whole ring (every row written by then) and the slot of the first."""
    first = first_gid % ring_capacity
    if first + (end_gid - first_gid) <= ring_capacity:
        return torch.from_numpy(ring.numpy()[first : first + end_gid - first_gid]), 0
    return ring, first


def _rotated(saved: np.ndarray, offset: int, n: int) -> list[np.ndarray]:
    """The first `n` rows of a saved range in their order, as one or two views (a saved ring starts at `offset` and wraps
    around its end)."""
    head = min(n, len(saved) - offset)
    parts = [saved[offset : offset + head]]
    if head < n:
        parts.append(saved[: n - head])
    return parts


def _empty_states(storage: TransitionStorage) -> dict:
    exp = _empty_experience(storage.frame_shape, storage.float_dim, storage.n_steps)
    return {name: getattr(exp, name) for name in Experience.STATE_FIELDS}


def saved_experience(state_dict: dict[str, Any], newest: int | None = None) -> Experience:
    """A checked saved storage (`check_saved_storage`) as one Experience, each state with its whole stack (a copy);
    `newest`: only the newest transitions, so many, and the states they use."""
    saved = {name: t.numpy() for name, t in state_dict["content"].items()}
    transitions = {name: saved[name] for name in Experience.TRANSITION_FIELDS}
    n_states = len(saved.get("frame_index", saved["state_float"]))  # in use (a wrapped ring saves more)
    first = 0
    if newest is not None and newest < len(saved["action"]):
        transitions = {name: a[len(a) - newest :] for name, a in transitions.items()}
        first = int(transitions["state_index"].min()) if newest else n_states
        n_states = int(transitions["next_state_index"].max()) + 1 if newest else n_states
        transitions["state_index"] = transitions["state_index"] - first
        transitions["next_state_index"] = transitions["next_state_index"] - first
    state_offset = int(state_dict.get("state_offset", 0))
    states = {name: np.concatenate(_rotated(saved[name], state_offset, n_states))[first:] for name in ("state_float", "potential")}
    if "frame_index" in saved:  # frames stored once: each state's stack rebuilt from them
        k = int(state_dict["frames_per_state"])
        rows = np.concatenate(_rotated(saved["frames"], int(state_dict["frame_offset"]), len(saved["frames"])))
        frames = rows[saved["frame_index"][first:n_states, None] + np.arange(1 - k, 1)].reshape(
            n_states - first, *state_dict["frame_shape"]
        )
    else:  # an older file: one stack a state
        frames = np.concatenate(_rotated(saved["frames"], state_offset, n_states))[first:]
    return Experience(frames=frames, **states, **transitions)


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
    dtypes and shapes of every field, frames uint8 (each frame once: (F, C / k, H, W) with each state's `frame_index`,
    its newest frame, in [k - 1, F); an older file: a stack a state, (S, *frame_shape)), the rings' offsets, actions in
    [0, n_actions) (when given), n_steps in [1, N], finite floats, rewards and gammas, gammas in [0, 1],
    terminal_actions >= 0 (inf allowed), state indices within the stored states with next > state. InvalidBufferFile
    says what is wrong."""

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
    once = "frame_index" in content  # frames stored once (else an older file's stack a state)
    for name, dtype in {**_CONTENT_DTYPES, **({"frame_index": torch.int64} if once else {})}.items():
        tensor = content.get(name)
        if not isinstance(tensor, torch.Tensor):
            bad(f"`{name}` is missing or not a tensor")
        if tensor.dtype != dtype:
            bad(f"`{name}` has dtype {tensor.dtype}, expected {dtype}")
    s, t, f = len(content["state_float"]), len(content["action"]), len(content["frames"])
    offsets = {"state_offset": s, **({"frame_offset": f} if once else {})}
    for key, rows in offsets.items():
        offset = state_dict.get(key, 0)
        if not _int(offset) or not (0 <= offset < max(rows, 1)):
            bad(f"`{key}` {offset!r} is not a slot of the {rows} stored rows")
    shapes = {
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
    if once:
        k = state_dict.get("frames_per_state")
        if not (_int(k) and k > 0 and frame_shape[0] % k == 0):
            bad(f"`frames_per_state` {k!r} does not divide the {frame_shape[0]} channels of a state")
        s_used = len(content["frame_index"])  # the saved states in use; a wrapped ring saves more
        shapes.update(frames=(f, frame_shape[0] // k, *frame_shape[1:]), frame_index=(min(s_used, s),))
    else:
        s_used = s
        shapes.update(frames=(s, *frame_shape))
    for name, shape in shapes.items():
        if tuple(content[name].shape) != tuple(shape):
            bad(f"`{name}` has shape {tuple(content[name].shape)}, expected {tuple(shape)}")
    if once and s_used and (int(content["frame_index"].min()) < k - 1 or int(content["frame_index"].max()) >= f):
        bad(f"`frame_index` points outside the {f} stored frames (a stack of {k} needs {k - 1} frames before its newest)")
    if once and s_used > 1 and bool((content["frame_index"][1:] < content["frame_index"][:-1]).any()):
        bad("`frame_index` goes backwards: a state's newest frame comes before the one of the state before it")
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
    if int(state_index.min()) < 0 or int(next_state_index.max()) >= s_used:
        bad(f"state indices point outside the {s_used} stored states")
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
