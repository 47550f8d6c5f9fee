"""Zone logic (DESIGN §3.4) on small hand-made centerlines."""

import numpy as np
import pytest

from trackmania_rl.games.zones import (
    CUTOFF_NO_PROGRESS,
    CUTOFF_OVERALL,
    ZoneGeometry,
    ZoneTracker,
    extrapolate,
    make_zone_centers,
    resample_polyline,
)

N_BEFORE, N_AFTER = 3, 5


def l_shaped_geometry():
    """(0,0) -> (10,0) -> (10,10): 20 m, one zone center per metre, the finish at (10, 10)."""
    centers = make_zone_centers(np.array([[0.0, 0.0], [10.0, 0.0], [10.0, 10.0]]), 1.0, N_BEFORE, N_AFTER)
    return ZoneGeometry(centers, N_BEFORE, N_AFTER)


def test_resample_keeps_ends_and_spaces_points_equally_along_the_line():
    line = np.array([[0.0, 0.0], [10.0, 0.0], [10.0, 5.0]])  # 15 m
    points = resample_polyline(line, 4.0)  # round(15 / 4) = 4 intervals of 3.75 m
    assert len(points) == 5
    np.testing.assert_array_equal(points[0], line[0])
    np.testing.assert_array_equal(points[-1], line[-1])
    np.testing.assert_allclose(points[1], [3.75, 0.0])
    np.testing.assert_allclose(points[3], [10.0, 1.25])  # 11.25 m along: round the corner
    # repeated points are ignored, a single point is refused
    np.testing.assert_allclose(resample_polyline(np.array([[0.0, 0], [0, 0], [2, 0]]), 1.0), [[0, 0], [1, 0], [2, 0]])
    with pytest.raises(ValueError):
        resample_polyline(np.array([[1.0, 1.0], [1.0, 1.0]]), 1.0)


def test_extrapolation_continues_the_end_segments():
    points = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 2.0]])
    out = extrapolate(points, 2, 3)
    np.testing.assert_allclose(out[:2], [[-2.0, 0.0], [-1.0, 0.0]])
    np.testing.assert_allclose(out[2:5], points)
    np.testing.assert_allclose(out[5:], [[1.0, 4.0], [1.0, 6.0], [1.0, 8.0]])


def test_geometry_indices_and_distances():
    g = l_shaped_geometry()
    assert g.n_zones == N_BEFORE + 21 + N_AFTER
    assert g.start_zone_idx == N_BEFORE
    assert g.finish_zone_idx == g.n_zones - N_AFTER and g.finish_point_idx == g.finish_zone_idx - 1
    np.testing.assert_allclose(g.centers[g.start_zone_idx], [0, 0])
    np.testing.assert_allclose(g.centers[g.finish_point_idx], [10, 10])
    # the transitions polyline cuts the corner by a little: the lap is just under 20 m
    assert 19.5 < g.lap_length() < 20.0
    # progress of the start: half a zone after transition 0 plus the extrapolated zones before it
    assert g.start_distance == pytest.approx(N_BEFORE - 0.5)
    with pytest.raises(ValueError):
        ZoneGeometry(g.centers[: N_BEFORE + N_AFTER + 1], N_BEFORE, N_AFTER)
    with pytest.raises(ValueError):
        ZoneGeometry(np.zeros((40, 4)), N_BEFORE, N_AFTER)


def test_tracker_advances_and_steps_back():
    g = l_shaped_geometry()
    tracker = ZoneTracker(g, max_distance_to_zone_center=5.0)
    s = g.start_zone_idx
    assert tracker.current_zone_idx == s and tracker.progress == pytest.approx(g.start_distance)
    progress = [tracker.update((x, 0.1), 0) for x in (0.4, 0.6, 1.4, 2.6)]
    assert [tracker.current_zone_idx] == [s + 3]  # 2.6 is closest to center 3 m along
    assert np.all(np.diff(progress) > 0)
    assert progress[-1] == pytest.approx(g.start_distance + 2.6)
    # several zones in one update
    tracker.update((7.2, -0.5), 0)
    assert tracker.current_zone_idx == s + 7
    # stepping back
    tracker.update((4.9, 0.0), 0)
    assert tracker.current_zone_idx == s + 5
    assert tracker.furthest_zone_idx == s + 7
    # a position farther than the radius from every neighbour does not move the zone
    tracker.update((5.0, 8.0), 0)
    assert tracker.current_zone_idx == s + 5
    # round the corner and up the second leg
    tracker.update((9.0, 0.0), 0)
    tracker.update((10.2, 3.0), 0)
    assert tracker.current_zone_idx == s + 13
    assert tracker.progress == pytest.approx(g.start_distance + 13, abs=0.3)


def test_tracker_ties_go_forward():
    g = l_shaped_geometry()
    tracker = ZoneTracker(g, max_distance_to_zone_center=3.0)
    tracker.update((0.5, 0.0), 0)  # exactly between the start center and the next one
    assert tracker.current_zone_idx == g.start_zone_idx + 1


def test_finish_is_crossed_at_the_finish_point_and_never_passed_by_driving():
    g = l_shaped_geometry()
    tracker = ZoneTracker(g, max_distance_to_zone_center=3.0)
    for x in np.arange(0.0, 10.0, 0.5):
        tracker.update((x, 0.0), 0)
    for y in np.arange(0.0, 9.9, 0.5):
        tracker.update((10.0, y), 0)
    assert not tracker.finished
    tracker.update((10.0, 9.95), 0)
    assert tracker.current_zone_idx == g.finish_point_idx and not tracker.finished
    tracker.update((10.0, 10.05), 0)
    assert tracker.finished and tracker.progress >= g.finish_distance
    tracker.update((10.0, 13.0), 0)  # beyond the finish: zone index stays at the finish point
    assert tracker.current_zone_idx == g.finish_point_idx
    assert g.distance_to_finish(g.finish_distance) == 0


def test_no_progress_cutoff_counts_from_the_last_new_furthest_zone():
    g = l_shaped_geometry()
    tracker = ZoneTracker(g, max_distance_to_zone_center=3.0)
    overall, no_progress = 10_000, 2_000
    assert tracker.cutoff_reason(0, overall, no_progress) is None
    assert tracker.cutoff_reason(1_980, overall, no_progress) is None
    assert tracker.cutoff_reason(2_000, overall, no_progress) == CUTOFF_NO_PROGRESS
    tracker.update((2.0, 0.0), 1_500)  # new furthest zone at 1.5 s
    assert tracker.last_progress_time_ms == 1_500
    assert tracker.cutoff_reason(3_480, overall, no_progress) is None
    # going back and forth over zones already reached is no progress
    tracker.update((0.0, 0.0), 2_000)
    tracker.update((2.0, 0.0), 3_000)
    assert tracker.last_progress_time_ms == 1_500
    assert tracker.cutoff_reason(3_500, overall, no_progress) == CUTOFF_NO_PROGRESS


def test_overall_cutoff():
    g = l_shaped_geometry()
    tracker = ZoneTracker(g, max_distance_to_zone_center=3.0)
    for t, x in zip(range(0, 10_000, 100), np.linspace(0, 9, 100), strict=True):
        tracker.update((x, 0.0), t)
        assert tracker.cutoff_reason(t, 5_000, 2_000) == (CUTOFF_OVERALL if t >= 5_000 else None)
