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
(storage slots, for priority updates), `state_gid` int64 (which transitions those slots held: an update after
races were stored skips the slots they replaced) and, from a prioritized buffer, `weight` float32 (importance
weights, max 1).

Save/load is plain data: `torch.save` of tensors and ints, read back with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torchrl.data import ReplayBuffer
from torchrl.data.replay_buffers.samplers import Sampler

from trackmania_rl.config.loader import frame_shape
from trackmania_rl.games.float_layout import FloatLayout
from trackmania_rl.replay.mini_race import MiniRaceTransform
from trackmania_rl.replay.samplers import PrioritizedSampler, UniformSampler
from trackmania_rl.replay.storage import (
    TEST_STATE_SLACK,
    TRAIN_STATE_SLACK,
    InvalidBufferFile,
    TransitionStorage,
    TransitionWriter,
    check_saved_storage,
    saved_experience,
)
from trackmania_rl.serialization import atomic_torch_save, safe_torch_load, torch_load_failure

BUFFER_FILE_FORMAT = "trackmania_rl.transition_replay_buffer/2"  # /2: each frame stored once (storage.py)
READABLE_BUFFER_FORMATS = ("trackmania_rl.transition_replay_buffer/1", BUFFER_FILE_FORMAT)


class TransitionReplayBuffer(ReplayBuffer):
    """A torchrl ReplayBuffer of `Experience` transitions with the mini-race transform.

    `extend(experience)` appends; `sample_batch()` returns the batch dict of the module docstring;
    `update_priority(index, priority)` (prioritized sampler only); `resize(capacity)` keeps content and FIFO
    order; `update_config(cfg)` pushes hot-reloadable settings (mini-race oversampling, prio alpha/beta/eps).
    """

    def __init__(self, *, storage: TransitionStorage, sampler: Sampler, transform: MiniRaceTransform, batch_size: int):
        super().__init__(storage=storage, sampler=sampler, writer=TransitionWriter(), collate_fn=transform, batch_size=batch_size)
        self.mini_race_transform = transform
        self._sampled_age_sum, self._sampled_batches = 0.0, 0  # replay age of sampled batches, see take_replay_age

    @property
    def capacity(self) -> int:
        return self.storage.capacity

    @property
    def prioritized(self) -> bool:
        return isinstance(self.sampler, PrioritizedSampler)

    def sample_batch(self, batch_size: int | None = None) -> dict:
        data, info = self.sample(batch_size, return_info=True)
        data["index"] = info["index"]
        self._sampled_age_sum += float(self.storage.replay_age(info["index"]).mean())
        self._sampled_batches += 1
        if "_weight" in info:
            data["weight"] = info["_weight"].to(self.mini_race_transform.device)
        return data

    def update_priority(self, index, priority, state_gid=None) -> None:
        """torchrl's update, for the slots that still hold the transitions of a batch sampled earlier (`state_gid`, as
        the batch carries it): races stored while the batch trained may have replaced some, whose new transitions
        keep the priority they were stored with."""
        if state_gid is None:
            return super().update_priority(index, priority)
        with self._replay_lock:
            index = torch.as_tensor(index).reshape(-1)
            priority = torch.as_tensor(priority).reshape(-1)
            kept = torch.from_numpy(self.storage.still_holds(index.numpy(), torch.as_tensor(state_gid).numpy()))
            if priority.numel() > 1:
                priority = priority[kept]
            super().update_priority(index[kept], priority)

    def take_replay_age(self) -> float | None:
        """Mean replay age (states stored after the sampled transitions' own) of the batches sampled since the
        last call, or None if none was; starts a new count."""
        if not self._sampled_batches:
            return None
        mean = self._sampled_age_sum / self._sampled_batches
        self._sampled_age_sum, self._sampled_batches = 0.0, 0
        return mean

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
        return {
            "format": BUFFER_FILE_FORMAT,
            "storage": self.storage.state_dict(),
            "sampler": self.sampler.state_dict(),
            "writer": self._writer.state_dict(),
        }

    def load_state_dict(self, state_dict: dict[str, Any], n_actions: int | None = None) -> None:
        """Replace the content with a saved one, checked first (`check_saved_buffer`): InvalidBufferFile for a
        damaged one, ValueError for a valid one made for other frames, floats or n_steps; nothing changes then."""
        check_saved_buffer(state_dict, n_actions)
        with self._replay_lock:
            kept = self.storage.load_state_dict(state_dict["storage"], n_actions)
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


def check_saved_buffer(state_dict, n_actions: int | None = None) -> None:
    """Check a saved buffer (as read from its file) before loading it: the format tag, the storage
    (storage.py `check_saved_storage`: dtypes, shapes, value ranges, actions in [0, n_actions)) and the
    priorities (one finite value >= 0 per transition). InvalidBufferFile says what is wrong."""
    if not isinstance(state_dict, dict) or state_dict.get("format") not in READABLE_BUFFER_FORMATS:
        found = state_dict.get("format") if isinstance(state_dict, dict) else type(state_dict).__name__
        raise InvalidBufferFile(f"not a saved transition replay buffer (format {found!r}, expected {BUFFER_FILE_FORMAT!r})")
    check_saved_storage(state_dict.get("storage"), n_actions)
    sampler = state_dict.get("sampler")
    if not isinstance(sampler, dict) or not isinstance(state_dict.get("writer", {}), dict):
        raise InvalidBufferFile("`sampler` and `writer` must be dicts")
    if "leaves" in sampler:
        leaves = sampler["leaves"]
        n = len(state_dict["storage"]["content"]["action"])
        if not isinstance(leaves, torch.Tensor) or not leaves.is_floating_point() or tuple(leaves.shape) != (n,):
            raise InvalidBufferFile(f"the priorities are not {n} floats (one per transition)")
        if not bool(torch.isfinite(leaves).all()) or (n and float(leaves.min()) < 0):
            raise InvalidBufferFile("the priorities hold NaN, infinite or negative values")
        max_leaf = sampler.get("max_leaf")
        if isinstance(max_leaf, bool) or not isinstance(max_leaf, (int, float)) or not np.isfinite(max_leaf) or max_leaf <= 0:
            raise InvalidBufferFile(f"the priorities' `max_leaf` {max_leaf!r} is not a positive number")


def read_buffer_file(path: str | Path, n_actions: int | None = None) -> dict[str, Any]:
    """A saved buffer read from its file (plain tensors, weights_only=True) and checked (`check_saved_buffer`).
    FileNotFoundError when there is no file; InvalidBufferFile naming the file when it cannot be read or its
    content is damaged."""
    path = Path(path)
    try:
        state_dict = safe_torch_load(path, mmap=True)  # the frames stay in the file until they are copied in
    except FileNotFoundError:
        raise FileNotFoundError(f"buffer file {path} does not exist") from None
    except Exception as e:  # truncated, not a torch file, or holding objects weights_only refuses
        raise InvalidBufferFile(f"buffer file {path} is corrupt or not a plain-data torch file ({torch_load_failure(e)})") from None
    try:
        check_saved_buffer(state_dict, n_actions)
    except InvalidBufferFile as e:
        raise InvalidBufferFile(f"buffer file {path} is damaged: {e}") from None
    return state_dict


def save_buffer(buffer: TransitionReplayBuffer, path: str | Path) -> None:
    """Write the buffer's content (and priorities) to one file, atomically (temp file + rename)."""
    atomic_torch_save(buffer.state_dict(), path)


def load_buffer(buffer: TransitionReplayBuffer, path: str | Path, n_actions: int | None = None) -> None:
    """Replace the buffer's content with a saved one (plain tensors, read with weights_only=True, checked
    by `read_buffer_file`: FileNotFoundError or InvalidBufferFile naming the file, nothing changed then).

    The saved buffer may have another capacity: the newest transitions that fit are kept, in FIFO order.
    """
    buffer.load_state_dict(read_buffer_file(path, n_actions), n_actions)


def append_saved_buffer(buffer: TransitionReplayBuffer, state_dict: dict[str, Any], n_actions: int | None = None) -> None:
    """Add a saved buffer's transitions after the buffer's own, as newer ones (the oldest are evicted when it is full;
    the added ones get fresh priorities): a learner group's shards merged into fewer learners. Checked first as
    `load_state_dict` checks (InvalidBufferFile, ValueError for other frames, floats or n_steps; nothing changes then)."""
    check_saved_buffer(state_dict, n_actions)
    saved, storage = state_dict["storage"], buffer.storage
    if (tuple(saved["frame_shape"]), int(saved["float_dim"]), int(saved["n_steps"])) != (
        storage.frame_shape,
        storage.float_dim,
        storage.n_steps,
    ):
        raise ValueError(
            f"saved buffer holds frames {tuple(saved['frame_shape'])}, {saved['float_dim']} floats and n_steps={saved['n_steps']}; "
            f"this buffer expects {storage.frame_shape}, {storage.float_dim} and n_steps={storage.n_steps}"
        )
    buffer.extend(saved_experience(saved, newest=buffer.capacity))  # older ones would be evicted at once


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
    storage = TransitionStorage(
        capacity, frame_shape(cfg), layout.dim, cfg.n_steps, state_slack=state_slack, frames_per_state=int(cfg.frame_stack)
    )
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
        cfg,
        layout,
        capacity_of_test_buffer(cfg, capacity),
        device=device,
        prioritized=prioritized,
        batch_size=batch_size,
        rng=test_rng,
        state_slack=TEST_STATE_SLACK,
    )
    return buffer, buffer_test


def resize_buffers(buffer: TransitionReplayBuffer, buffer_test: TransitionReplayBuffer, cfg, capacity: int) -> None:
    """Follow memory_size_schedule: new capacities, content and FIFO order kept (the newest part when shrinking)."""
    buffer.resize(capacity)
    buffer_test.resize(capacity_of_test_buffer(cfg, capacity))
