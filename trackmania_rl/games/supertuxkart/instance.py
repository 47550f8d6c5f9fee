"""SuperTuxKart time trials as a game instance (DESIGN §3.1-3.4, §4c), played the way Linesight plays Trackmania.

A map is a track in a direction (tracks.py); the track's driveline gives the zones, the progress along it and the
zone centers ahead, the kart's state the other floats, and the frame is the road around the kart drawn from the
driveline (view.py). The game runs in a process of its own (process.py, child.py): this process never imports it.
One action is held for `physics_steps_per_action` race steps of 100 ms; the zones follow the kart after every step.
"""

from __future__ import annotations

import math
import numbers
import operator
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import cv2
import numpy as np

from trackmania_rl.config.game_backends import MS_PER_PHYSICS_STEP, RACE_RULES, SUPERTUXKART
from trackmania_rl.config.loader import frame_shape
from trackmania_rl.games.base import (
    CENTERLINE_STATE_KEYS,
    ROLLOUT_ACTION_KEYS,
    ROLLOUT_STATE_KEYS,
    RULES_NATIVE,
    RULES_TRAINING,
    ExplorationPolicy,
    GameCrashed,
    GameInstance,
    MapSpec,
)
from trackmania_rl.games.frame_history import FrameHistory, repeated
from trackmania_rl.games.supertuxkart import floats as kart_floats
from trackmania_rl.games.supertuxkart.actions import controls_of, flags_of
from trackmania_rl.games.supertuxkart.child import STATE_INDEX
from trackmania_rl.games.supertuxkart.data import prepared_root
from trackmania_rl.games.supertuxkart.driveline import lap_centerline, road_quads
from trackmania_rl.games.supertuxkart.process import GameProcess, GameProcessDied, GameProcessError
from trackmania_rl.games.supertuxkart.tracks import KartMap, check_map
from trackmania_rl.games.supertuxkart.view import RoadView, heading_of
from trackmania_rl.games.zones import ZoneGeometry, ZoneTracker, make_zone_centers

MS_PER_STEP = MS_PER_PHYSICS_STEP[SUPERTUXKART]
START_TIMEOUT_S = 120.0  # loading a track: ~0.05-0.5 s
STEP_TIMEOUT_S = 60.0
AI_STEPS_PER_S = 200.0  # an AI race's allowance: at least this many race steps a second (it plays ~1,000-5,000)
FULL_VIEW_SIZE = (400, 400)  # (width, height) of render_full_view
FULL_VIEW_SCALE = 2.0  # the full view shows twice the frame's width of road

END_FINISHED = "finished"
END_TIME_CAP = "time_cap"  # native rules: supertuxkart_native_time_cap_ms of game time went by
_X, _Y, _Z = STATE_INDEX["x"], STATE_INDEX["y"], STATE_INDEX["z"]
_FRONT = slice(STATE_INDEX["front_x"], STATE_INDEX["front_z"] + 1)
_FINISHED, _FINISH_TIME = STATE_INDEX["finished"], STATE_INDEX["finish_time"]


class _Track(NamedTuple):
    """What a map fixes for every race on it: its zone centers, the road's quads and the frame's drawing of them."""

    zone_centers: np.ndarray
    quads: np.ndarray
    view: RoadView


class _Race:
    """The state of one race in play."""

    def __init__(self, cfg, geometry: ZoneGeometry, tracker: ZoneTracker, track: _Track, timings: dict, t_start: int, state):
        self.geometry, self.tracker, self.track = geometry, tracker, track
        self.timings, self.t_start = timings, t_start
        self.state = state  # the kart's state now (child.py STATE_FIELDS)
        self.results = {key: [] for key in ROLLOUT_STATE_KEYS + CENTERLINE_STATE_KEYS + ROLLOUT_ACTION_KEYS}
        self.stats = {}
        self.n_prev = cfg.n_prev_actions_in_inputs
        self.previous_actions = [None] * self.n_prev  # before the start: no flag pressed
        self.update_every = cfg.update_inference_network_every_n_actions
        self.lap = geometry.lap_length() / cfg.supertuxkart_laps
        self.split_distances = [geometry.start_distance + geometry.lap_length() * q / 4 for q in (1, 2, 3)]
        self.cp_time_ms = [0]
        self.lap_time_ms = None
        self.frames = FrameHistory(*frame_shape(cfg)) if cfg.frame_stack > 1 else None
        self.steps = 0
        self.furthest_progress = tracker.progress
        self.finish_time_ms = None


def validate_map_spec(map_spec, root: Path) -> KartMap:
    """The map of a MapSpec that names a race track of the data; ValueError (UnraceableMap) saying what is wrong."""
    if not isinstance(map_spec, MapSpec):
        raise ValueError(f"unknown map spec {map_spec!r}: SuperTuxKart expects a trackmania_rl.games.base.MapSpec(name, seed, ...)")
    seed = map_spec.seed
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"map spec {map_spec!r}: the seed must be an integer >= 0 (the race's seed)")
    return check_map(map_spec.name, root)


class SuperTuxKartGameInstance(GameInstance):
    """One SuperTuxKart game (a process of its own) driven one race at a time.

    `rules` (games/base.py): "training" ends a race at the finish (the game's: the laps driven), or by the config's
    cut-offs (no new zone within `cutoff_rollout_if_no_vcp_passed_within_duration_ms`, the race longer than
    `cutoff_rollout_if_race_not_finished_within_duration_ms`); "native" only at the finish or after
    `supertuxkart_native_time_cap_ms` of game time (a time trial has no limit, but a kart stuck on a wall would hang an
    evaluation). Cut-offs and the cap are checked at decisions; game time counts from the start signal.

    rollout_results: per state `frames` (uint8 (C, H, W)), `state_float`, `car_gear_and_wheels` (the floats VELOCITY to
    SKID), `current_zone_idx`, `meters_advanced_along_centerline`; per action `actions`, `action_was_greedy`, `q_values`,
    `input_w`; `furthest_zone_idx`; `race_time` (ms, the game's finish time) when finished, with a final pseudo-state at
    the finish (the zone past the finish, the finish's progress); metadata `map_name`, `seed`, `is_explo`, `fill_buffer`.

    end_race_stats: `race_finished`, `race_time` (the overall cut-off when not finished), `race_time_for_ratio` (game ms
    played), `cp_time_ms` (0, the times past 1/4, 2/4, 3/4 of the race's length, the finish), `lap_time_ms` (the first
    lap's time; None if it was not completed), `native_score` (1000 x `progress_fraction` - the seconds played: a
    finished race scores 1000 - its time in s, and by the native rules an unfinished one less than any finished one),
    `end_reason` ("finished", "overall", "no_progress", "time_cap"), `progress_fraction`, `n_actions`,
    `value_starting_frame`, `q_value_<i>_starting_frame` and the per-action timings `instrumentation__<stage>` (ns:
    reset, physics (the game's steps, its process's answer included), floats, render, exploration_policy,
    update_network, bookkeeping).

    The game's process dying (a crash, a kill) rebuilds it and raises GameCrashed: the race is dropped.
    """

    def __init__(self, cfg, rules: str = RULES_TRAINING, clock: Callable[[], int] = time.perf_counter_ns, folder: Path | None = None):
        """`folder`: the project's SuperTuxKart folder (data.py; default its usual place)."""
        if rules not in RACE_RULES:
            raise ValueError(f"race rules {rules!r}: expected one of {list(RACE_RULES)}")
        if cfg.game_backend != SUPERTUXKART or cfg.ms_per_action != cfg.physics_steps_per_action * MS_PER_STEP:
            raise ValueError(f"SuperTuxKartGameInstance needs a config built for the 'supertuxkart' backend, got {cfg.game_backend!r}")
        if cfg.frame_colour or cfg.frame_hud:
            raise ValueError("SuperTuxKart's frame is the road in grey: frame_colour and frame_hud must be False")
        self.rules, self.clock, self.cfg, self.folder = rules, clock, cfg, folder
        self.root = prepared_root(folder)
        self.float_layout = kart_floats.make_float_layout(cfg)
        full_layout = kart_floats.full_float_layout(cfg)
        self._network_dim = self.float_layout.dim
        self._car_state_slice = full_layout.span(kart_floats.CAR_STATE_FIRST, kart_floats.CAR_STATE_LAST)
        self.n_actions = len(cfg.inputs)
        self._controls = [controls_of(action) for action in cfg.inputs]
        self._flags = [flags_of(action) for action in cfg.inputs]
        self._no_flags = (0.0,) * len(self._flags[0])
        self._accelerates = [bool(action["accelerate"]) for action in cfg.inputs]
        self.frame_shape = frame_shape(cfg)
        self._lookahead = [k * cfg.one_every_n_zone_centers_in_inputs for k in range(cfg.n_zone_centers_in_inputs)]
        self._tracks: OrderedDict[str, _Track] = OrderedDict()
        self._shown: tuple | None = None  # (track, kart state, zone centers ahead) of the latest state, for the full view
        self.process = GameProcess(folder)

    # ----------------------------------------------------------------------------------------------
    # The game's process
    # ----------------------------------------------------------------------------------------------
    def _request(self, kind: str, timeout_s: float, **arguments):
        if self.process is None:  # a rebuild after a crash failed: try again
            self.process = GameProcess(self.folder)
        return self.process.request(kind, timeout_s, **arguments)

    def _crash(self, failure: Exception, map_spec: MapSpec) -> GameCrashed:
        """The error to raise for a race the game's process failed in; the process is rebuilt first."""
        self.process.close()
        try:
            self.process = GameProcess(self.folder)
        except Exception:  # the next request starts one (and says why it cannot)
            self.process = None
        return GameCrashed(
            f"SuperTuxKart failed during the race of map {map_spec.name!r} (seed {map_spec.seed}): {failure}; the game was rebuilt"
        )

    def _race_arguments(self, kart_map: KartMap, seed: int, difficulty: int | None = None, laps: int | None = None) -> dict:
        cfg = self.cfg
        return {
            "track": kart_map.track,
            "reverse": kart_map.reverse,
            "laps": int(laps if laps is not None else cfg.supertuxkart_laps),
            "difficulty": int(difficulty if difficulty is not None else cfg.supertuxkart_difficulty),
            "kart": cfg.supertuxkart_kart,
            "seed": int(seed),
        }

    def close(self) -> None:
        if self.process is not None:
            self.process.close()

    def update_config(self, cfg) -> None:
        """Take a reloaded config between races (cut-offs, the time cap, the update period). Settings that shape
        frames, floats, actions or the races are fixed for the life of the instance."""
        fixed = (
            "physics_steps_per_action",
            "H_downsized",
            "W_downsized",
            "frame_stack",
            "float_inputs",
            "n_prev_actions_in_inputs",
            "n_zone_centers_in_inputs",
            "one_every_n_zone_centers_in_inputs",
            "margin_to_announce_finish_meters",
            "distance_between_checkpoints",
            "n_zone_centers_extrapolate_before_start_of_map",
            "n_zone_centers_extrapolate_after_end_of_map",
            "temporal_mini_race_duration_ms",
            "inputs",
            "supertuxkart_kart",
            "supertuxkart_difficulty",
            "supertuxkart_laps",
            "supertuxkart_view_m",
        )
        changed = [name for name in fixed if getattr(cfg, name) != getattr(self.cfg, name)]
        if changed:
            raise ValueError(f"config settings {changed} cannot change in a running SuperTuxKartGameInstance")
        self.cfg = cfg

    # ----------------------------------------------------------------------------------------------
    # Maps and zones
    # ----------------------------------------------------------------------------------------------
    def zone_centers_for(self, map_spec: MapSpec) -> np.ndarray:
        """The (M, 3) zone centers of the map (cached per map name): the main route of its driveline, `laps` times."""
        kart_map = validate_map_spec(map_spec, self.root)
        if kart_map.name not in self._tracks:
            try:
                answer = self._request("start", START_TIMEOUT_S, **self._race_arguments(kart_map, map_spec.seed))
            except (GameProcessDied, GameProcessError) as failure:
                raise self._crash(failure, map_spec) from failure
            self._remember(kart_map, answer["driveline"])
        self._tracks.move_to_end(kart_map.name)
        return self._tracks[kart_map.name].zone_centers.copy()

    def _remember(self, kart_map: KartMap, driveline: dict) -> _Track:
        cfg = self.cfg
        track = self._tracks.get(kart_map.name)
        if track is None:
            zone_centers = make_zone_centers(
                lap_centerline(driveline, cfg.supertuxkart_laps),
                cfg.distance_between_checkpoints,
                cfg.n_zone_centers_extrapolate_before_start_of_map,
                cfg.n_zone_centers_extrapolate_after_end_of_map,
            )
            quads = road_quads(driveline)
            track = _Track(zone_centers, quads, RoadView(quads, cfg.H_downsized, cfg.W_downsized, cfg.supertuxkart_view_m))
            self._tracks[kart_map.name] = track
        return track

    def max_distance_to_zone_center(self) -> float:
        """How far from a zone center the kart may be for the zone to be entered (Linesight's rule)."""
        return math.hypot(self.cfg.distance_between_checkpoints / 2, self.cfg.road_width / 2)

    # ----------------------------------------------------------------------------------------------
    # The race
    # ----------------------------------------------------------------------------------------------
    def rollout(self, exploration_policy: ExplorationPolicy, map: MapSpec, zone_centers: np.ndarray, update_network: Callable[[], None]):
        kart_map = validate_map_spec(map, self.root)
        centers = np.asarray(zone_centers, np.float64)
        if centers.ndim != 2 or centers.shape[1] != 3:
            raise ValueError(f"SuperTuxKart zone centers must be an (M, 3) array, got shape {centers.shape}")
        geometry = ZoneGeometry(
            centers, self.cfg.n_zone_centers_extrapolate_before_start_of_map, self.cfg.n_zone_centers_extrapolate_after_end_of_map
        )
        try:
            race = self._start_race(kart_map, map, geometry)
            end_reason = self._play(race, exploration_policy, update_network)
        except (GameProcessDied, GameProcessError) as failure:
            raise self._crash(failure, map) from failure
        return self._end_race(race, map, end_reason)

    def _start_race(self, kart_map: KartMap, map_spec: MapSpec, geometry: ZoneGeometry) -> _Race:
        timings = dict.fromkeys(("reset", "physics", "floats", "render", "exploration_policy", "update_network"), 0)
        t_start = self.clock()
        answer = self._request("start", START_TIMEOUT_S, **self._race_arguments(kart_map, map_spec.seed))
        track = self._remember(kart_map, answer["driveline"])
        timings["reset"] = self.clock() - t_start
        if track.zone_centers.shape != geometry.centers.shape or not np.allclose(track.zone_centers, geometry.centers, atol=1e-6):
            raise ValueError(f"the zone centers do not belong to map {map_spec.name!r} (zone_centers_for gives its own)")
        tracker = ZoneTracker(geometry, self.max_distance_to_zone_center())
        state = answer["state"]
        tracker.update((state[_X], state[_Y], state[_Z]), 0)  # the kart waits a little behind the start line
        return _Race(self.cfg, geometry, tracker, track, timings, t_start, state)

    def _play(self, race: _Race, exploration_policy, update_network) -> str:
        """Decisions, each followed by its action held for its race steps, until the race ends by the rules; the reason."""
        cfg, clock, tracker, timings = self.cfg, self.clock, race.tracker, race.timings
        native = self.rules == RULES_NATIVE
        time_cap = cfg.supertuxkart_native_time_cap_ms
        overall_cutoff = cfg.cutoff_rollout_if_race_not_finished_within_duration_ms
        no_progress_cutoff = cfg.cutoff_rollout_if_no_vcp_passed_within_duration_ms
        split_distances, cp_time_ms = race.split_distances, race.cp_time_ms
        first_lap_end = race.geometry.start_distance + race.lap
        while True:
            played_ms = race.steps * MS_PER_STEP
            if native:
                if played_ms >= time_cap:
                    return END_TIME_CAP
            else:
                cutoff = tracker.cutoff_reason(played_ms, overall_cutoff, no_progress_cutoff)
                if cutoff is not None:
                    return cutoff
            action = self._decide(race, exploration_policy, update_network)
            t0 = clock()
            states = self._request("step", STEP_TIMEOUT_S, controls=self._controls[action], steps=cfg.physics_steps_per_action)
            timings["physics"] += clock() - t0
            for state in states:
                race.steps += 1
                played_ms = race.steps * MS_PER_STEP
                progress = tracker.update((state[_X], state[_Y], state[_Z]), played_ms)
                if progress > race.furthest_progress:
                    race.furthest_progress = progress
                    while len(cp_time_ms) <= len(split_distances) and progress >= split_distances[len(cp_time_ms) - 1]:
                        cp_time_ms.append(played_ms)
                    if race.lap_time_ms is None and progress >= first_lap_end:
                        race.lap_time_ms = played_ms
            race.state = states[-1]
            if race.state[_FINISHED]:
                race.finish_time_ms = int(round(race.state[_FINISH_TIME] * 1000))
                return END_FINISHED

    def _decide(self, race: _Race, exploration_policy, update_network) -> int:
        """One decision at the kart's state now: floats, the network update when due, the frame, the policy's action
        (each timed); the state and the decision are recorded."""
        clock, timings, results, tracker = self.clock, race.timings, race.results, race.tracker
        t0 = clock()
        all_floats = self.state_float(race, tracker.current_zone_idx, tracker.progress)
        state_float = all_floats if self._network_dim == len(all_floats) else all_floats[: self._network_dim].copy()
        timings["floats"] += clock() - t0
        n_done = len(results["actions"])
        if n_done % race.update_every == 0:
            t0 = clock()
            update_network()
            timings["update_network"] += clock() - t0
        frame = self._frame(race)
        t0 = clock()
        decision = exploration_policy(frame, state_float)
        timings["exploration_policy"] += clock() - t0
        action, was_greedy, value, q_values = self._check_decision(decision)
        results["frames"].append(frame)
        results["state_float"].append(state_float)
        results["car_gear_and_wheels"].append(all_floats[self._car_state_slice].copy())
        results["current_zone_idx"].append(tracker.current_zone_idx)
        results["meters_advanced_along_centerline"].append(tracker.progress)
        results["actions"].append(action)
        results["action_was_greedy"].append(was_greedy)
        results["q_values"].append(q_values)
        results["input_w"].append(self._accelerates[action])
        if n_done == 0:
            race.stats["value_starting_frame"] = value
            for i, q in enumerate(q_values.tolist()):
                race.stats[f"q_value_{i}_starting_frame"] = q
        if race.n_prev:
            race.previous_actions = race.previous_actions[1:] + [action]
        return action

    def _frame(self, race: _Race) -> np.ndarray:
        """The state's frames: the road drawn now ((1, H, W)), or the last frame_stack of them."""
        t0 = self.clock()
        state = race.state
        frame = race.track.view.draw((state[_X], state[_Y], state[_Z]), heading_of(state[_X : _Z + 1], state[_FRONT]))[None]
        race.timings["render"] += self.clock() - t0
        history = race.frames
        if history is None:
            return frame
        if history.started:
            history.push(frame)
        else:
            history.start(repeated(frame, history.c))
        return history.stack()

    def state_float(self, race: _Race, zone_idx: int, progress: float) -> np.ndarray:
        """Every float of the kart's state now (full_float_layout's); float 0, the mini-race clock, is 0."""
        state, geometry = race.state, race.geometry
        x, y, z = state[_X], state[_Y], state[_Z]
        hx, _, hz = heading_of((x, y, z), state[_FRONT])
        vx, vy, vz = state[STATE_INDEX["velocity_x"] : STATE_INDEX["velocity_z"] + 1]
        centers, last = geometry.center_tuples, geometry.n_zones - 1
        ahead = []
        for offset in self._lookahead:  # point-major (lateral, up, forward)
            cx, cy, cz = centers[min(zone_idx + offset, last)]
            dx, dz = cx - x, cz - z
            ahead += (dx * hz - dz * hx, cy - y, dx * hx + dz * hz)
        self._shown = (race.track, state, ahead)
        previous = [flag for action in race.previous_actions for flag in (self._no_flags if action is None else self._flags[action])]
        to_finish = min(self.cfg.margin_to_announce_finish_meters, max(0.0, geometry.distance_to_finish(progress)))
        values = (
            0.0,
            *previous,
            vx * hz - vz * hx,
            vy,
            vx * hx + vz * hz,
            state[STATE_INDEX["yaw_rate"]],
            state[STATE_INDEX["on_road"]],
            state[STATE_INDEX["jumping"]],
            state[STATE_INDEX["energy"]],
            state[STATE_INDEX["skid"]],
            *ahead,
            to_finish,
        )
        return np.array(values, dtype=np.float32)

    def _end_race(self, race: _Race, map_spec: MapSpec, end_reason: str) -> tuple[dict, dict]:
        results, geometry = race.results, race.geometry
        finished = end_reason == END_FINISHED
        if finished:  # the finish pseudo-state: the kart as it crossed the line, the zone past the finish
            frame = self._frame(race)
            all_floats = self.state_float(race, geometry.finish_zone_idx, geometry.finish_distance)
            results["frames"].append(frame)
            results["state_float"].append(all_floats if self._network_dim == len(all_floats) else all_floats[: self._network_dim].copy())
            results["car_gear_and_wheels"].append(all_floats[self._car_state_slice].copy())
            results["current_zone_idx"].append(geometry.finish_zone_idx)
            results["meters_advanced_along_centerline"].append(geometry.finish_distance)
            results["race_time"] = race.finish_time_ms
            race.cp_time_ms.append(race.finish_time_ms)
            if race.lap_time_ms is None or self.cfg.supertuxkart_laps == 1:
                race.lap_time_ms = race.finish_time_ms
        results["furthest_zone_idx"] = max(results["current_zone_idx"])
        results.update(map_name=map_spec.name, seed=int(map_spec.seed), is_explo=map_spec.is_explo, fill_buffer=map_spec.fill_buffer)
        played_ms = race.steps * MS_PER_STEP
        progress = 1.0 if finished else min(1.0, max(0.0, (race.furthest_progress - geometry.start_distance) / geometry.lap_length()))
        n_actions = len(results["actions"])
        timings = race.timings
        timings["bookkeeping"] = self.clock() - race.t_start - sum(timings.values())
        stats = race.stats
        stats.update(
            race_finished=finished,
            race_time=race.finish_time_ms if finished else self.cfg.cutoff_rollout_if_race_not_finished_within_duration_ms,
            race_time_for_ratio=played_ms,
            cp_time_ms=race.cp_time_ms,
            lap_time_ms=race.lap_time_ms,
            native_score=1000.0 * progress - (race.finish_time_ms if finished else played_ms) / 1000,
            end_reason=end_reason,
            progress_fraction=progress,
            n_actions=n_actions,
        )
        for stage, ns in timings.items():
            stats[f"instrumentation__{stage}"] = ns / max(1, n_actions)
        return results, stats

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
            raise ValueError(f"exploration_policy returned action {action!r}, outside the action set range({self.n_actions})")
        q_values = np.array(q_values, dtype=np.float32)
        if q_values.shape != (self.n_actions,):
            raise ValueError(f"exploration_policy returned q_values of shape {q_values.shape}, expected ({self.n_actions},)")
        return operator.index(action), bool(was_greedy), float(value), q_values

    # ----------------------------------------------------------------------------------------------
    # The game's AI, and the full view
    # ----------------------------------------------------------------------------------------------
    def ai_race(self, map_spec: MapSpec, difficulty: int | None = None, laps: int | None = None, time_cap_ms: int | None = None) -> dict:
        """One race of the map with the game's AI driving our kart (the same kart, at `difficulty`, default the
        config's: compare drivers at one difficulty only, it scales the kart too): {"map_name", "seed", "difficulty",
        "laps", "finished", "race_time_ms" (the game's finish time; None if not finished within `time_cap_ms`, default
        supertuxkart_native_time_cap_ms), "steps"}. GameCrashed if the game's process died (it is rebuilt)."""
        kart_map = validate_map_spec(map_spec, self.root)
        arguments = self._race_arguments(kart_map, map_spec.seed, difficulty, laps)
        if arguments["difficulty"] not in (0, 1, 2, 3):
            raise ValueError(f"difficulty {difficulty!r}: expected 0, 1, 2 or 3")
        cap_ms = time_cap_ms if time_cap_ms is not None else self.cfg.supertuxkart_native_time_cap_ms
        max_steps = max(1, math.ceil(cap_ms / MS_PER_STEP))
        try:
            answer = self._request("ai_race", START_TIMEOUT_S + max_steps / AI_STEPS_PER_S, max_steps=max_steps, **arguments)
        except (GameProcessDied, GameProcessError) as failure:
            raise self._crash(failure, map_spec) from failure
        finish = answer["finish_time"]
        return {
            "map_name": kart_map.name,
            "seed": int(map_spec.seed),
            "difficulty": arguments["difficulty"],
            "laps": arguments["laps"],
            "finished": answer["finished"],
            "race_time_ms": int(round(finish * 1000)) if answer["finished"] else None,
            "steps": answer["steps"],
        }

    def describe_map(self, map_spec: MapSpec) -> dict:
        """A race record's words for the map: its name, its track and direction, and the difficulty it is raced at."""
        kart_map = validate_map_spec(map_spec, self.root)
        return {"map": kart_map.name, "track": kart_map.track, "reverse": kart_map.reverse, "difficulty": self.cfg.supertuxkart_difficulty}

    def render_full_view(self) -> np.ndarray:
        """The road around the kart of the latest state, as a person would see it: FULL_VIEW_SIZE, RGB, twice the
        frame's width of road, the kart (a red triangle) and the zone centers ahead (yellow). Black before any race."""
        width, height = FULL_VIEW_SIZE
        if self._shown is None:
            return np.zeros((height, width, 3), np.uint8)
        track, state, ahead = self._shown
        view = RoadView(track.quads, height, width, self.cfg.supertuxkart_view_m * FULL_VIEW_SCALE)
        position = (state[_X], state[_Y], state[_Z])
        picture = cv2.cvtColor(view.draw(position, heading_of(position, state[_FRONT])), cv2.COLOR_GRAY2RGB)
        scale = view.px_per_m
        kx, ky = view.kart_px
        for lateral, _up, forward in np.reshape(ahead, (-1, 3)):
            cv2.circle(picture, (round(kx + lateral * scale), round(ky - forward * scale)), 3, (255, 220, 0), -1, cv2.LINE_AA)
        kart = np.array([[kx, ky - 1.0 * scale], [kx - 0.6 * scale, ky + 0.8 * scale], [kx + 0.6 * scale, ky + 0.8 * scale]])
        cv2.fillConvexPoly(picture, np.rint(kart).astype(np.int32), (220, 30, 30), cv2.LINE_AA)
        return picture
