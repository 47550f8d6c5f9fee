"""The road tiles a car has driven past without touching them in one lap of CarRacing.

By CarRacing-v3's own rules an episode ends only once every road tile has been touched: a lap that cuts a corner
over the grass and misses a tile drives on to the 20 s time limit, paying 0.1 a step. A tile counts as missed once
the car's progress along the centerline has gone `lag_m` past the tile's far end and CarRacing has not marked it
visited; the lag leaves time for the wheels, which reach a little ahead and to the side, to touch it. Every tile
still unvisited when the lap ends at the finish line counts then (`judge_all`).
"""

from __future__ import annotations

import numpy as np

# Metres past a tile's far end, along the centerline, before it is judged: a car on the inside of a tight corner is
# projected onto the centerline a few metres ahead of the tiles under its wheels (the road is ~13 m wide).
JUDGE_LAG_M = 10.0


class MissedTileCounter:
    """Counts, for one lap, the tiles the car's progress has passed by `lag_m` while unvisited.

    `centerline`: the lap's N track points from the start, closed back onto the start, (N + 1, 2)
    (env.track_centerline). CarRacing's tile i spans track points i - 1 and i: tile 1 is the first ahead of the
    start line, tile 0 the last one before it, ending on the line.
    `start_distance`: the progress at the start line in the zone tracker's measure (ZoneGeometry.start_distance)."""

    def __init__(self, centerline: np.ndarray, start_distance: float, lag_m: float = JUDGE_LAG_M):
        segment = np.linalg.norm(np.diff(np.asarray(centerline, dtype=np.float64), axis=0), axis=1)
        # the k-th tile along the lap is tile (k + 1) % N; its far end lies segment[0] + ... + segment[k] from the start
        self._judge_at = (start_distance + np.cumsum(segment) + lag_m).tolist()
        self._next = 0  # the tiles before the k-th along the lap have been judged
        self.missed = 0

    def update(self, progress: float, road) -> int:
        """Judge the tiles `progress` has passed by the lag (`road`: CarRacing's tiles by index); the count."""
        judge_at, k, n = self._judge_at, self._next, len(self._judge_at)
        while k < n and progress >= judge_at[k]:
            if not road[(k + 1) % n].road_visited:
                self.missed += 1
            k += 1
        self._next = k
        return self.missed

    def judge_all(self, road) -> int:
        """The lap has ended: every tile not judged yet and unvisited is missed; the count."""
        return self.update(float("inf"), road)
