"""Which road tiles count as missed, on a real CarRacing track: a tile is judged once the car's progress is the lag
past its far end, in the order the lap drives them (tile 1 first, tile 0, which ends on the start line, last)."""

import numpy as np
import pytest

from trackmania_rl.games.car_racing.env import CarRacingEnv, track_centerline
from trackmania_rl.games.car_racing.missed_tiles import MissedTileCounter

START = 70.0  # progress at the start line, as the zone tracker measures it
LAG = 10.0


@pytest.fixture(scope="module")
def track():
    env = CarRacingEnv()
    env.reset(seed=3)
    yield env
    env.close()


def test_a_tile_is_missed_once_the_car_is_the_lag_past_its_far_end_untouched_and_tile_0_comes_last(track):
    road, centerline = track.road, track_centerline(track)
    n = len(road)
    assert len(centerline) == n + 1 and [tile.idx for tile in road] == list(range(n))
    far_end = START + np.cumsum(np.linalg.norm(np.diff(centerline, axis=0), axis=1))  # of the k-th tile: tile (k + 1) % n
    untouched = {0, 5, 6, n - 1}
    for tile in road:
        tile.road_visited = tile.idx not in untouched
    counter = MissedTileCounter(centerline, START, LAG)
    assert counter.update(far_end[3] + LAG, road) == 0  # tiles 1-4 touched
    assert counter.update(far_end[4] + LAG - 0.01, road) == 0  # tile 5: not yet the lag past its end
    assert counter.update(far_end[4] + LAG, road) == 1
    assert counter.update(far_end[0], road) == 1  # driving back judges nothing again
    assert counter.update(far_end[5] + LAG, road) == 2  # tile 6
    assert counter.update(far_end[n - 2] + LAG, road) == 3  # tile n - 1, the last before the line's tile
    road[0].road_visited = True  # tile 0 touched on the line
    assert counter.judge_all(road) == 3
    road[0].road_visited = False
    assert MissedTileCounter(centerline, START, LAG).judge_all(road) == 4  # untouched at the finish: missed
