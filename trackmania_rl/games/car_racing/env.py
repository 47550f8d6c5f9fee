"""CarRacing-v3 as this project renders it: no render inside `step()`, frames rendered on demand at their
own size by one of two renderers (FRAME_RENDERERS), a faster road drawing with the same pixels, and the track
centerline.

"pygame": CarRacing's own drawing into its 1000 x 800 window, smoothscaled to the frame (pixel for pixel what
Gymnasium's CarRacing-v3 shows above its HUD). "fast": the same scene drawn straight at the frame's size
(fast_view.py), about 11 times cheaper (`game.render_speedup_fast`). Neither reads a file while it draws: the state
view leaves out CarRacing's HUD bar, which lies below the frame's rows (with frame_hud, its bars are drawn but not its
score text), and the HUD's score text loads pygame's font file at every render (a reinstall of pygame under a running
collector made those renders fail: docs/runs/2026-11-27_gpu_box_h100)."""

from __future__ import annotations

import math
import numbers

import gymnasium
import numpy as np
import pygame
from gymnasium.envs.box2d import car_racing as gym_car_racing

from trackmania_rl.games.car_racing.fast_view import FastFrameRenderer, camera_zoom, grass_squares, playfield_corners

NATIVE_ENV_ID = "CarRacing-v3"  # the registered environment whose episode rules are CarRacing's native rules
VIEW_FRACTION = (35, 40)
MAX_FRAME_W = gym_car_racing.WINDOW_W  # the window it draws into: larger frames would be upscaled blur
MAX_FRAME_H = gym_car_racing.WINDOW_H * VIEW_FRACTION[0] // VIEW_FRACTION[1]


def native_step_limit() -> int:
    """How many steps (physics steps: one per `step()`) an episode of Gymnasium's registered CarRacing-v3 may
    last before its TimeLimit truncates it (`max_episode_steps`, 1000 in gymnasium 1.4.0), read from the registry."""
    return int(gymnasium.spec(NATIVE_ENV_ID).max_episode_steps)


def frame_render_size(H_downsized: int, W_downsized: int, hud: bool = False) -> tuple[int, int]:
    """(width, height) to render CarRacing at so that its view above the HUD is exactly
    W_downsized x H_downsized pixels: pygame's smoothscale then does the downsizing in one area-averaging
    pass from the 1000 x 800 window (no second resampling, nothing to resize afterwards). With `hud` (config
    setting frame_hud) the frame is the whole window, the HUD bar in its bottom 5/40 rows, as Gymnasium's observation.
    ValueError for sizes it cannot draw."""
    max_h = gym_car_racing.WINDOW_H if hud else MAX_FRAME_H
    for name, value, limit in (("H_downsized", H_downsized, max_h), ("W_downsized", W_downsized, MAX_FRAME_W)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
            raise ValueError(f"config setting `{name}` = {value!r}: the frame size must be a positive integer")
        if value > limit:
            raise ValueError(
                f"config setting `{name}` = {value}: CarRacing draws its view {'with' if hud else 'without'} the HUD into "
                f"{MAX_FRAME_W} x {max_h} pixels (W x H); it cannot produce a larger frame"
            )
    if hud:
        return int(W_downsized), int(H_downsized)
    # the smallest height whose rows wholly above the HUD's top edge number H_downsized (never more:
    # height < H * 40/35 + 1 gives fewer than H + 35/40 such rows)
    render_h = -(-H_downsized * VIEW_FRACTION[1] // VIEW_FRACTION[0])
    assert render_h * VIEW_FRACTION[0] // VIEW_FRACTION[1] == H_downsized
    return int(W_downsized), int(render_h)


class CarRacingEnv(gym_car_racing.CarRacing):
    """CarRacing whose `step()` does not render: `render_state_pixels()` renders on demand, at this
    instance's own pixel size (CarRacing reads the module globals STATE_W/STATE_H; changing those would
    affect every env in the process). Its road drawing skips off-screen polygons in one vectorised test
    (`_render_road`), with pixels identical to CarRacing's own.

    `fast_frame_size` (height, width): also draw frames of that size with the fast renderer
    (`render_fast_frame()`); its track is gathered at every reset. `hud`: both renderers draw the HUD bar's indicators
    (speed, the four wheels' ABS bars, steering, gyro) as CarRacing does, but not its score digits: drawing text loads
    pygame's font file at every render, and the score is the reward so far, not the car's state. `colour`: the fast
    renderer draws (3, H, W) colour frames instead of (1, H, W) grey ones (the pygame view is RGB either way)."""

    def __init__(
        self,
        render_size: tuple[int, int] = (gym_car_racing.STATE_W, gym_car_racing.STATE_H),
        fast_frame_size=None,
        hud: bool = False,
        colour: bool = False,
    ):
        super().__init__(render_mode="state_pixels", continuous=True, domain_randomize=False)
        self.render_size = tuple(render_size)
        self.hud = bool(hud)
        self._render_requested = False
        self._road_drawing: _RoadDrawing | None = None
        self.fast_frames = None
        if fast_frame_size is not None:
            self.fast_frames = FastFrameRenderer(*fast_frame_size, render_h=self.render_size[1], hud=self.hud, colour=colour)
        self.reset_seed = None  # the seed of the last reset, while no step has been played since (else None)

    def reset(self, *args, **kwargs):
        self._road_drawing = None  # a new track: its polygons are gathered at the next render
        self.reset_seed = None
        result = super().reset(*args, **kwargs)
        if self.fast_frames is not None:
            self.fast_frames.bind_track(self)
        self.reset_seed = kwargs.get("seed")
        return result

    def step(self, action):
        self.reset_seed = None  # played on: no longer the state a reset leaves
        return super().step(action)

    def is_fresh(self, seed: int) -> bool:
        """Whether the env is as a reset on `seed` leaves it (reset with that seed, no step played since): a reset
        on the same seed would rebuild the very same state (~10 ms of track generation)."""
        return seed is not None and self.reset_seed == seed

    def _render_road(self, zoom, translation, angle):
        """CarRacing's road drawing (background, grass patches, road tiles, in its order, through its own
        `_draw_colored_polygon`), minus its per-polygon Python test of whether a polygon can be on screen.
        That test ran on all ~800 polygons of a render (~10% of them are drawn) and cost ~40% of it:
        `python scripts/benchmark.py game` measured game.render_speedup 1.72 (render 8.77 -> 5.09 ms,
        medians of 900 renders on 6 seeds, 2 Xeon 2.8 GHz vCPUs).
        Here one numpy pass over all vertices decides; a polygon within 1e-3 pixels of the test's bounds
        is left to CarRacing's own test, so the drawn set, and thus every pixel, is CarRacing's
        (tests/test_car_racing.py compares both)."""
        if self._road_drawing is None:
            self._road_drawing = _RoadDrawing(self)
        self._road_drawing.draw(self, zoom, translation, angle)

    def _render(self, mode):
        if mode != "state_pixels":
            return super()._render(mode)  # the videos' "rgb_array" view: CarRacing's own, HUD included
        if not self._render_requested or "t" not in self.__dict__:
            return None  # the render inside step(), skipped; or no reset yet
        # CarRacing's own drawing of the scene and camera (its `_render`), without the HUD
        self.surf = pygame.Surface((gym_car_racing.WINDOW_W, gym_car_racing.WINDOW_H))
        angle = -self.car.hull.angle
        zoom = camera_zoom(self.t)
        scroll = pygame.math.Vector2((-self.car.hull.position[0] * zoom, -self.car.hull.position[1] * zoom)).rotate_rad(angle)
        translation = (gym_car_racing.WINDOW_W / 2 + scroll[0], gym_car_racing.WINDOW_H / 4 + scroll[1])
        self._render_road(zoom, translation, angle)
        self.car.draw(self.surf, zoom, translation, angle, False)  # no skid marks in the state view, as CarRacing
        self.surf = pygame.transform.flip(self.surf, False, True)
        if self.hud:
            self._render_indicators(gym_car_racing.WINDOW_W, gym_car_racing.WINDOW_H)  # CarRacing's own bar; no score text
        return self._create_image_array(self.surf, self.render_size)

    def render_state_pixels(self) -> np.ndarray:
        """The (render_h, render_w, 3) RGB image `step()` would have returned as its observation, drawn by
        CarRacing's pygame code; the same pixels above the HUD, whose rows are left as the scene (not drawn), or with
        `hud` the HUD bar as CarRacing draws it but for its score digits."""
        self._render_requested = True
        try:
            return self._render("state_pixels")
        finally:
            self._render_requested = False

    def render_fast_frame(self) -> np.ndarray:
        """The (1, H, W) uint8 grey frame of the current state, or its (3, H, W) colour frame, drawn by the fast renderer
        (fast_frame_size, colour)."""
        return self.fast_frames.draw(self)


class _RoadDrawing:
    """One track's polygons in CarRacing's drawing order, and their vertices as one array for the
    vectorised on-screen test."""

    # CarRacing's test: a polygon is drawn when a vertex lies within MAX_SHAPE_DIM of the window
    MARGIN = gym_car_racing.MAX_SHAPE_DIM
    UNSURE_PX = 1e-3  # closer than this to the bounds: CarRacing's own test decides

    def __init__(self, env: gym_car_racing.CarRacing):
        self.background = playfield_corners()
        # the grass squares, then the road tiles (their colours are read at each render: CarRacing recolours a tile
        # in place when the car first touches it)
        polygons = grass_squares()
        self.n_grass = len(polygons)
        self.road_colors = []
        for polygon, color in env.road_poly:
            polygons.append([(p[0], p[1]) for p in polygon])
            self.road_colors.append(color)
        self.polygons = polygons
        self.vertices = np.array(polygons, dtype=np.float64)  # (P, 4, 2); every CarRacing polygon has 4 vertices

    def draw(self, env: gym_car_racing.CarRacing, zoom, translation, angle) -> None:
        draw_polygon = env._draw_colored_polygon
        draw_polygon(env.surf, self.background, env.bg_color, zoom, translation, angle, clip=False)
        cos, sin = math.cos(angle), math.sin(angle)
        x, y = self.vertices[..., 0], self.vertices[..., 1]
        screen_x = (x * cos - y * sin) * zoom + translation[0]
        screen_y = (x * sin + y * cos) * zoom + translation[1]
        surely_on = self._near_window(screen_x, screen_y, widen=-self.UNSURE_PX).any(axis=1)
        maybe_on = self._near_window(screen_x, screen_y, widen=self.UNSURE_PX).any(axis=1)
        for index in np.flatnonzero(maybe_on):
            if index < self.n_grass:
                color = env.grass_color
            else:
                color = [int(c) for c in self.road_colors[index - self.n_grass]]
            # clip=True: CarRacing's own test for a polygon too close to the bounds to decide here
            draw_polygon(env.surf, self.polygons[index], color, zoom, translation, angle, clip=not surely_on[index])

    def _near_window(self, screen_x: np.ndarray, screen_y: np.ndarray, widen: float) -> np.ndarray:
        """Per vertex: within MARGIN + widen pixels of the window."""
        low = -self.MARGIN - widen
        high_x, high_y = gym_car_racing.WINDOW_W + self.MARGIN + widen, gym_car_racing.WINDOW_H + self.MARGIN + widen
        return (screen_x >= low) & (screen_x <= high_x) & (screen_y >= low) & (screen_y <= high_y)


def track_centerline(env: gym_car_racing.CarRacing) -> np.ndarray:
    """One lap of the current track, (N + 1, 2): its points from the start, closed back onto the start."""
    points = np.array([(x, y) for _, _, x, y in env.track], dtype=np.float64)
    return np.concatenate([points, points[:1]])
