"""The network's frame on SuperTuxKart: the road around the kart seen from above, drawn from the driveline (never the
game's own 3-D picture, which needs a GPU to draw at any speed).

The kart sits at the middle of the frame's width, 3/4 of the way down, heading up; the frame is `view_m` metres wide.
Each driveline node is a quad of the road (driveline.py road_quads), filled with OpenCV (anti-aliased edges, quarter-
pixel corners) in a grey that says its height against the kart's: ROAD_GREY level with it, lighter above, darker below.
The quads nearest the kart's height are drawn last, so that a bridge over the kart's road or a road under it never
hides the road the kart is on. Off the road is black.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

ROAD_GREY = 150
GREY_PER_M_UP = 4.0  # a road 10 m above the kart is 40 grey levels lighter
GREY_RANGE = (70, 230)
HEIGHT_BAND_M = 30.0  # roads further above or below are left out
KART_ROW_FRACTION = 0.75
SUBPIXEL_BITS = 2


class RoadView:
    """Draws one track's road around a kart pose, at (height, width) pixels, `view_m` metres across."""

    def __init__(self, quads: np.ndarray, height: int, width: int, view_m: float):
        self.quads = np.asarray(quads, np.float64)
        self.centers = self.quads.mean(axis=1)
        self.height, self.width = int(height), int(width)
        self.px_per_m = self.width / float(view_m)
        self.kart_px = (self.width / 2, self.height * KART_ROW_FRACTION)
        # a node whose center is further than this cannot touch the frame (its half-diagonal added)
        half_diagonal = np.max(np.linalg.norm(self.quads - self.centers[:, None], axis=2), axis=1)
        self._reach = math.hypot(self.width / 2, self.height * KART_ROW_FRACTION) / self.px_per_m + half_diagonal

    def pixels(self, points: np.ndarray, position, heading) -> np.ndarray:
        """(..., 2) (column, row) in the frame of world points (..., 3), for the kart at `position` heading `heading`
        (a horizontal unit vector)."""
        hx, hz = heading[0], heading[2]
        relative = np.asarray(points, np.float64) - np.asarray(position, np.float64)
        lateral = relative[..., 0] * hz - relative[..., 2] * hx
        forward = relative[..., 0] * hx + relative[..., 2] * hz
        return np.stack([self.kart_px[0] + lateral * self.px_per_m, self.kart_px[1] - forward * self.px_per_m], axis=-1)

    def draw(self, position, heading) -> np.ndarray:
        """The (height, width) uint8 grey frame."""
        frame = np.zeros((self.height, self.width), np.uint8)
        up = self.centers[:, 1] - position[1]
        near = np.flatnonzero(
            (np.abs(up) < HEIGHT_BAND_M)
            & (np.abs(self.centers[:, 0] - position[0]) < self._reach)
            & (np.abs(self.centers[:, 2] - position[2]) < self._reach)
        )
        if len(near) == 0:
            return frame
        near = near[np.argsort(-np.abs(up[near]), kind="stable")]  # the kart's own level last
        corners = np.rint(self.pixels(self.quads[near], position, heading) * (1 << SUBPIXEL_BITS)).astype(np.int32)
        greys = np.clip(ROAD_GREY + GREY_PER_M_UP * up[near], *GREY_RANGE).astype(int).tolist()
        for quad, grey in zip(corners, greys, strict=True):
            cv2.fillConvexPoly(frame, quad, grey, cv2.LINE_AA, SUBPIXEL_BITS)
        return frame


def heading_of(location, front) -> tuple[float, float, float]:
    """The kart's horizontal heading (a unit vector) from its location and the point ahead of it."""
    dx, dz = front[0] - location[0], front[2] - location[2]
    norm = math.hypot(dx, dz)
    return (dx / norm, 0.0, dz / norm) if norm > 1e-9 else (0.0, 0.0, 1.0)
