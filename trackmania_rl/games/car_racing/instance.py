"""Gymnasium's CarRacing-v3 as a game instance (DESIGN §3.1-3.4, §4), headless.

A map is a track seed. One action is held for `physics_steps_per_action` physics steps of 20 ms and the
game renders once per action: CarRacing's `step()` renders on every call and rendering costs ~40x the
physics, so the env used here skips the render inside `step()` and renders when asked. Everything else
`step()` does (car controls, Box2D step, clock, native reward bookkeeping) is CarRacing's own code, so
the physics, the native score and the rendered view are bit-identical to plain `env.step` calls
(tests/test_car_racing.py checks it). Only the HUD bar, which frames leave out, can differ: `step()`
draws its score digits before subtracting that step's 0.1, a render after the step draws them after.

Car-frame conventions (Box2D's, see floats.py): a vector is given as (lateral, forward),
lateral positive to the car's right; angles and angular velocity are counterclockwise-positive, so a
positive steering angle or yaw rate means turning left.
"""

from __future__ import annotations

import math
import numbers
import operator
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

import cv2
import numpy as np
from gymnasium.envs.box2d import car_racing as gym_car_racing

from trackmania_rl.config.game_backends import MS_PER_PHYSICS_STEP, RENDERER_FAST
from trackmania_rl.config.loader import frame_shape
from trackmania_rl.games.base import (
    CENTERLINE_STATE_KEYS,
    GAME_REWARD,
    RACE_RULES,
    ROAD_TILE_COUNTS,
    ROAD_TILES_MISSED,
    ROAD_TILES_TOUCHED,
    ROLLOUT_ACTION_KEYS,
    ROLLOUT_STATE_KEYS,
    RULES_NATIVE,
    RULES_TRAINING,
    ExplorationPolicy,
    GameCrashed,
    GameInstance,
    MapSpec,
)
from trackmania_rl.games.car_racing import floats as car_floats
from trackmania_rl.games.car_racing.actions import action_tables
from trackmania_rl.games.car_racing.env import CarRacingEnv, frame_render_size, native_step_limit, track_centerline
from trackmania_rl.games.car_racing.fast_view import camera_zoom
from trackmania_rl.games.car_racing.missed_tiles import MissedTileCounter
from trackmania_rl.games.frame_history import FrameHistory, repeated
from trackmania_rl.games.zones import ZoneGeometry, ZoneTracker, make_zone_centers

MS_PER_STEP = MS_PER_PHYSICS_STEP["carracing"]  # Box2D runs at 50 steps per game second

# CarRacing draws its HUD bar over the bottom 5/40 of its window (`_render_indicators`), so the top
# 35/40 of any rendered image is the view of the track alone.
TRACKS_CACHE_SIZE = 256  # seeds; ~7 KB of zone centers and ~5 KB of centerline each

END_FINISHED = "finished"
END_LEFT_PLAYFIELD = "left_playfield"
END_TIME_LIMIT = "time_limit"  # native rules: Gymnasium's TimeLimit truncated the episode


class _Track(NamedTuple):
    """What a track's seed fixes for every race on it, computed once per seed: its zone centers and its centerline
    (the missed-tile count measures progress along it)."""

    zone_centers: np.ndarray
    centerline: np.ndarray


class _GameFailure(Exception):
    """Internal: the game itself raised (its cause is the original exception)."""


class _Race:
    """The state of one race in play, shared by `CarRacingGameInstance._play` and its steps: made once per
    race and updated in place (the split into steps adds no allocation per action)."""

    __slots__ = (
        "geometry",
        "tracker",
        "hull",
        "timings",
        "t_start",
        "results",
        "stats",
        "n_prev",
        "previous_actions",
        "update_every",
        "lap",
        "split_distances",
        "cp_time_ms",
        "lap_time_ms",
        "missed_tiles",
        "frames",
        # set by `_play` when the race ends
        "physics_steps",
        "native_score",
        "furthest_progress",
        "left_playfield",
    )

    def __init__(self, cfg, geometry: ZoneGeometry, tracker: ZoneTracker, hull, timings: dict, t_start: int, centerline):
        self.geometry, self.tracker, self.hull = geometry, tracker, hull
        self.timings = timings  # ns per timed stage, summed over the race
        self.t_start = t_start  # perf_counter_ns at the start of the reset
        self.results = {
            key: [] for key in ROLLOUT_STATE_KEYS + CENTERLINE_STATE_KEYS + ROLLOUT_ACTION_KEYS + ROAD_TILE_COUNTS + (GAME_REWARD,)
        }
        self.stats = {}
        self.n_prev = cfg.n_prev_actions_in_inputs
        self.previous_actions = [0] * self.n_prev  # before the start: action 0, like Linesight
        self.update_every = cfg.update_inference_network_every_n_actions
        self.lap = geometry.lap_length()
        self.split_distances = [geometry.start_distance + self.lap * q / 4 for q in (1, 2, 3)]
        self.cp_time_ms = [0]
        self.lap_time_ms = None  # when the car first crossed the finish line after a lap
        self.missed_tiles = MissedTileCounter(centerline, geometry.start_distance)  # those of the first lap
        # frame_stack > 1: the race's frames, each state the last C channels (the first frame stands for those before it)
        self.frames = FrameHistory(*frame_shape(cfg)) if cfg.frame_stack > 1 else None


def validate_map_spec(map_spec) -> MapSpec:
    """The map spec if it names a CarRacing track; a ValueError saying what is wrong otherwise."""
    if not isinstance(map_spec, MapSpec):
        raise ValueError(
            f"unknown map spec {map_spec!r}: CarRacing expects a trackmania_rl.games.base.MapSpec(name, seed, is_explo, fill_buffer)"
        )
    if not isinstance(map_spec.name, str) or not map_spec.name:
        raise ValueError(f"map spec {map_spec!r}: the name must be a non-empty string")
    seed = map_spec.seed
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"map spec {map_spec!r}: the seed must be an integer >= 0 (a CarRacing track seed)")
    if not isinstance(map_spec.is_explo, bool) or not isinstance(map_spec.fill_buffer, bool):
        raise ValueError(f"map spec {map_spec!r}: is_explo and fill_buffer must be True or False")
    return map_spec


class CarRacingGameInstance(GameInstance):
    """One CarRacing game driven one race at a time (DESIGN §3.1).

    `rollout(exploration_policy, map, zone_centers, update_network)` plays the race of `map`
    (a MapSpec; the seed picks the track) from a fresh reset and returns (rollout_results, end_race_stats).

    `rules` (games/base.py) decides how a race ends. "training" (the collectors', the held-out evaluation's):

    Time: the state after reset is race time 0; each decision holds its action for
    `physics_steps_per_action` physics steps of 20 ms (`cfg.ms_per_action`). At each decision point the
    race first checks its cutoffs (overall duration, no new furthest zone), then builds the floats,
    calls `update_network()` every `update_inference_network_every_n_actions` decisions (starting with
    the first), renders the frame, asks the policy, and plays the action. Zones and the finish are
    tracked after every physics step, so the finish time has 20 ms resolution. Leaving the playfield
    ends the race as a cutoff. The race is finished when the car crosses the finish line, the line
    through the start point perpendicular to the track, after one lap along the centerline (Gymnasium's
    own lap flag is not used).

    "native" (scripts/evaluate.py's default): the race ends exactly when an episode of Gymnasium's registered
    CarRacing-v3 would, and nothing else ends it: when CarRacing terminates it (its lap flag, which in practice
    means every road tile touched: end_reason "finished"; or the car off the playfield: "left_playfield") or when
    its TimeLimit truncates it (`max_episode_steps` physics steps, 1000 = 20 s: "time_limit"), possibly in the
    middle of an action; no cut-off is checked. Crossing the finish line starts the next lap: the zones, the
    floats' centers ahead and the distance to the finish describe it as they did the first. `race_finished` is
    CarRacing's lap flag, `race_time` the time it came; the split times are those of the first lap.

    rollout_results, with A = number of decisions and F = A + 1 if the race finished, else F = A:
    - state lists, F entries: `frames` (np.uint8 (C, H_downsized, W_downsized), C = loader.frame_shape's), `state_float`
      (np.float32 (layout.dim,), float 0 = 0.0), `car_gear_and_wheels` (np.float32, the floats of
      segments CAR_STATE_FIRST..CAR_STATE_LAST), `current_zone_idx` (int),
      `meters_advanced_along_centerline` (float), `road_tiles_touched` (int, distinct road tiles touched since
      the start; the native score pays for each), `road_tiles_missed` (int, tiles of the first lap the car has
      driven past without touching them: games/car_racing/missed_tiles.py; at the finish pseudo-step, every tile
      the lap left untouched);
    - action lists, A entries: `actions` (int), `action_was_greedy` (bool), `q_values`
      (np.float32 (n_actions,)), `input_w` (bool, accelerate pressed), `game_reward` (float, CarRacing's own reward
      summed over the physics steps the action was held for: +1000/N for each new road tile, -0.1 a step, -100 on
      leaving the playfield; they add up to `native_score`);
    - entry A of the state lists, present only when finished, is the finish pseudo-step: the frame
      and floats observed at the physics step where the finish was crossed, with
      `current_zone_idx` = the first zone past the finish (M - n_zone_centers_extrapolate_after_end_of_map)
      and `meters_advanced_along_centerline` = the finish distance (so distance_to_finish = 0);
    - `furthest_zone_idx` (int, = max(current_zone_idx)); `race_time` (int ms, only when finished);
      metadata `map_name`, `seed`, `is_explo`, `fill_buffer`.

    end_race_stats: `race_finished`, `race_time` (ms; the overall cutoff constant when not finished,
    like Linesight), `race_time_for_ratio` (game ms actually played), `cp_time_ms` (split times: 0, then
    the times the car first passed 1/4, 2/4 and 3/4 of the lap and the finish), `value_starting_frame`,
    `q_value_<i>_starting_frame`, `native_score` (the Gymnasium reward summed over the race),
    `end_reason` ("finished", "left_playfield", and "overall", "no_progress" (training) or "time_limit" (native)),
    `lap_time_ms` (game ms when the car first crossed the finish line after a lap, by either rules, or when every tile
    was touched if that came first, native rules; None if neither came),
    `left_playfield`,
    `tiles_visited_fraction`, `progress_fraction` (furthest progress / lap length), `n_actions`, and the
    collector-loop timings `instrumentation__<stage>` in ns per action for the stages reset, physics,
    floats, render, convert_frame (the pygame renderer's view to the grey frame; 0 with the fast renderer, which draws
    the frame itself), exploration_policy, update_network and bookkeeping (everything else: zones, lists); they add up
    to the rollout's wall time.

    Errors: a bad map spec, zone centers of another track, a frame size CarRacing cannot draw or a
    policy action outside the action set raise ValueError. If the game itself raises during a race,
    the env is rebuilt and GameCrashed is raised (the collector drops the race; the next one works).
    """

    def __init__(self, cfg, rules: str = RULES_TRAINING, clock: Callable[[], int] = time.perf_counter_ns):
        """`clock`: nanoseconds for the timings of end_race_stats (tests give a clock of their own)."""
        if rules not in RACE_RULES:
            raise ValueError(f"race rules {rules!r}: expected one of {list(RACE_RULES)}")
        self.rules = rules
        self.clock = clock
        self._native_step_limit = native_step_limit()
        if cfg.game_backend != "carracing" or cfg.ms_per_action != cfg.physics_steps_per_action * MS_PER_STEP:
            raise ValueError(
                f"CarRacingGameInstance needs a config built for the 'carracing' backend, got {cfg.game_backend!r} "
                f"(ms_per_action {cfg.ms_per_action})"
            )
        self.cfg = cfg
        self.float_layout = car_floats.make_float_layout(cfg)  # the network's floats: the full ones' first (float_inputs)
        full_layout = car_floats.full_float_layout(cfg)
        self._network_dim = self.float_layout.dim
        self.n_actions = len(cfg.inputs)
        # per action: CarRacing's continuous control (steer, gas, brake), and its four flags as floats
        self.controls, self._action_flag_lists = action_tables(cfg)
        self._accelerates = [bool(a["accelerate"]) for a in cfg.inputs]
        self.frame_shape = frame_shape(cfg)  # a state's; render_frame draws one frame
        self._render_w, self._render_h = frame_render_size(cfg.H_downsized, cfg.W_downsized, cfg.frame_hud)
        # the fast renderer draws the frame itself; the pygame one a view that convert_frame turns into the frame
        self._fast = cfg.frame_renderer == RENDERER_FAST
        self._car_state_slice = full_layout.span(car_floats.CAR_STATE_FIRST, car_floats.CAR_STATE_LAST)
        self._segment_names = full_layout.names()
        if set(self._segment_names) != set(car_floats.SEGMENT_NAMES):
            raise ValueError(f"the CarRacing float layout must have the segments {car_floats.SEGMENT_NAMES}, got {self._segment_names}")
        self._lookahead_offsets = [k * cfg.one_every_n_zone_centers_in_inputs for k in range(cfg.n_zone_centers_in_inputs)]
        self._tracks: OrderedDict[int, _Track] = OrderedDict()  # by seed, the most recently used last
        self.env = self._make_env()

    # ----------------------------------------------------------------------------------------------
    # Game management
    # ----------------------------------------------------------------------------------------------
    def _make_env(self) -> CarRacingEnv:
        fast_frame_size = (self.cfg.H_downsized, self.cfg.W_downsized) if self._fast else None
        return CarRacingEnv(
            render_size=(self._render_w, self._render_h),
            fast_frame_size=fast_frame_size,
            hud=self.cfg.frame_hud,
            colour=self.cfg.frame_colour,
        )

    def _rebuild_env(self) -> None:
        try:
            self.env.close()
        except Exception:  # the broken env may fail to close too; it is dropped either way
            pass
        self.env = self._make_env()

    def close(self) -> None:
        self.env.close()

    def update_config(self, cfg) -> None:
        """Take a reloaded config between races (cutoffs, road_width, update period...). Settings that
        shape frames, floats or actions are fixed for the life of the instance."""
        fixed = (
            "physics_steps_per_action",
            "H_downsized",
            "W_downsized",
            "frame_renderer",
            "frame_hud",
            "frame_colour",
            "frame_stack",
            "n_prev_actions_in_inputs",
            "n_zone_centers_in_inputs",
            "one_every_n_zone_centers_in_inputs",
            "margin_to_announce_finish_meters",
            "distance_between_checkpoints",
            "n_zone_centers_extrapolate_before_start_of_map",
            "n_zone_centers_extrapolate_after_end_of_map",
            "temporal_mini_race_duration_ms",
            "inputs",
            "input_settings",
        )
        changed = [name for name in fixed if getattr(cfg, name) != getattr(self.cfg, name)]
        if changed:
            raise ValueError(f"config settings {changed} cannot change in a running CarRacingGameInstance")
        self.cfg = cfg

    def _reset(self, seed: int) -> None:
        try:
            self.env.reset(seed=seed)
        except Exception as e:
            raise _GameFailure() from e

    def _physics_step(self, control: np.ndarray) -> tuple[float, str | None]:
        """One CarRacing step (physics + native reward, no render): (native reward, how CarRacing terminated the
        episode at this step: END_FINISHED for its lap flag, END_LEFT_PLAYFIELD, or None)."""
        try:
            _, reward, terminated, _, info = self.env.step(control)
        except Exception as e:
            raise _GameFailure() from e
        if not terminated:
            return reward, None
        return reward, END_FINISHED if info.get("lap_finished") else END_LEFT_PLAYFIELD

    def render_frame(self, timings: dict | None = None) -> np.ndarray:
        """The uint8 frame of the game's current state, (1, H, W) grey or (3, H, W) with frame_colour, drawn by the
        instance's renderer. The fast renderer draws the frame itself; the pygame renderer draws an RGB view that
        `convert_frame` makes the frame. With `timings`, the drawing is added to its "render" and the conversion (pygame
        only) to its "convert_frame"."""
        clock = self.clock
        t0 = clock()
        try:
            drawn = self.env.render_fast_frame() if self._fast else self.env.render_state_pixels()
        except Exception as e:
            raise _GameFailure() from e
        if timings is not None:
            timings["render"] += clock() - t0
        if self._fast:
            return drawn
        t0 = clock()
        frame = self.convert_frame(drawn)
        if timings is not None:
            timings["convert_frame"] += clock() - t0
        return frame

    def _crash(self, failure: _GameFailure, map_spec: MapSpec) -> GameCrashed:
        """Rebuild the game after it raised; the error to raise (from the original cause)."""
        self._rebuild_env()
        return GameCrashed(
            f"CarRacing raised {failure.__cause__!r} during the race of map {map_spec.name!r} (seed {map_spec.seed}); "
            "the game was rebuilt and the race must be dropped"
        )

    # ----------------------------------------------------------------------------------------------
    # Maps and zones
    # ----------------------------------------------------------------------------------------------
    def zone_centers_for(self, map_spec: MapSpec) -> np.ndarray:
        """The (M, 2) zone centers of the map's track (cached per seed)."""
        map_spec = validate_map_spec(map_spec)
        seed = int(map_spec.seed)
        if seed in self._tracks:
            self._tracks.move_to_end(seed)
        else:
            try:
                self._reset(seed)
            except _GameFailure as failure:
                raise self._crash(failure, map_spec) from failure.__cause__
            self._tracks[seed] = self._track_of_env()
            if len(self._tracks) > TRACKS_CACHE_SIZE:
                self._tracks.popitem(last=False)
        return self._tracks[seed].zone_centers.copy()

    def _track_of_env(self) -> _Track:
        """The zone centers and centerline of the track the game was last reset on."""
        cfg, centerline = self.cfg, track_centerline(self.env)
        zone_centers = make_zone_centers(
            centerline,
            cfg.distance_between_checkpoints,
            cfg.n_zone_centers_extrapolate_before_start_of_map,
            cfg.n_zone_centers_extrapolate_after_end_of_map,
        )
        return _Track(zone_centers, centerline)

    def _zone_geometry(self, zone_centers) -> ZoneGeometry:
        centers = np.asarray(zone_centers)
        if centers.ndim != 2 or centers.shape[1] != 2:
            raise ValueError(f"CarRacing zone centers must be an (M, 2) array, got shape {centers.shape}")
        return ZoneGeometry(
            centers, self.cfg.n_zone_centers_extrapolate_before_start_of_map, self.cfg.n_zone_centers_extrapolate_after_end_of_map
        )

    def max_distance_to_zone_center(self) -> float:
        """How far from a zone center the car may be for the zone to be entered (Linesight's rule)."""
        return math.hypot(self.cfg.distance_between_checkpoints / 2, self.cfg.road_width / 2)

    # ----------------------------------------------------------------------------------------------
    # Observations
    # ----------------------------------------------------------------------------------------------
    def convert_frame(self, rgb: np.ndarray) -> np.ndarray:
        """Rendered RGB view -> uint8 frame: the rows above the HUD (all of them with frame_hud), in grey (1, H, W), or
        with frame_colour as they are, (3, H, W) R, G, B."""
        _, height, width = self.frame_shape
        if rgb.shape[:2] != (self._render_h, width):
            raise ValueError(f"expected a {width} x {self._render_h} rendered view, got shape {rgb.shape}")
        if self.cfg.frame_colour:
            return np.ascontiguousarray(rgb[:height].transpose(2, 0, 1))
        return cv2.cvtColor(rgb[:height], cv2.COLOR_RGB2GRAY)[None]

    def _network_floats(self, all_floats: np.ndarray) -> np.ndarray:
        """The floats the network sees: all of them, or with float_inputs "own_actions" the clock and previous actions."""
        return all_floats if self._network_dim == len(all_floats) else all_floats[: self._network_dim].copy()

    @staticmethod
    def _state_frames(race: _Race, frame: np.ndarray) -> np.ndarray:
        """The state's frames from the frame just drawn ((1, H, W), or (3, H, W) in colour): itself, or the last
        frame_stack frames."""
        history = race.frames
        if history is None:
            return frame
        if history.started:
            history.push(frame)
        else:
            history.start(repeated(frame, history.c // len(frame)))  # C channels: C / (channels of a frame) frames
        return history.stack()

    def state_float(self, geometry: ZoneGeometry, zone_idx: int, progress: float, previous_actions) -> np.ndarray:
        """Every float (DESIGN §3.3) of the car's current state, full_float_layout's; float 0 (mini-race clock) is 0.

        Plain Python floats gathered in layout order, converted to numpy once: right after a render the
        CPU caches are cold and each numpy call on a tiny array then costs several microseconds (numpy
        on the 16 centers ahead made this ~170 us; see docs/performance.md)."""
        car = self.env.car
        hull = car.hull
        x, y = hull.position
        cos_a, sin_a = math.cos(hull.angle), math.sin(hull.angle)
        vx, vy = hull.linearVelocity
        wheels = car.wheels
        # car frame: lateral axis (cos, sin) = the car's right, forward axis (-sin, cos)
        centers, last = geometry.center_tuples, geometry.n_zones - 1
        ahead = []
        for offset in self._lookahead_offsets:  # point-major (lateral, forward) of each center
            cx, cy = centers[min(zone_idx + offset, last)]
            dx, dy = cx - x, cy - y
            ahead += (dx * cos_a + dy * sin_a, dy * cos_a - dx * sin_a)
        to_finish = min(self.cfg.margin_to_announce_finish_meters, max(0.0, geometry.distance_to_finish(progress)))
        values = {
            car_floats.MINI_RACE_CLOCK: (0.0,),
            car_floats.PREVIOUS_ACTIONS: [flag for action in previous_actions for flag in self._action_flag_lists[action]],
            car_floats.VELOCITY: (vx * cos_a + vy * sin_a, vy * cos_a - vx * sin_a),  # (lateral, forward)
            car_floats.ANGULAR_VELOCITY: (hull.angularVelocity,),
            car_floats.STEERING_ANGLE: (wheels[0].joint.angle,),  # both front wheels steer together
            car_floats.WHEEL_SPEEDS: [w.omega for w in wheels],
            car_floats.WHEELS_ON_ROAD: [1.0 if w.tiles else 0.0 for w in wheels],  # touching a road tile
            car_floats.ZONE_CENTERS_AHEAD: ahead,
            car_floats.DISTANCE_TO_FINISH: (to_finish,),
        }
        return np.array([v for name in self._segment_names for v in values[name]], dtype=np.float32)

    def render_full_view(self) -> np.ndarray:
        """The game's full RGB view (600 x 400 with the HUD, car particles included), rendered now: for
        videos (games/backend.py `render_full_view`).

        CarRacingEnv only renders on request; its "rgb_array" mode draws the same scene as the frames the
        network gets, at the video size, without touching the physics, so calling it between decisions
        leaves the race unchanged."""
        return self.env._render("rgb_array")

    def world_to_frame(self, points) -> np.ndarray:
        """(row, col) in the network's frame of world points, for the current car pose and camera zoom
        (CarRacing's own camera transform, then its vertical flip and rescale; the HUD is below)."""
        env = self.env
        points = np.atleast_2d(np.asarray(points, dtype=np.float64))
        zoom = camera_zoom(env.t)
        rotation = -env.car.hull.angle
        rel = points - np.asarray(env.car.hull.position)
        c, s = math.cos(rotation), math.sin(rotation)
        surface_x = (rel[:, 0] * c - rel[:, 1] * s) * zoom + gym_car_racing.WINDOW_W / 2
        surface_y = (rel[:, 0] * s + rel[:, 1] * c) * zoom + gym_car_racing.WINDOW_H / 4
        flipped_y = gym_car_racing.WINDOW_H - surface_y
        _, height, width = self.frame_shape
        cols = surface_x * width / gym_car_racing.WINDOW_W
        rows = flipped_y * self._render_h / gym_car_racing.WINDOW_H
        return np.stack([rows, cols], axis=1)

    # ----------------------------------------------------------------------------------------------
    # The race
    # ----------------------------------------------------------------------------------------------
    def rollout(
        self,
        exploration_policy: ExplorationPolicy,
        map: MapSpec,
        zone_centers: np.ndarray,
        update_network: Callable[[], None],
    ) -> tuple[dict, dict]:
        map_spec = validate_map_spec(map)
        geometry = self._zone_geometry(zone_centers)
        try:
            return self._play(exploration_policy, map_spec, geometry, update_network)
        except _GameFailure as failure:
            raise self._crash(failure, map_spec) from failure.__cause__

    def _play(self, exploration_policy, map_spec: MapSpec, geometry: ZoneGeometry, update_network) -> tuple[dict, dict]:
        """One race: its start, then decision steps, each followed by its action held for its physics
        steps (zones, furthest progress and split times tracked after each step), until the race ends by the
        instance's rules (see the class docstring); then its rollout_results and end_race_stats.

        The physics loop runs here on local variables: it is the innermost loop of a collector."""
        race = self._start_race(map_spec, geometry)
        cfg = self.cfg
        clock = self.clock
        timings, tracker, hull = race.timings, race.tracker, race.hull
        split_distances, cp_time_ms = race.split_distances, race.cp_time_ms
        overall_cutoff = cfg.cutoff_rollout_if_race_not_finished_within_duration_ms
        no_progress_cutoff = cfg.cutoff_rollout_if_no_vcp_passed_within_duration_ms
        steps_per_action = cfg.physics_steps_per_action
        native, step_limit = self.rules == RULES_NATIVE, self._native_step_limit
        physics_steps = 0
        native_score = 0.0
        game_rewards = race.results[GAME_REWARD]
        furthest_progress = tracker.progress
        end_reason = None

        while end_reason is None:
            if not native:
                end_reason = tracker.cutoff_reason(physics_steps * MS_PER_STEP, overall_cutoff, no_progress_cutoff)
                if end_reason is not None:
                    break
            control = self.controls[self._decide(race, exploration_policy, update_network)]
            action_reward = 0.0
            for _ in range(steps_per_action):
                t0 = clock()
                reward, game_end = self._physics_step(control)
                timings["physics"] += clock() - t0
                native_score += reward  # step by step, as Gymnasium's own sum
                action_reward += reward
                physics_steps += 1
                progress = tracker.update(tuple(hull.position), physics_steps * MS_PER_STEP)
                if progress > furthest_progress:
                    furthest_progress = progress
                    while len(cp_time_ms) <= len(split_distances) and progress >= split_distances[len(cp_time_ms) - 1]:
                        cp_time_ms.append(physics_steps * MS_PER_STEP)
                if native:
                    if tracker.finished:  # the next lap, described as the first was (the line is the start)
                        if race.lap_time_ms is None:
                            race.lap_time_ms = physics_steps * MS_PER_STEP
                        tracker = race.tracker = ZoneTracker(geometry, self.max_distance_to_zone_center(), physics_steps * MS_PER_STEP)
                    if game_end is None and physics_steps >= step_limit:
                        game_end = END_TIME_LIMIT
                    if game_end is not None:
                        if game_end == END_FINISHED and race.lap_time_ms is None:  # every tile touched before the line
                            race.lap_time_ms = physics_steps * MS_PER_STEP
                        end_reason = game_end
                        break
                elif tracker.finished:  # the training rules: our finish line, and leaving the playfield
                    race.lap_time_ms = physics_steps * MS_PER_STEP
                    end_reason = END_FINISHED
                    break
                elif game_end == END_LEFT_PLAYFIELD:
                    end_reason = END_LEFT_PLAYFIELD
                    break
            game_rewards.append(action_reward)
        if end_reason == END_FINISHED:
            self._append_finish_pseudo_step(race)

        race.physics_steps = physics_steps
        race.native_score = native_score
        race.furthest_progress = furthest_progress
        race.left_playfield = end_reason == END_LEFT_PLAYFIELD
        return self._end_race(race, map_spec, end_reason)

    def _start_race(self, map_spec: MapSpec, geometry: ZoneGeometry) -> _Race:
        """Reset the game on the map's track (timed), check that the zone centers are this track's, and
        set up the race's state. The race's wall time counts from here."""
        clock = self.clock
        timings = dict.fromkeys(("reset", "physics", "floats", "render", "convert_frame", "exploration_policy", "update_network"), 0)
        t_start = clock()
        seed = int(map_spec.seed)
        if not self.env.is_fresh(seed):  # a first race on a track: zone_centers_for has just reset the game on it
            self._reset(seed)
        timings["reset"] = clock() - t_start
        env = self.env
        start = np.asarray(env.track[0][2:4])
        if not np.allclose(geometry.centers[geometry.start_zone_idx], start, atol=1e-6):
            raise ValueError(
                f"the zone centers do not belong to map {map_spec.name!r}: its seed {map_spec.seed} starts at {start}, "
                f"zone center {geometry.start_zone_idx} is {geometry.centers[geometry.start_zone_idx]}"
            )
        tracker = ZoneTracker(geometry, self.max_distance_to_zone_center())
        track = self._tracks.get(seed)  # computed by zone_centers_for, unless the cache has let it go since
        centerline = track.centerline if track is not None else track_centerline(env)
        return _Race(self.cfg, geometry, tracker, env.car.hull, timings, t_start, centerline)

    def _decide(self, race: _Race, exploration_policy, update_network) -> int:
        """One decision at the current state: its floats, the network update when due, the frame, the
        policy's decision (each timed); the state and the decision are recorded. Returns the action."""
        clock = self.clock
        timings, results, tracker = race.timings, race.results, race.tracker
        # the floats before the render: they read only the car's state, which the render leaves as it
        # is, and before the render the CPU caches still hold it (~170 -> ~50 us per action); the
        # network update too, as it does not need the frame
        t0 = clock()
        all_floats = self.state_float(race.geometry, tracker.current_zone_idx, tracker.progress, race.previous_actions)
        state_float = self._network_floats(all_floats)
        timings["floats"] += clock() - t0
        n_actions_done = len(results["actions"])
        if n_actions_done % race.update_every == 0:
            t0 = clock()
            update_network()
            timings["update_network"] += clock() - t0
        frame = self._state_frames(race, self.render_frame(timings))
        t0 = clock()
        decision = exploration_policy(frame, state_float)
        timings["exploration_policy"] += clock() - t0
        action, was_greedy, value, q_values = self._check_decision(decision)

        results["frames"].append(frame)
        results["state_float"].append(state_float)
        results["car_gear_and_wheels"].append(all_floats[self._car_state_slice].copy())
        results["current_zone_idx"].append(tracker.current_zone_idx)
        results["meters_advanced_along_centerline"].append(tracker.progress)
        results[ROAD_TILES_TOUCHED].append(self.env.tile_visited_count)
        results[ROAD_TILES_MISSED].append(race.missed_tiles.update(tracker.progress, self.env.road))
        results["actions"].append(action)
        results["action_was_greedy"].append(was_greedy)
        results["q_values"].append(q_values)
        results["input_w"].append(self._accelerates[action])
        if n_actions_done == 0:
            stats = race.stats
            stats["value_starting_frame"] = value
            for i, q in enumerate(q_values.tolist()):
                stats[f"q_value_{i}_starting_frame"] = q
        if race.n_prev:
            race.previous_actions = race.previous_actions[1:] + [action]
        return action

    def _end_race(self, race: _Race, map_spec: MapSpec, end_reason: str) -> tuple[dict, dict]:
        """The race's rollout_results, completed (race time when finished, furthest zone, the map's
        metadata), and its end_race_stats."""
        results = race.results
        if end_reason == END_FINISHED:
            played_ms = race.physics_steps * MS_PER_STEP
            race.cp_time_ms.append(played_ms)
            results["race_time"] = played_ms
        results["furthest_zone_idx"] = max(results["current_zone_idx"])
        results.update(map_name=map_spec.name, seed=int(map_spec.seed), is_explo=map_spec.is_explo, fill_buffer=map_spec.fill_buffer)
        return results, self._end_race_stats(race, end_reason)

    def _end_race_stats(self, race: _Race, end_reason: str) -> dict:
        """end_race_stats (see the class docstring); the time not spent in a timed stage since the race
        started is `bookkeeping`, and every stage's time is given per action."""
        finished = end_reason == END_FINISHED
        played_ms = race.physics_steps * MS_PER_STEP
        n_actions = len(race.results["actions"])
        timings = race.timings
        total_ns = self.clock() - race.t_start
        timings["bookkeeping"] = total_ns - sum(timings.values())
        stats = race.stats
        stats.update(
            race_finished=finished,
            race_time=played_ms if finished else self.cfg.cutoff_rollout_if_race_not_finished_within_duration_ms,
            race_time_for_ratio=played_ms,
            cp_time_ms=race.cp_time_ms,
            lap_time_ms=race.lap_time_ms,
            native_score=float(race.native_score),
            end_reason=end_reason,
            left_playfield=race.left_playfield,
            tiles_visited_fraction=self.env.tile_visited_count / len(self.env.track),
            progress_fraction=1.0 if finished else min(1.0, (race.furthest_progress - race.geometry.start_distance) / race.lap),
            n_actions=n_actions,
        )
        for stage, ns in timings.items():
            stats[f"instrumentation__{stage}"] = ns / n_actions
        return stats

    def _append_finish_pseudo_step(self, race: _Race) -> None:
        """The state at the finish: real frame and floats, zone = first past the finish, progress = finish; every
        tile of the lap not touched by then is missed."""
        results, geometry, timings = race.results, race.geometry, race.timings
        frame = self._state_frames(race, self.render_frame(timings))
        all_floats = self.state_float(geometry, geometry.finish_zone_idx, geometry.finish_distance, race.previous_actions)
        results["frames"].append(frame)
        results["state_float"].append(self._network_floats(all_floats))
        results["car_gear_and_wheels"].append(all_floats[self._car_state_slice].copy())
        results["current_zone_idx"].append(geometry.finish_zone_idx)
        results["meters_advanced_along_centerline"].append(geometry.finish_distance)
        results[ROAD_TILES_TOUCHED].append(self.env.tile_visited_count)
        results[ROAD_TILES_MISSED].append(race.missed_tiles.judge_all(self.env.road))

    def _check_decision(self, decision) -> tuple[int, bool, float, np.ndarray]:
        try:
            action, was_greedy, value, q_values = decision
        except (TypeError, ValueError):
            raise ValueError(f"exploration_policy must return (action, action_was_greedy, value, q_values), got {decision!r}") from None
        try:
            valid = not isinstance(action, (bool, np.bool_)) and 0 <= operator.index(action) < self.n_actions
        except TypeError:
            valid = False
        if not valid:
            raise ValueError(
                f"exploration_policy returned action {action!r}, outside the action set range({self.n_actions}) "
                "of config_files/inputs_list.py"
            )
        q_values = np.array(q_values, dtype=np.float32)
        if q_values.shape != (self.n_actions,):
            raise ValueError(f"exploration_policy returned q_values of shape {q_values.shape}, expected ({self.n_actions},)")
        return operator.index(action), bool(was_greedy), float(value), q_values
