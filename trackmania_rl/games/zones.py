"""Zones (virtual checkpoints) along a track centerline: DESIGN §3.4.

Game-agnostic and pure numpy/math: points may be 2-D (CarRacing) or 3-D (Trackmania).

Vocabulary, for a zone-center array of M points:
- zone i is the region around `centers[i]`, bounded by the transitions i-1 and i, where transition k is
  the midpoint of centers k and k+1;
- `n_before` centers are extrapolated before the start, so the start is center `n_before`;
- `n_after` centers are extrapolated after the finish, so the finish point is center `M - n_after - 1`
  (the last real centerline point) and `M - n_after` is the first zone past the finish. Driving can
  reach the finish point's zone but never further: only crossing the finish line "enters" the zone past
  it (like Linesight, where that zone is assigned by the game's finish event);
- progress (`meters_advanced_along_centerline`) in zone i is the projection of the position on segment
  i-1 (transition i-1 -> transition i), clipped to the segment, plus the length of the transitions
  polyline before it. Its origin is transition 0, a little before the first extrapolated center.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

CUTOFF_NO_PROGRESS = "no_progress"
CUTOFF_OVERALL = "overall"


def polyline_length(points: np.ndarray) -> float:
    return float(np.sum(np.linalg.norm(np.diff(points, axis=0), axis=1)))


def resample_polyline(points: np.ndarray, spacing: float) -> np.ndarray:
    """Points at equal arc-length intervals along the polyline, first and last points included.

    The interval is the polyline length divided by round(length / spacing), i.e. as close to `spacing`
    as a whole number of intervals allows, so the last point (the finish) is exactly a sample.
    """
    points = np.asarray(points, dtype=np.float64)
    if points.ndim != 2 or len(points) < 2:
        raise ValueError(f"a centerline needs at least 2 points of shape (dims,), got an array of shape {points.shape}")
    if not spacing > 0:
        raise ValueError(f"the resampling spacing must be positive, got {spacing}")
    step_lengths = np.linalg.norm(np.diff(points, axis=0), axis=1)
    keep = np.concatenate([[True], step_lengths > 0])  # repeated points have no direction: drop them
    points, step_lengths = points[keep], step_lengths[step_lengths > 0]
    if len(points) < 2:
        raise ValueError("a centerline needs at least 2 distinct points")
    arc = np.concatenate([[0.0], np.cumsum(step_lengths)])
    n_intervals = max(1, int(round(arc[-1] / spacing)))
    targets = np.linspace(0.0, arc[-1], n_intervals + 1)
    resampled = np.stack([np.interp(targets, arc, points[:, d]) for d in range(points.shape[1])], axis=1)
    resampled[0], resampled[-1] = points[0], points[-1]  # exact, not interpolated
    return resampled


def extrapolate(points: np.ndarray, n_before: int, n_after: int) -> np.ndarray:
    """Prepend `n_before` points continuing the first segment backwards and append `n_after` continuing
    the last one forwards, each one interval apart (the interval of that end segment)."""
    points = np.asarray(points, dtype=np.float64)
    first_step = points[0] - points[1]
    last_step = points[-1] - points[-2]
    before = points[0] + np.arange(n_before, 0, -1)[:, None] * first_step  # farthest first: order kept
    after = points[-1] + np.arange(1, n_after + 1)[:, None] * last_step
    return np.concatenate([before, points, after])


def make_zone_centers(centerline: np.ndarray, spacing: float, n_before: int, n_after: int) -> np.ndarray:
    """The zone centers of a centerline (start to finish): resampled every ~`spacing`, then extrapolated."""
    return extrapolate(resample_polyline(centerline, spacing), n_before, n_after)


class ZoneGeometry:
    """Precomputed segment information of one map's zone centers (Linesight's
    `precalculate_virtual_checkpoints_information`), plus where the start and finish are."""

    def __init__(self, zone_centers: np.ndarray, n_before: int, n_after: int):
        centers = np.asarray(zone_centers, dtype=np.float64)
        if centers.ndim != 2 or centers.shape[1] not in (2, 3):
            raise ValueError(f"zone centers must be an (M, 2) or (M, 3) array, got shape {centers.shape}")
        if not np.all(np.isfinite(centers)):
            raise ValueError("zone centers contain NaN or infinite values")
        # at least one transition before the start and the finish point strictly after the start
        if n_before < 1 or n_after < 1 or len(centers) < n_before + n_after + 2:
            raise ValueError(
                f"{len(centers)} zone centers cannot hold {n_before} extrapolated before the start, "
                f"{n_after} after the finish and a centerline of 2 points or more"
            )
        self.centers = centers
        self.n_zones = len(centers)
        self.start_zone_idx = n_before
        self.finish_zone_idx = self.n_zones - n_after  # the first zone past the finish
        self.finish_point_idx = self.finish_zone_idx - 1  # the furthest zone reachable by driving
        self.transitions = 0.5 * (centers[:-1] + centers[1:])  # (M-1, dims)
        segments = np.diff(self.transitions, axis=0)  # segment k: transition k -> k+1, (M-2, dims)
        self.segment_lengths = np.linalg.norm(segments, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            self.segment_directions = np.nan_to_num(segments / self.segment_lengths[:, None])
        self.cumulative_length = np.concatenate([[0.0], np.cumsum(self.segment_lengths)])  # at each transition
        # Plain-Python copies: the per-physics-step tracking and the floats read single points, where math on
        # tuples is several times faster than numpy on tiny arrays.
        self.center_tuples = [tuple(p) for p in centers.tolist()]
        self._transitions = [tuple(p) for p in self.transitions.tolist()]
        self._directions = [tuple(p) for p in self.segment_directions.tolist()]
        self._lengths = self.segment_lengths.tolist()
        self._cumulative = self.cumulative_length.tolist()
        self.start_distance = self.progress(self.start_zone_idx, self.center_tuples[self.start_zone_idx])
        # Crossing the finish = reaching the progress of the finish point itself: the line through the
        # finish point perpendicular to the track there.
        self.finish_distance = self.progress(self.finish_point_idx, self.center_tuples[self.finish_point_idx])

    def progress(self, zone_idx: int, position: Sequence[float]) -> float:
        """`meters_advanced_along_centerline` of a position known to be in zone `zone_idx` (>= 1)."""
        k = zone_idx - 1
        origin, direction = self._transitions[k], self._directions[k]
        along = sum((p - o) * d for p, o, d in zip(position, origin, direction, strict=False))
        return self._cumulative[k] + min(max(along, 0.0), self._lengths[k])

    def distance_to_finish(self, progress: float) -> float:
        return self.finish_distance - progress

    def lap_length(self) -> float:
        return self.finish_distance - self.start_distance

    def distance(self, zone_idx: int, position: Sequence[float]) -> float:
        return math.dist(self.center_tuples[zone_idx], position)


class ZoneTracker:
    """Follows one car through the zones of one race: current zone, furthest zone, progress, cutoffs.

    `update(position, time_ms)` moves the current zone forward while the next center is at least as
    close as the current one and within `max_distance_to_zone_center`, then backward the same way
    (strictly closer). Several zones can be crossed in one update. The finish is crossed when the car
    is in the finish point's zone and its progress reaches `geometry.finish_distance`.
    """

    def __init__(self, geometry: ZoneGeometry, max_distance_to_zone_center: float, start_time_ms: int = 0):
        if not max_distance_to_zone_center > 0:
            raise ValueError(f"max_distance_to_zone_center must be positive, got {max_distance_to_zone_center}")
        self.geometry = geometry
        self.max_distance = float(max_distance_to_zone_center)
        self.current_zone_idx = geometry.start_zone_idx
        self.furthest_zone_idx = geometry.start_zone_idx
        self.last_progress_time_ms = start_time_ms
        self.progress = geometry.start_distance
        self.finished = False

    def update(self, position: Sequence[float], time_ms: int) -> float:
        """Move to the zone the car is in at `time_ms`; returns the progress there."""
        g = self.geometry
        centers, radius = g.center_tuples, self.max_distance
        i = self.current_zone_idx
        d_cur = math.dist(centers[i], position)
        while i < g.finish_point_idx:
            d_next = math.dist(centers[i + 1], position)
            if d_next > d_cur or d_next > radius:
                break
            i, d_cur = i + 1, d_next
        while i > 1:  # zone 0 has no transition before it
            d_prev = math.dist(centers[i - 1], position)
            if d_prev >= d_cur or d_prev > radius:
                break
            i, d_cur = i - 1, d_prev
        self.current_zone_idx = i
        if i > self.furthest_zone_idx:
            self.furthest_zone_idx = i
            self.last_progress_time_ms = time_ms
        self.progress = g.progress(i, position)
        if i == g.finish_point_idx and self.progress >= g.finish_distance:
            self.finished = True
        return self.progress

    def cutoff_reason(self, time_ms: int, overall_cutoff_ms: int, no_progress_cutoff_ms: int) -> str | None:
        """Why the race must stop at `time_ms` (CUTOFF_OVERALL / CUTOFF_NO_PROGRESS), or None.

        A race may last `overall_cutoff_ms`; it may go `no_progress_cutoff_ms` without reaching a new
        furthest zone. Time is checked at decision points, before the next action is chosen.
        """
        if time_ms >= overall_cutoff_ms:
            return CUTOFF_OVERALL
        if time_ms - self.last_progress_time_ms >= no_progress_cutoff_ms:
            return CUTOFF_NO_PROGRESS
        return None
