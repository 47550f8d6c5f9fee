"""CarRacing's state view drawn straight at the frame's size, in grey or colour (`frame_renderer = "fast"`).

CarRacing draws its view into a 1000 x 800 pygame window, polygon by polygon, and smoothscales it down: for a
64 x 64 frame 99.5 % of those pixels are averaged away, and drawing them was three quarters of an action's cost.
This draws the same scene from the same camera into a canvas SUPERSAMPLE times the frame's size each way, then
area-averages it down to the frame: the anti-aliasing that the window and its smoothscale give. One numpy transform
places every polygon of the track; OpenCV fills the visible ones, with sub-pixel vertices.

The scene, in CarRacing's drawing order and colours, as its "state_pixels" render has it:
- the playfield's background square (black beyond it), the grass squares, the road tiles and kerbs in `road_poly`
  order, each tile in its current colour (CarRacing recolours a tile in place when the car first touches it;
  `bind_track` makes each tile's colour a row of this renderer's array, so a recolouring is seen at once);
- the car: each wheel and its turning white stripe, then the hull's four parts.
CarRacing's state view draws no skid marks (it passes draw_particles=False for "state_pixels") and its HUD bar lies
below the frame's rows: neither is drawn, by either renderer, unless `hud` (config setting frame_hud) makes the frame
the whole window, HUD bar included (its indicators; not its score digits). Colours are drawn as the grey level they have in the
pygame frame (`grey_level`), which averaging commutes with, or with `colour` (config setting frame_colour) as the colour they
have there (`frame_rgb`): three channels, R, G, B.

Edges are placed as pygame places them, on average. pygame truncates a vertex to whole window pixels and fills the
pixels from the first to the last column a scanline touches, both included, and the road's polygons get an
anti-aliased outline too: a polygon covers a fraction of a window pixel more on every side than its exact shape
(GROW_ROAD_PX, GROW_CAR_PX). OpenCV fills the canvas pixels whose rounded centres lie within the shape: about half a
canvas pixel more on every side. Each polygon is grown or shrunk (`grown`) by the difference. What is left,
and what it does to a trained model's choices, is measured by `python scripts/benchmark.py game` (frame_fidelity.py).
"""

from __future__ import annotations

import math

import cv2
import numpy as np
from gymnasium.envs.box2d import car_dynamics
from gymnasium.envs.box2d import car_racing as gym_car_racing

SUPERSAMPLE = 4  # canvas pixels per frame pixel, each way (2: 2x the grey difference; 6: 0.8x, and slower)
SHIFT = 4  # fractional bits of the vertices handed to OpenCV: 1/16 of a canvas pixel
_ONE = 1 << SHIFT
# pygame's smoothscale darkens every channel by 2 levels (0 stays 0): its fixed-point rounding. Measured on uniform
# surfaces of 18 levels from 0 to 255 (docs/runs/2026-11-28_fast_view_calibration, calibrate.py).
SMOOTHSCALE_LOSS = 2
# Window pixels pygame's drawing adds around a polygon on average, chosen by measurement on the frames of real races
# (the same record: frame_fidelity.py's mean grey difference over the shipped model's races on 6 tracks, and around
# the car under random controls: road 0.5 / 0.75 / 1.0 / 1.25 -> 0.228 / 0.208 / 0.216 / 0.243; car 0 / 0.25 / 0.5 /
# 0.75 -> 0.209 / 0.208 / 0.213 / 0.216, around the car 1.65 / 1.44 / 1.79 / 2.17).
GROW_ROAD_PX = 0.75
GROW_CAR_PX = 0.25
# pygame.draw.polygon (the HUD's) fills from the first to the last window pixel its truncated vertices touch, both
# included: half a pixel more than the exact shape on each side, on average
GROW_HUD_PX = 0.5


def camera_zoom(t: float) -> float:
    """CarRacing's camera zoom (window pixels per world unit) at game time `t` (s): its `_render`'s zoom-in over the
    first second. Both renderers take it from here, so that their cameras cannot part."""
    return 0.1 * gym_car_racing.SCALE * max(1 - t, 0) + gym_car_racing.ZOOM * gym_car_racing.SCALE * min(t, 1)


def playfield_corners() -> list[tuple[float, float]]:
    """The playfield's background square, in CarRacing's vertex order."""
    half = gym_car_racing.PLAYFIELD
    return [(half, half), (half, -half), (-half, -half), (-half, half)]


def grass_squares() -> list[list[tuple[float, float]]]:
    """CarRacing's grass squares, in its drawing order: every other cell of a 40 x 40 grid, each computed with the same
    float operations as CarRacing's `_render_road` (so the same vertices, and the same pixels)."""
    size = gym_car_racing.GRASS_DIM
    return [
        [(size * i + size, size * j), (size * i, size * j), (size * i, size * j + size), (size * i + size, size * j + size)]
        for i in range(-20, 20, 2)
        for j in range(-20, 20, 2)
    ]


def frame_rgb(rgb) -> np.ndarray:
    """The colours ((N, 3) int, R G B) that regions of colour `rgb` (0-255 per channel, truncated as CarRacing
    truncates; one colour or an (N, 3) list) have in the pygame frame: smoothscale's loss on every channel."""
    rgb = np.asarray(rgb, dtype=np.float64).reshape(-1, 3).astype(np.int64)
    return np.clip(rgb - SMOOTHSCALE_LOSS, 0, 255)


def grey_level(rgb) -> np.ndarray:
    """The grey levels (int, one per colour) that regions of colour `rgb` (as `frame_rgb` takes them) have in the
    pygame frame: smoothscale's loss, then COLOR_RGB2GRAY."""
    darkened = frame_rgb(rgb).astype(np.uint8)
    if not len(darkened):
        return np.zeros(0, dtype=np.int64)
    return cv2.cvtColor(darkened[None], cv2.COLOR_RGB2GRAY)[0].astype(np.int64)


# the HUD's colours as CarRacing's `_render_indicators` draws them: the bar, the speed, the front and the rear wheels'
# spin (ABS), the steering, the gyro
_HUD_RGB = {
    "bar": (0, 0, 0),
    "speed": (255, 255, 255),
    "abs_front": (0, 0, 255),
    "abs_rear": (51, 0, 255),
    "steering": (0, 255, 0),
    "gyro": (255, 0, 0),
}


def hud_rectangles(env: gym_car_racing.CarRacing) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """CarRacing's HUD bar as its `_render_indicators` draws it into the 1000 x 800 window (rows counted down from the
    top, after the view's flip), in its drawing order: (R, 4, 2) rectangles in window pixels and each one's colour as
    CarRacing draws it (R, G, B). Each indicator is left out when its value is within 1e-4 of 0, as CarRacing leaves it
    out."""
    w, h = gym_car_racing.WINDOW_W, gym_car_racing.WINDOW_H
    s, u = w / 40.0, h / 40.0
    rectangles = [[(w, h), (w, h - 5 * u), (0, h - 5 * u), (0, h)]]
    colours = [_HUD_RGB["bar"]]

    def vertical(place, value, scale, part):
        if abs(value) > 1e-4:
            top = h - (u + u * scale * value)
            rectangles.append([(place * s, top), ((place + 1) * s, top), ((place + 1) * s, h - u), (place * s, h - u)])
            colours.append(_HUD_RGB[part])

    def horizontal(place, value, scale, part):
        if abs(value) > 1e-4:
            end = (place + scale * value) * s
            rectangles.append([(place * s, h - 4 * u), (end, h - 4 * u), (end, h - 2 * u), (place * s, h - 2 * u)])
            colours.append(_HUD_RGB[part])

    car = env.car
    velocity = car.hull.linearVelocity
    vertical(5, math.sqrt(velocity[0] ** 2 + velocity[1] ** 2), 0.02, "speed")
    for index, part in enumerate(("abs_front", "abs_front", "abs_rear", "abs_rear")):  # the wheels' spin
        vertical(7 + index, car.wheels[index].omega, 0.01, part)
    horizontal(20, car.wheels[0].joint.angle, -10.0, "steering")
    horizontal(30, car.hull.angularVelocity, -0.8, "gyro")
    return np.array(rectangles, dtype=np.float64), colours


def grown(polygons: np.ndarray, half_x, half_y, orientation=None) -> np.ndarray:
    """Convex polygons (P, V, 2) grown by a half_x x half_y rectangle (negative: shrunk; numbers, or (P, 1) arrays), the
    Minkowski sum with its corners mitred: each edge moved out by the rectangle's reach along its normal, each vertex to
    where its two edges' moved lines meet. `orientation` (P, 1): +1 where the vertices turn counterclockwise (x right,
    y up), -1 where clockwise; computed when not given."""
    n_vertices = polygons.shape[1]
    following, preceding = (np.arange(n_vertices) + 1) % n_vertices, (np.arange(n_vertices) - 1) % n_vertices
    edges = polygons[:, following] - polygons  # edge i: vertex i -> i + 1
    if orientation is None:
        orientation = _orientation(polygons)
    scale = orientation / np.maximum(np.hypot(edges[..., 0], edges[..., 1]), 1e-12)
    nx, ny = edges[..., 1] * scale, -edges[..., 0] * scale  # outward unit normals
    reach = half_x * np.abs(nx) + half_y * np.abs(ny)
    # vertex i joins edge i - 1 and edge i: its offset v solves n_(i-1).v = reach_(i-1) and n_i.v = reach_i
    px, py, preach = nx[:, preceding], ny[:, preceding], reach[:, preceding]
    det = px * ny - py * nx
    straight = np.abs(det) < 0.1  # (nearly) straight on: the vertex moves along the normal
    inverse = 1.0 / np.where(straight, 1.0, det)
    offset = np.empty_like(polygons)
    offset[..., 0] = np.where(straight, nx * reach, (preach * ny - reach * py) * inverse)
    offset[..., 1] = np.where(straight, ny * reach, (px * reach - nx * preach) * inverse)
    return polygons + offset


def _orientation(polygons: np.ndarray) -> np.ndarray:
    """(P, 1): +1 where a polygon's vertices turn counterclockwise (x right, y up), -1 where clockwise, 0 if flat."""
    x, y = polygons[..., 0], polygons[..., 1]
    following = (np.arange(polygons.shape[1]) + 1) % polygons.shape[1]
    return np.sign((x * y[:, following] - x[:, following] * y).sum(axis=1))[:, None]


class FastFrameRenderer:
    """Draws the (1, height, width) uint8 grey frame of a CarRacing env's current state, or with `colour` its
    (3, height, width) colour frame (R, G, B).

    `render_h` is the height the pygame renderer draws the view at for this frame (env.frame_render_size): the frame
    is its top `height` rows, so the camera and the rows' scale are the pygame frame's. Call `bind_track(env)` after
    each reset (a new track, a new car) and `draw(env)` for each frame."""

    def __init__(self, height: int, width: int, render_h: int, supersample: int = SUPERSAMPLE, hud: bool = False, colour: bool = False):
        self.height, self.width, self.supersample = int(height), int(width), int(supersample)
        self.hud, self.colour = bool(hud), bool(colour)
        canvas_shape = (self.height * self.supersample, self.width * self.supersample)
        self.canvas = np.empty(canvas_shape + ((3,) if self.colour else ()), dtype=np.uint8)
        # window pixels -> canvas pixels (the window's rows are flipped: CarRacing flips its surface)
        self.scale_x = self.width * self.supersample / gym_car_racing.WINDOW_W
        self.scale_y = render_h * self.supersample / gym_car_racing.WINDOW_H
        self._grow_px = np.array([GROW_ROAD_PX, GROW_CAR_PX])
        self._hud_paints = {}  # the HUD's paint of each of its colours, computed at its first use

    # ------------------------------------------------------------------------------------------------ the track
    def bind_track(self, env: gym_car_racing.CarRacing) -> None:
        """Gather the track's polygons (world vertices, one array: the grass squares, then the road in `road_poly`
        order) and the car's parts; make each road tile's colour a row of `self.road_rgb`."""
        self.background = np.array([playfield_corners()], dtype=np.float64)
        self.background_paint = self._paints(env.bg_color)[0]
        self.grass_paint = self._paints(env.grass_color)[0]
        grass = grass_squares()
        self.n_grass = len(grass)
        road = [[(p[0], p[1]) for p in polygon] for polygon, _ in env.road_poly]
        self.polygons = np.array(grass + road, dtype=np.float64)  # (N, 4, 2): every polygon CarRacing draws has 4 vertices
        # the view flips the rows: in the canvas every polygon turns the other way round
        self.orientation = -_orientation(self.polygons)
        self.centres = self.polygons.mean(axis=1)
        self.radii = np.linalg.norm(self.polygons - self.centres[:, None], axis=2).max(axis=1)
        self.road_rgb = np.array([np.asarray(colour, dtype=np.float64) for _, colour in env.road_poly])
        self._paints_of = None  # the road_rgb the road's paints were computed from
        # a tile recolours itself in place (`tile.color[:] = road_color`, on any contact): point each tile's colour,
        # and its road_poly entry, at its row of road_rgb, so that both renderers see every recolouring as it happens
        tiles = {id(tile.color): tile for tile in env.road}
        for row, (polygon, colour) in enumerate(env.road_poly):
            tile = tiles.get(id(colour))
            if tile is not None:
                tile.color = self.road_rgb[row]
                env.road_poly[row] = (polygon, tile.color)
        self._bind_car(env.car)

    def _bind_car(self, car) -> None:
        """The car's parts as quadrilaterals in its drawing order, each wheel's stripe after the wheel: the fixtures'
        vertices in their body's frame as one array (each stripe's four come after them, made at each draw), each
        quad's vertex indices, and each quad's paint (its grey, or its colour) and, for a stripe, its wheel. A fixture of more than four
        vertices (the hull's middle part has eight; all are convex) is a fan of quads from its first vertex: grown
        and filled, their union is the part grown."""
        self.car_bodies = list(car.drawlist)  # car_dynamics draws the wheels, then the hull
        self.n_wheels = sum("phase" in body.__dict__ for body in self.car_bodies)
        n_fixture_vertices = sum(len(fixture.shape.vertices) for body in self.car_bodies for fixture in body.fixtures)
        stripe_paint = self._paints(car_dynamics.WHEEL_WHITE)[0]
        local, body_of_vertex, quads, order = [], [], [], []  # order: (paint, the wheel of a stripe or None) per quad
        for index, body in enumerate(self.car_bodies):
            paint = self._paints([c * 255 for c in body.color])[0]
            for fixture in body.fixtures:
                first, n = len(local), len(fixture.shape.vertices)
                for k in range(1, n - 1, 2):  # the fan: (0, 1, 2, 3), (0, 3, 4, 5), ...; a last triangle repeats a vertex
                    quads.append([first, first + k, first + k + 1, first + min(k + 2, n - 1)])
                    order.append((paint, None))
                local += list(fixture.shape.vertices)
                body_of_vertex += [index] * n
            if index < self.n_wheels:
                first = n_fixture_vertices + 4 * index
                quads.append(list(range(first, first + 4)))
                order.append((stripe_paint, index))
        self.car_local = np.array(local, dtype=np.float64)
        self.car_body_of_vertex = np.array(body_of_vertex + [wheel for wheel in range(self.n_wheels) for _ in range(4)])
        self.car_quads = np.array(quads)
        self.car_order = order
        self._car_stripe_places = [place for place, (_, stripe_of) in enumerate(order) if stripe_of is not None]
        self._car_fixture_places = [place for place, (_, stripe_of) in enumerate(order) if stripe_of is None]
        # the view flips the rows: in the canvas every polygon turns the other way round
        self.car_fixture_orientation = -_orientation(self.car_local[self.car_quads[self._car_fixture_places]])

    # ------------------------------------------------------------------------------------------------ a frame
    def draw(self, env: gym_car_racing.CarRacing) -> np.ndarray:
        """The frame of the env's current state, (1, height, width) uint8 grey, or (3, height, width) with `colour`."""
        hull = env.car.hull
        zoom = camera_zoom(env.t)
        c, s = math.cos(-hull.angle), math.sin(-hull.angle)
        # world -> canvas: rotate about the car by minus its heading, zoom, put the car at (W/2, H/4) of the window,
        # flip the rows, scale to the canvas; -0.5: OpenCV's pixel centres sit on whole coordinates
        sx, sy = self.scale_x * zoom, self.scale_y * zoom
        matrix = np.array([[c * sx, -s * sx], [-s * sy, -c * sy]])
        px, py = hull.position
        self._matrix_t = matrix.T
        self._offset = np.array(
            [
                gym_car_racing.WINDOW_W / 2 * self.scale_x - 0.5 - matrix[0, 0] * px - matrix[0, 1] * py,
                gym_car_racing.WINDOW_H * 3 / 4 * self.scale_y - 0.5 - matrix[1, 0] * px - matrix[1, 1] * py,
            ]
        )
        canvas = self.canvas
        canvas.fill(0)
        cv2.fillConvexPoly(
            canvas, self._fixed(self.background @ self._matrix_t + self._offset)[0], self.background_paint, cv2.LINE_8, SHIFT
        )
        # every quad of the view, grown in one pass: the visible grass squares and road polygons, then the car's
        visible = self._visible(max(sx, sy))
        n_grass = int(np.searchsorted(visible, self.n_grass))
        car, car_orientation, hidden = self._car_quads()
        n_scene = len(visible)
        quads = np.concatenate([self.polygons[visible] @ self._matrix_t + self._offset, car])
        grow = np.repeat(self._grow_px, (n_scene, len(car)))[:, None]
        quads = self._fixed(quads, grow, np.concatenate([self.orientation[visible], car_orientation]))
        if n_grass:
            cv2.fillPoly(canvas, list(quads[:n_grass]), self.grass_paint, cv2.LINE_8, SHIFT)  # the squares never overlap
        road_paints = self._road_paints()
        for quad, place in zip(quads[n_grass:n_scene], (visible[n_grass:] - self.n_grass).tolist(), strict=True):
            cv2.fillConvexPoly(canvas, quad, road_paints[place], cv2.LINE_8, SHIFT)  # one at a time: tiles overlap in sharp turns
        for quad, (paint, stripe_of) in zip(quads[n_scene:], self.car_order, strict=True):
            if stripe_of is None or not hidden[stripe_of]:
                cv2.fillConvexPoly(canvas, quad, paint, cv2.LINE_8, SHIFT)
        if self.hud:
            self._draw_hud(canvas, env)
        frame = cv2.resize(canvas, (self.width, self.height), interpolation=cv2.INTER_AREA)
        return np.ascontiguousarray(frame.transpose(2, 0, 1)) if self.colour else frame[None]

    def _draw_hud(self, canvas: np.ndarray, env: gym_car_racing.CarRacing) -> None:
        """CarRacing's HUD bar (its `_render_indicators`, in window pixels, rows down): the black bar, then each
        indicator whose value is not ~0, each rectangle filled as pygame.draw.polygon fills it (GROW_HUD_PX)."""
        quads, colours = hud_rectangles(env)  # the bar is always among them
        canvas_quads = quads * np.array([self.scale_x, self.scale_y]) - 0.5  # OpenCV's pixel centres on whole coordinates
        for colour in colours:
            if colour not in self._hud_paints:
                self._hud_paints[colour] = self._paints(colour)[0]
        paints = [self._hud_paints[colour] for colour in colours]
        for quad, paint in zip(self._fixed(canvas_quads, GROW_HUD_PX), paints, strict=True):
            cv2.fillConvexPoly(canvas, quad, paint, cv2.LINE_8, SHIFT)

    def _paints(self, rgb) -> list:
        """What OpenCV fills regions of colour `rgb` (one colour or an (N, 3) list) with on this canvas: each one's grey
        level (an int), or with `colour` its colour in the pygame frame (a list R, G, B)."""
        return frame_rgb(rgb).tolist() if self.colour else grey_level(rgb).tolist()

    def _road_paints(self) -> list:
        """Each road polygon's paint, recomputed when a tile was recoloured since the last frame."""
        if self._paints_of is None or not np.array_equal(self._paints_of, self.road_rgb):
            self._paints_of = self.road_rgb.copy()
            self._road_paint_list = self._paints(self.road_rgb)
        return self._road_paint_list

    def _fixed(self, canvas_points: np.ndarray, grow_px=None, orientation=None) -> np.ndarray:
        """Canvas points -> int32 with SHIFT fractional bits; quads (P, 4, 2) grown so that OpenCV fills them as pygame
        fills them with `grow_px` window pixels around the shape (OpenCV's own fill reaches half a canvas pixel out).
        `grow_px`: one number, or one per quad (P, 1); `orientation`: the quads' (see `grown`)."""
        if grow_px is not None:
            canvas_points = grown(canvas_points, grow_px * self.scale_x - 0.5, grow_px * self.scale_y - 0.5, orientation)
        return np.rint(canvas_points * _ONE).astype(np.int32)

    def _visible(self, scale: float) -> np.ndarray:
        """Indices of the polygons that may meet the canvas: their centre within their radius of it."""
        centres = self.centres @ self._matrix_t + self._offset
        margin = self.radii * scale + 1.0
        h, w = self.canvas.shape[:2]
        x, y = centres[:, 0], centres[:, 1]
        return np.flatnonzero((x >= -margin) & (x <= w + margin) & (y >= -margin) & (y <= h + margin))

    def _car_quads(self) -> tuple[np.ndarray, np.ndarray, list[bool]]:
        """The car's quads in canvas coordinates (Q, 4, 2) and their orientation (Q, 1), as car_dynamics.Car.draw draws
        its parts (shapes, order, colours), all placed in one transform; and whether each wheel's stripe is hidden."""
        bodies = self.car_bodies
        poses = np.array([(*body.position, body.angle) for body in bodies])
        # the white stripe across each wheel turns with its phase: its ends at the wheel's radius x the cosines of the
        # phase and the phase + 1.2 rad, an end on the hidden side (sine > 0) pinned to the rim, none when both are
        radius, half_w = car_dynamics.WHEEL_R * car_dynamics.SIZE, car_dynamics.WHEEL_W * car_dynamics.SIZE
        stripes, hidden, turning = [], [], []
        for wheel in bodies[: self.n_wheels]:
            ends = []
            for angle in (wheel.phase, wheel.phase + 1.2):
                cosine = math.cos(angle)
                ends.append(radius * (math.copysign(1.0, cosine) if cosine and math.sin(angle) > 0 else cosine))
            hidden.append(math.sin(wheel.phase) > 0 and math.sin(wheel.phase + 1.2) > 0)
            stripes += [(-half_w, ends[0]), (half_w, ends[0]), (half_w, ends[1]), (-half_w, ends[1])]
            turning.append(-math.copysign(1.0, ends[1] - ends[0]) if ends[1] != ends[0] else 0.0)  # flipped by the view
        local = np.concatenate([self.car_local, stripes])
        body = self.car_body_of_vertex
        angles = poses[body, 2]
        c, s = np.cos(angles), np.sin(angles)
        world = np.stack([local[:, 0] * c - local[:, 1] * s, local[:, 0] * s + local[:, 1] * c], axis=1) + poses[body, :2]
        orientation = np.empty((len(self.car_quads), 1))
        orientation[self._car_fixture_places] = self.car_fixture_orientation
        orientation[self._car_stripe_places, 0] = turning
        return (world @ self._matrix_t + self._offset)[self.car_quads], orientation, hidden
