"""Small configs and synthetic rollouts for the tests: tiny networks, short races, config files for real trainers."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trackmania_rl.config.loader import CONFIG_DIR, default_config
from trackmania_rl.games.car_racing import floats as car_floats
from trackmania_rl.games.car_racing.floats import make_float_layout

MARKER = car_floats.DISTANCE_TO_FINISH  # a float segment used to tag states with their global step number

TINY_NETWORK = dict(
    H_downsized=16,
    W_downsized=16,
    conv_layers=[(4, 4, 2), (8, 3, 2)],
    float_hidden_dim=16,
    dense_hidden_dimension=32,
    iqn_embedding_dimension=8,
    iqn_n=8,
    iqn_k=8,
    batch_size=32,
)


# appended to config_files/config.py: a real trainer (scripts/train.py) on a tiny network and short races
TINY_TRAINING = """
# --- tiny settings for tests of real trainers ---
memory_size_schedule = [(0, (20_000, 300))]
batch_size = 32
number_times_single_memory_is_used_before_discard = 2
cutoff_rollout_if_race_not_finished_within_duration_ms = 8_000
conv_layers = [(8, 4, 2), (8, 4, 2)]
dense_hidden_dimension = 32
float_hidden_dim = 32
iqn_embedding_dimension = 16
send_shared_network_every_n_batches = 2
update_inference_network_every_n_actions = 10
save_frequency_s = {save_frequency_s}
"""

# appended to config_files/config.py: a real collector process playing 1.6 s races with a small network
SHORT_RACES = """
cutoff_rollout_if_race_not_finished_within_duration_ms = 1_600
conv_layers = [(8, 4, 2), (8, 4, 2)]
dense_hidden_dimension = 32
float_hidden_dim = 32
iqn_embedding_dimension = 16
"""


# the meta of a stored exploration race on a training track, as a local collector sends it
RACE_META = {
    "collector": 0,
    "map_name": "train",
    "seed": 1,
    "map_status": "trained",
    "is_explo": True,
    "fill_buffer": True,
    "rollout_duration_s": 1.0,
    "source": "local",
}


def write_config(folder: Path, overrides: str, name: str = "config.py") -> Path:
    """folder/name: the repository's config with `overrides` appended (later settings win)."""
    path = Path(folder) / name
    path.write_text((CONFIG_DIR / "config.py").read_text() + overrides)
    return path


def write_tiny_config(folder: Path, save_frequency_s: float = 1_000) -> Path:
    return write_config(folder, TINY_TRAINING.format(save_frequency_s=save_frequency_s))


def tiny_config(**overrides):
    return default_config(**{**TINY_NETWORK, **overrides})


def layout_for(cfg):
    return make_float_layout(cfg)


def make_rollout(
    cfg,
    layout,
    n_states: int,
    finished: bool,
    *,
    rng: np.random.Generator | None = None,
    first_marker: int = 0,
    progress=None,
    greedy=None,
    actions=None,
    race_time=None,
    zone_center=None,
):
    """A rollout_results dict with F = n_states; state k carries marker first_marker + k (float segment MARKER and
    frame pixels = marker % 256), and one new road tile per step. A = F - 1 when finished, else F."""
    rng = rng if rng is not None else np.random.default_rng(0)
    n_actions = n_states - 1 if finished else n_states
    frames, floats = [], []
    marker_slice = layout.slice(MARKER)
    for k in range(n_states):
        marker = first_marker + k
        frames.append(np.full((1, cfg.H_downsized, cfg.W_downsized), marker % 256, dtype=np.uint8))
        f = np.zeros(layout.dim, dtype=np.float32)
        f[marker_slice.start] = marker
        if zone_center is not None:
            f[layout.slice(car_floats.ZONE_CENTERS_AHEAD)][:2] = zone_center[k]
        floats.append(f)
    rollout = {
        "frames": frames,
        "state_float": floats,
        "meters_advanced_along_centerline": list(np.arange(n_states, dtype=float) * 2.0 if progress is None else progress),
        "current_zone_idx": list(range(n_states)),
        "car_gear_and_wheels": [np.zeros(4, np.float32)] * n_states,
        "actions": list(rng.integers(0, len(cfg.inputs), n_actions) if actions is None else actions),
        "action_was_greedy": [True] * n_actions if greedy is None else list(greedy),
        "q_values": [np.zeros(len(cfg.inputs), np.float32)] * n_actions,
        "input_w": [True] * n_actions,
        "policy_version": [0] * n_actions,
        "furthest_zone_idx": n_states - 1,
        "road_tiles_touched": list(range(n_states)),  # a new tile per step
        "road_tiles_missed": [0] * n_states,
    }
    if finished:
        rollout["race_time"] = race_time if race_time is not None else (n_states - 2) * cfg.ms_per_action + cfg.ms_per_action // 2
    return rollout


def markers(layout, state_float) -> np.ndarray:
    return np.asarray(state_float)[..., layout.slice(MARKER).start].astype(np.int64)
