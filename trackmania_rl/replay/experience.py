"""From one rollout to replay transitions: the n-step rule, rewards, shaping potentials, test split (DESIGN §3.5).

The rollout follows the contract of trackmania_rl/rollouts/contract.py (F states; A = F - 1 actions when
the race was finished, else F), checked by its `validate_rollout`. When the race was finished, `race_time`
(ms) is present and state F-1 is the finish pseudo-state (real frame and floats at the finish line, always
terminal, potential 0). Transitions are built for i = 0 .. F-2 in both cases.

For transition i (gamma = the learner's current gamma, N = cfg.n_steps):
- n = min(N, F-1-i), cut to reach exactly the first non-greedy action after i when
  `discard_non_greedy_actions_in_nsteps` (the action at i itself may be exploratory);
- rewards[j] = sum_{k<=j} gamma^k r_{i+k+1} for j < n (0 beyond: never read), r_{k+1} the reward of the
  step from state k to k+1 (`step_rewards`, plus the CarRacing terms `off_road_penalties` and
  `road_tile_rewards`, `missed_road_tile_penalties`, and `no_progress_penalties`);
- gammas[j] = gamma^(j+1);
- terminal_actions = F-1-i when the race was finished (steps left to the finish), else +inf;
- next state = state i+n.
Each state is stored once (`Experience` holds the states and, per transition, the index of its state and
of its next state), which is what lets the replay storage keep one frame per transition.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import numpy as np

from trackmania_rl.config.loader import frame_shape
from trackmania_rl.games.backend import game_backend
from trackmania_rl.games.base import CURRENT_ZONE, GAME_REWARD, METERS_ADVANCED, ROAD_TILES_MISSED, ROAD_TILES_TOUCHED
from trackmania_rl.games.float_layout import FloatLayout
from trackmania_rl.rollouts.contract import RACE_TIME, InvalidRollout, StackedSteps, require_reward_keys, validate_rollout


@dataclass
class Experience:
    """Transitions of one rollout (or a subset of them), struct-of-arrays; S states, T transitions.

    States (each stored once): `frames` (S, C, H, W) uint8, `state_float` (S, D) float32 with the clock
    (float 0) left at 0, `potential` (S,) float32 = Phi(s).
    Transitions, in rollout order: `state_index`, `next_state_index` (T,) int64 into the states (non-decreasing,
    next > state), `action` (T,) int64, `n_steps` (T,) int64 >= 1, `rewards` and `gammas` (T, N) float32,
    `terminal_actions` (T,) float32 (inf when the race was cut off).
    """

    frames: np.ndarray
    state_float: np.ndarray
    potential: np.ndarray
    state_index: np.ndarray
    next_state_index: np.ndarray
    action: np.ndarray
    n_steps: np.ndarray
    rewards: np.ndarray
    gammas: np.ndarray
    terminal_actions: np.ndarray

    STATE_FIELDS = ("frames", "state_float", "potential")
    TRANSITION_FIELDS = ("state_index", "next_state_index", "action", "n_steps", "rewards", "gammas", "terminal_actions")

    def __len__(self) -> int:
        return len(self.action)

    @property
    def n_states(self) -> int:
        return len(self.frames)

    def select(self, keep) -> Experience:
        """The transitions picked by a boolean mask or by increasing indices, with only the states they use."""
        keep = np.asarray(keep)
        idx = np.flatnonzero(keep) if keep.dtype == bool else keep.astype(np.int64)
        if len(idx) == len(self) and np.array_equal(idx, np.arange(len(self))):
            return self
        state_index, next_state_index = self.state_index[idx], self.next_state_index[idx]
        used = np.unique(np.concatenate([state_index, next_state_index]))
        return Experience(
            frames=self.frames[used],
            state_float=self.state_float[used],
            potential=self.potential[used],
            state_index=np.searchsorted(used, state_index),
            next_state_index=np.searchsorted(used, next_state_index),
            action=self.action[idx],
            n_steps=self.n_steps[idx],
            rewards=self.rewards[idx],
            gammas=self.gammas[idx],
            terminal_actions=self.terminal_actions[idx],
        )

    def tail(self, k: int) -> Experience:
        """The last k transitions (all of them when k >= len)."""
        k = max(0, min(int(k), len(self)))
        return self.select(np.arange(len(self) - k, len(self)))

    def transition(self, k: int) -> dict:
        """One transition as a dict of arrays (state, next state and stored targets), for tests and notebooks."""
        s, ns = self.state_index[k], self.next_state_index[k]
        return {
            "state_frame": self.frames[s],
            "state_float": self.state_float[s],
            "state_potential": float(self.potential[s]),
            "action": int(self.action[k]),
            "n_steps": int(self.n_steps[k]),
            "rewards": self.rewards[k],
            "gammas": self.gammas[k],
            "terminal_actions": float(self.terminal_actions[k]),
            "next_state_frame": self.frames[ns],
            "next_state_float": self.state_float[ns],
            "next_state_potential": float(self.potential[ns]),
        }

    @classmethod
    def concatenate(cls, parts: list[Experience]) -> Experience:
        """Several experiences one after the other (state indices shifted)."""
        offsets = np.cumsum([0] + [p.n_states for p in parts[:-1]])
        values = {}
        for f in fields(cls):
            arrays = [getattr(p, f.name) for p in parts]
            if f.name in ("state_index", "next_state_index"):
                arrays = [a + o for a, o in zip(arrays, offsets, strict=True)]
            values[f.name] = np.concatenate(arrays)
        return cls(**values)


def step_rewards(rollout_results: dict, cfg) -> np.ndarray:
    """r_{k+1} for the step from state k to k+1, k = 0..F-2 (float64, (F-1,)).

    constant_reward_per_ms x elapsed ms + reward_per_m_advanced_along_centerline x metres gained (a game without a
    centerline: none); elapsed is ms_per_action except for the last step of a finished race: race_time - (F-2) x
    ms_per_action.
    """
    n_steps = len(rollout_results["frames"]) - 1
    if n_steps <= 0:
        return np.zeros(0)
    require_reward_keys(rollout_results, cfg)
    if METERS_ADVANCED in rollout_results:
        progress = np.asarray(rollout_results[METERS_ADVANCED], dtype=np.float64)
    else:
        progress = np.zeros(n_steps + 1)
    elapsed_ms = np.full(n_steps, float(cfg.ms_per_action))
    if "race_time" in rollout_results and rollout_results["race_time"] is not None:
        elapsed_ms[-1] = float(rollout_results["race_time"]) - (n_steps - 1) * cfg.ms_per_action
        if elapsed_ms[-1] < 0:
            last_step_ms = (n_steps - 1) * cfg.ms_per_action
            raise InvalidRollout(f"race_time {rollout_results['race_time']} ms is before the last decision step ({last_step_ms} ms)")
    return cfg.constant_reward_per_ms * elapsed_ms + cfg.reward_per_m_advanced_along_centerline * np.diff(progress)


def potentials(state_float: np.ndarray, layout: FloatLayout, cfg, distance_fn: Callable | None = None) -> np.ndarray:
    """Phi(s) = shaped_reward_dist_to_cur_vcp x clip(distance to the current zone center, min, max), per state; 0 for a
    game without a centerline."""
    if distance_fn is None:  # the game backend says how far the car is from its zone center
        distance_fn = game_backend(cfg.game_backend).distance_to_current_zone_center
    if distance_fn is None or cfg.shaped_reward_dist_to_cur_vcp == 0:
        return np.zeros(len(state_float), np.float32)
    distance = distance_fn(layout, state_float)
    clipped = np.clip(distance, cfg.shaped_reward_min_dist_to_cur_vcp, cfg.shaped_reward_max_dist_to_cur_vcp)
    return (cfg.shaped_reward_dist_to_cur_vcp * clipped).astype(np.float32)


def off_road_penalties(state_float: np.ndarray, layout: FloatLayout, cfg) -> np.ndarray:
    """Per step k -> k+1 (k = 0..F-2): -off_road_penalty_per_action x how far off the road the car is in state k+1
    (the game backend reads it from the floats: CarRacing, the share of wheels off the road tiles)."""
    off_road_fraction = game_backend(cfg.game_backend).off_road_fraction
    if cfg.off_road_penalty_per_action == 0 or len(state_float) < 2 or off_road_fraction is None:
        return np.zeros(max(0, len(state_float) - 1))
    off_road = off_road_fraction(layout, state_float[1:])
    return -float(cfg.off_road_penalty_per_action) * np.asarray(off_road, dtype=np.float64)


def road_tile_rewards(rollout_results: dict, cfg) -> np.ndarray:
    """Per step k -> k+1 (k = 0..F-2): reward_per_new_road_tile x the road tiles first touched in that step (the
    native CarRacing score pays for each; the centerline progress pays a cut corner over the grass as well).

    With road_tile_reward_max_m_behind_furthest set, a step's tiles pay only when the car ends it at most that far
    behind the furthest progress it has reached: driving back for tiles missed earlier pays nothing."""
    n_steps = max(0, len(rollout_results["frames"]) - 1)
    require_reward_keys(rollout_results, cfg)
    if cfg.reward_per_new_road_tile == 0 or n_steps == 0:
        return np.zeros(n_steps)
    new_tiles = np.diff(np.asarray(rollout_results[ROAD_TILES_TOUCHED], dtype=np.float64))
    max_behind = cfg.road_tile_reward_max_m_behind_furthest
    if max_behind is not None:
        progress = np.asarray(rollout_results[METERS_ADVANCED], dtype=np.float64)
        behind_furthest = np.maximum.accumulate(progress) - progress
        new_tiles = np.where(behind_furthest[1:] <= max_behind, new_tiles, 0.0)
    return float(cfg.reward_per_new_road_tile) * new_tiles


def missed_road_tile_penalties(rollout_results: dict, cfg) -> np.ndarray:
    """Per step k -> k+1 (k = 0..F-2): -missed_road_tile_penalty x the road tiles judged missed in that step (driven
    past without being touched; at the finish, every tile the lap left untouched)."""
    n_steps = max(0, len(rollout_results["frames"]) - 1)
    require_reward_keys(rollout_results, cfg)
    if cfg.missed_road_tile_penalty == 0 or n_steps == 0:
        return np.zeros(n_steps)
    newly_missed = np.diff(np.asarray(rollout_results[ROAD_TILES_MISSED], dtype=np.float64))
    return -float(cfg.missed_road_tile_penalty) * newly_missed


def no_progress_penalties(rollout_results: dict, cfg) -> np.ndarray:
    """Per step k -> k+1 (k = 0..F-2): -no_progress_penalty on the last step of a race the no-progress cut-off ended,
    0 elsewhere. Which cut-off ended a race is read from its own records, so that every source's races are judged
    alike: not finished, played for less than the overall cut-off, and its last new furthest zone reached at least
    the no-progress window ago (less one action: progress is timed within an action, the cut-off at a decision)."""
    n_states = len(rollout_results["frames"])
    n_steps = max(0, n_states - 1)
    require_reward_keys(rollout_results, cfg)
    penalties = np.zeros(n_steps)
    if cfg.no_progress_penalty == 0 or n_steps == 0 or RACE_TIME in rollout_results:
        return penalties
    zones = np.asarray(rollout_results[CURRENT_ZONE])
    first_at_furthest = int(np.argmax(zones))
    played_ms = n_states * cfg.ms_per_action  # a cut-off race played one action per state
    since_progress_ms = (n_states - first_at_furthest) * cfg.ms_per_action
    if (
        played_ms < cfg.cutoff_rollout_if_race_not_finished_within_duration_ms
        and since_progress_ms >= cfg.cutoff_rollout_if_no_vcp_passed_within_duration_ms - cfg.ms_per_action
    ):
        penalties[-1] = -float(cfg.no_progress_penalty)
    return penalties


def game_rewards(rollout_results: dict, cfg) -> np.ndarray:
    """Per step k -> k+1 (k = 0..F-2): reward_per_game_point x the game's own reward of action k (`game_reward`),
    clipped to +-game_reward_clip first when that is set (Atari agents clip to 1: a score's scale differs by game)."""
    n_steps = max(0, len(rollout_results["frames"]) - 1)
    require_reward_keys(rollout_results, cfg)
    if cfg.reward_per_game_point == 0 or n_steps == 0:
        return np.zeros(n_steps)
    points = np.asarray(rollout_results[GAME_REWARD][:n_steps], dtype=np.float64)
    if cfg.game_reward_clip is not None:
        points = np.clip(points, -cfg.game_reward_clip, cfg.game_reward_clip)
    return float(cfg.reward_per_game_point) * points


def n_steps_per_transition(action_was_greedy, n_states: int, n_steps_max: int, discard_non_greedy: bool) -> np.ndarray:
    """n for each transition i = 0..F-2 (int64)."""
    n_transitions = n_states - 1
    i = np.arange(n_transitions)
    n = np.minimum(n_steps_max, n_states - 1 - i)
    if discard_non_greedy and n_transitions > 0:
        greedy = np.asarray(action_was_greedy[:n_transitions], dtype=bool)
        never = n_transitions + n_steps_max
        position = np.where(greedy, never, i)  # positions of non-greedy actions
        first_from = np.minimum.accumulate(position[::-1])[::-1]  # first non-greedy at or after i
        first_after = np.append(first_from[1:], never)  # first non-greedy strictly after i
        n = np.minimum(n, first_after - i)
    return n.astype(np.int64)


def rollout_to_experience(
    rollout_results: dict,
    cfg,
    layout: FloatLayout,
    gamma: float,
    distance_fn: Callable | None = None,
    *,
    steps: StackedSteps | None = None,
) -> Experience:
    """All transitions of one rollout (see the module docstring). Raises InvalidRollout.

    `steps`: what the contract check returned for a caller that has just made it (the learner); None: checked here."""
    if steps is None:
        steps = validate_rollout(rollout_results, frame_shape(cfg), layout.dim, len(cfg.inputs))
    n_states = len(steps.frames)
    finished = RACE_TIME in rollout_results
    n_max = cfg.n_steps
    n_transitions = n_states - 1
    frames, state_float = steps.frames, steps.state_float
    actions = np.asarray(rollout_results["actions"][:n_transitions], dtype=np.float64)

    phi = potentials(state_float, layout, cfg, distance_fn)
    if finished:
        phi[-1] = 0.0  # the finish pseudo-state
    off_road = off_road_penalties(state_float, layout, cfg)
    if finished and n_transitions:
        off_road[-1] = 0.0  # reaching the finish pseudo-state is never penalised
    r = (
        step_rewards(rollout_results, cfg)
        + off_road
        + road_tile_rewards(rollout_results, cfg)
        + missed_road_tile_penalties(rollout_results, cfg)
        + no_progress_penalties(rollout_results, cfg)
        + game_rewards(rollout_results, cfg)
    )
    n = n_steps_per_transition(rollout_results["action_was_greedy"], n_states, n_max, cfg.discard_non_greedy_actions_in_nsteps)

    i = np.arange(n_transitions)
    rewards = np.zeros((n_transitions, n_max), dtype=np.float32)
    partial_sum = np.zeros(n_transitions)
    for j in range(n_max):
        valid = j < n
        step = np.minimum(i + j, max(n_transitions - 1, 0))
        partial_sum = partial_sum + np.where(valid, gamma**j * r[step] if n_transitions else 0.0, 0.0)
        rewards[:, j] = np.where(valid, partial_sum, 0.0)
    gammas = np.tile((gamma ** np.arange(1, n_max + 1)).astype(np.float32), (n_transitions, 1))
    terminal_actions = (n_states - 1 - i).astype(np.float32) if finished else np.full(n_transitions, np.inf, np.float32)
    return Experience(
        frames=frames,
        state_float=state_float,
        potential=phi.astype(np.float32),
        state_index=i.astype(np.int64),
        next_state_index=(i + n).astype(np.int64),
        action=actions.astype(np.int64),
        n_steps=n,
        rewards=rewards,
        gammas=gammas,
        terminal_actions=terminal_actions,
    )


def route_to_test(n_transitions: int, cfg, rng: np.random.Generator) -> np.ndarray:
    """Which transitions go to the hidden test buffer (bool (T,)).

    The destination is drawn at the start (test with probability buffer_test_ratio) and re-drawn the same way
    before each step with probability buffer_test_switch_probability, so test transitions come in short runs of
    consecutive steps (mean length 1 / (switch x (1 - ratio)), about 10 with the defaults) and make up
    buffer_test_ratio of all transitions on average.
    """
    if n_transitions <= 0:
        return np.zeros(0, dtype=bool)
    redraw = rng.random(n_transitions) < cfg.buffer_test_switch_probability
    redraw[0] = True
    destination = rng.random(n_transitions) < cfg.buffer_test_ratio
    last_draw = np.maximum.accumulate(np.where(redraw, np.arange(n_transitions), 0))
    return destination[last_draw]


def fill_buffers(
    rollout_results: dict,
    buffer,
    buffer_test,
    cfg,
    layout: FloatLayout,
    gamma: float,
    rng: np.random.Generator,
    distance_fn: Callable | None = None,
    *,
    steps: StackedSteps | None = None,
) -> tuple[int, int]:
    """Turn one rollout into transitions and append them to the train and test buffers.

    `buffer_test` may be None (everything goes to `buffer`). Returns (n_train, n_test). Raises InvalidRollout
    before touching either buffer when the rollout is broken (`steps`: as for rollout_to_experience).
    """
    experience = rollout_to_experience(rollout_results, cfg, layout, gamma, distance_fn, steps=steps)
    if buffer_test is None:
        is_test = np.zeros(len(experience), dtype=bool)
    else:
        is_test = route_to_test(len(experience), cfg, rng)
    n_test = int(is_test.sum())
    n_train = len(experience) - n_test
    if n_train:
        buffer.extend(experience.select(~is_test))
    if n_test:
        buffer_test.extend(experience.select(is_test))
    return n_train, n_test
