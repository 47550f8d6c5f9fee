"""Frames stored once: states of 4 stacked frames (as Enduro's) keep one frame each in the frame ring, and every stack
read back (sampled, saved, loaded, resized, merged) is the state's own."""

import numpy as np
import pytest
import torch

from tests.helpers import make_rollout, markers
from tests.replay.test_buffers import stored_markers
from trackmania_rl.replay.buffers import (
    BUFFER_FILE_FORMAT,
    append_saved_buffer,
    load_buffer,
    make_buffer,
    read_buffer_file,
    save_buffer,
)
from trackmania_rl.replay.experience import rollout_to_experience

K = 4
RACE = 1000  # races start at markers 0, 1000, 2000, ...


@pytest.fixture(scope="module")
def cfg4(cfg):
    return cfg.replace(frame_stack=K)


def stacked_experience(cfg4, layout, n_states, first_marker=0):
    """A race whose state m stacks the frames of markers m-3 ... m (the race's first frame repeated before it), as the
    Gymnasium backend stacks them."""
    rollout = make_rollout(cfg4, layout, n_states, False, first_marker=first_marker, rng=np.random.default_rng(first_marker))
    single = rollout["frames"]
    rollout["frames"] = [np.concatenate([single[max(0, i - K + 1 + j)] for j in range(K)]) for i in range(n_states)]
    return rollout_to_experience(rollout, cfg4, layout, 0.95)


def expected_stacks(state_markers) -> np.ndarray:
    """The frame values (each frame's pixels are its marker % 256) of the stacks of states with these markers."""
    m = np.asarray(state_markers)[:, None]
    return np.maximum(m - K + 1 + np.arange(K), (m // RACE) * RACE) % 256


def check_stacks(buffer, layout):
    """Every live transition reads its own state's and next state's stacks, frame by frame."""
    raw = buffer.storage.get(torch.from_numpy(buffer.storage.physical_order()))
    for image, floats in (("state_img", "state_float"), ("next_state_img", "next_state_float")):
        images = raw[image].numpy()
        assert images.shape[1] == K and (images == images[:, :, :1, :1]).all()  # each frame one value
        np.testing.assert_array_equal(images[:, :, 0, 0], expected_stacks(markers(layout, raw[floats].numpy())))


def test_consecutive_states_store_one_frame_each_and_read_back_their_stacks(cfg4, layout):
    buffer = make_buffer(cfg4, layout, 1_000, rng=np.random.default_rng(0))
    for k in range(3):
        buffer.extend(stacked_experience(cfg4, layout, 101, first_marker=RACE * k))
    storage = buffer.storage
    assert storage.states_written == 303
    assert storage.frames_written == 303 + 3 * (K - 1)  # a race's first state stores its whole stack
    check_stacks(buffer, layout)
    assert storage.frames.numel() < 0.4 * storage.state_capacity * K * int(np.prod(storage.frame_row_shape))
    batch = buffer.sample_batch()
    assert tuple(batch["state_img"].shape[1:]) == (K, cfg4.H_downsized, cfg4.W_downsized)


def test_states_after_a_gap_store_their_whole_stack_and_the_frame_ring_evicts_consistently(cfg4, layout):
    # single transitions a few states apart: each state is a break (K frames); the frame ring fills before the others
    buffer = make_buffer(cfg4, layout, 60, rng=np.random.default_rng(0))
    exp = stacked_experience(cfg4, layout, 400)
    for k in range(0, 390, 5):
        buffer.extend(exp.select(np.array([k])))
        check_stacks(buffer, layout)
    storage = buffer.storage
    assert storage.frames_written > storage.frame_capacity  # wrapped: transitions were evicted for their frames
    stored = stored_markers(buffer, layout)
    assert 0 < len(stored) < 60
    np.testing.assert_array_equal(stored, np.arange(0, 390, 5)[-len(stored) :])


def test_resize_keeps_every_stack(cfg4, layout):
    buffer = make_buffer(cfg4, layout, 250, rng=np.random.default_rng(0))
    for k in range(4):
        buffer.extend(stacked_experience(cfg4, layout, 101, first_marker=RACE * k))
    before = markers(layout, buffer.storage.to_experience().state_float)
    buffer.resize(600)
    check_stacks(buffer, layout)
    assert markers(layout, buffer.storage.to_experience().state_float).tolist() == before.tolist()
    buffer.resize(100)
    check_stacks(buffer, layout)
    assert len(buffer) == 100


def test_save_load_and_merge_rebuild_the_stacks_and_an_older_file_still_loads(cfg4, layout, tmp_path):
    buffer = make_buffer(cfg4, layout, 300, rng=np.random.default_rng(0))
    for k in range(5):  # the frame and state rings wrap
        buffer.extend(stacked_experience(cfg4, layout, 101, first_marker=RACE * k))
    saved = buffer.state_dict()
    assert saved["format"] == BUFFER_FILE_FORMAT and saved["storage"]["frame_offset"] > 0
    assert saved["storage"]["content"]["frames"].data_ptr() == buffer.storage.frames.data_ptr()  # not copied
    path = tmp_path / "buffer.pt"
    save_buffer(buffer, path)
    want = stored_markers(buffer, layout)
    for capacity in (300, 120):  # straight into the rings; the newest that fit a smaller buffer
        other = make_buffer(cfg4, layout, capacity, rng=np.random.default_rng(1))
        load_buffer(other, path)
        got = stored_markers(other, layout)
        assert got.tolist() == want[-capacity:].tolist()
        check_stacks(other, layout)
    merged = make_buffer(cfg4, layout, 600, rng=np.random.default_rng(1))
    merged.extend(stacked_experience(cfg4, layout, 51, first_marker=9 * RACE))
    append_saved_buffer(merged, read_buffer_file(path))
    assert len(merged) == 50 + len(buffer)
    check_stacks(merged, layout)

    # a file of the format before frames were stored once: one whole stack a state
    exp = buffer.storage.to_experience()
    storage = {key: value for key, value in saved["storage"].items() if key not in ("frames_per_state", "frame_offset", "state_offset")}
    storage["content"] = {name: torch.from_numpy(getattr(exp, name)) for name in exp.STATE_FIELDS + exp.TRANSITION_FIELDS}
    older = {**saved, "format": "trackmania_rl.transition_replay_buffer/1", "storage": storage}
    torch.save(older, tmp_path / "older.pt")
    loaded = make_buffer(cfg4, layout, 300, rng=np.random.default_rng(1))
    load_buffer(loaded, tmp_path / "older.pt")
    assert loaded.storage.frames_written < 2 * loaded.storage.states_written  # stored once again
    check_stacks(loaded, layout)
    assert len(loaded) == len(buffer)


def test_a_saved_stack_pointing_outside_the_frames_is_refused(cfg4, layout, tmp_path):
    from trackmania_rl.replay.storage import InvalidBufferFile

    buffer = make_buffer(cfg4, layout, 300, rng=np.random.default_rng(0))
    buffer.extend(stacked_experience(cfg4, layout, 101))
    saved = buffer.state_dict()
    saved["storage"]["content"]["frame_index"] = saved["storage"]["content"]["frame_index"].clone()
    saved["storage"]["content"]["frame_index"][0] = 1  # its stack would start before the first frame
    torch.save(saved, tmp_path / "buffer.pt")
    with pytest.raises(InvalidBufferFile, match="`frame_index` points outside"):
        load_buffer(make_buffer(cfg4, layout, 300), tmp_path / "buffer.pt")
