"""The replay storage before and after each frame was stored once: bytes a transition, storing a race, one batch's get.

Enduro's states (4 stacked 84 x 84 grey frames), 20,000 transitions in races of 1,000 states; one torch thread.
`python bench_storage.py <repository>`: the storage of the code in that folder (a copy of a commit).
"""

import sys
import time

import numpy as np
import torch

sys.path.insert(0, sys.argv[1])
from trackmania_rl.replay.experience import Experience  # noqa: E402
from trackmania_rl.replay.storage import TransitionStorage  # noqa: E402

torch.set_num_threads(1)
K, H, N, RACE = 4, 84, 20_000, 1_000
once = "frames_per_state" in TransitionStorage.__init__.__code__.co_varnames
storage = TransitionStorage(N, (K, H, H), 20, 3, **({"frames_per_state": K} if once else {}))
rng = np.random.default_rng(0)
single = rng.integers(0, 255, (N, 1, H, H), dtype=np.uint8)
append_ms = []
for r in range(N // RACE):
    idx = np.arange(r * RACE, (r + 1) * RACE)
    frames = np.concatenate([single[np.maximum(idx - K + 1 + j, r * RACE)] for j in range(K)], axis=1)
    t = RACE - 1
    exp = Experience(
        frames=frames,
        state_float=np.zeros((RACE, 20), np.float32),
        potential=np.zeros(RACE, np.float32),
        state_index=np.arange(t),
        next_state_index=np.arange(t) + 1,
        action=np.zeros(t, np.int64),
        n_steps=np.ones(t, np.int64),
        rewards=np.zeros((t, 3), np.float32),
        gammas=np.full((t, 3), 0.9, np.float32),
        terminal_actions=np.full(t, np.inf, np.float32),
    )
    start = time.perf_counter()
    storage.append(exp)
    append_ms.append(1000 * (time.perf_counter() - start))
get_ms = []
for _ in range(1_000):
    index = torch.from_numpy(rng.integers(0, len(storage), 32))
    start = time.perf_counter()
    storage.get(index)
    get_ms.append(1000 * (time.perf_counter() - start))
print(
    f"frames stored once: {once}; bytes a transition {storage.nbytes() / N:.0f}; storing a race of {RACE} states: median "
    f"{np.median(append_ms):.2f} ms; get(32): median {np.median(get_ms):.4f} ms"
)
