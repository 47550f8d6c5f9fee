"""The start-up check of the replay's memory against the machine's: real buffers' sizes, the verdict's arithmetic."""

import numpy as np

from trackmania_rl.config.loader import CONFIG_DIR, frame_shape, load_config
from trackmania_rl.games import float_layout_for
from trackmania_rl.replay.buffers import make_buffers
from trackmania_rl.replay.memory_check import REPLAY_SHARE, machine_memory_bytes, replay_memory_warning


def test_the_machine_reports_its_memory():
    total = machine_memory_bytes()
    assert total is not None and total > 2**28  # more than 256 MiB: a machine that runs these tests


def test_the_verdict_scales_the_buffers_to_the_largest_capacity_against_a_share_of_the_machine():
    cfg = load_config(CONFIG_DIR / "config.py")
    layout = float_layout_for(cfg)
    buffer, buffer_test = make_buffers(cfg, layout, 1_000, rng=np.random.default_rng(0))
    ring = buffer.nbytes() + buffer_test.nbytes()
    assert ring >= 1_000 * int(np.prod(frame_shape(cfg)))  # the frames of every transition at least
    per_transition = ring / 1_000
    largest = 50_000
    just_fits = int(per_transition * largest / REPLAY_SHARE) + 1
    assert replay_memory_warning(ring, 1_000, largest, just_fits) is None
    warning = replay_memory_warning(ring, 1_000, largest, just_fits - 2)
    assert warning is not None and "50,000 transitions" in warning
    assert replay_memory_warning(ring, 1_000, 500, None) is None  # the OS does not say: nothing to warn of
    assert (
        replay_memory_warning(ring, 1_000, 500, int(ring / REPLAY_SHARE) - 10) is not None
    )  # a shrinking schedule: the current size counts
