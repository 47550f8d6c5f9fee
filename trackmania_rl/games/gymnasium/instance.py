"""A registered Gymnasium env with an image observation, played as races (games/base.py GameInstance).

What the network gets is what a person would see, nothing read from the game's memory: the env's image made grey (or
kept in colour: frame_colour), resized and the last `frame_stack` of them stacked (frames.py), and the floats of
floats.py (the mini-race clock, the agent's own previous actions). The reward is the env's own (`game_reward` per
action, summed over the env steps an action is held for: `physics_steps_per_action`).

A map is the env's reset seed (`MapSpec.seed`): training, held-out and test seeds stay apart as for CarRacing.

Races end by the instance's `rules`:
- "native": the env's own episode end, nothing else: `terminated` (the game is over: the race's last state is
  terminal, `race_time` set) or `truncated` (its time limit: the race is cut off, its last state bootstraps);
- "training": the same, and besides, a race of an episode still going after
  `cutoff_rollout_if_race_not_finished_within_duration_ms` of game time is handed over cut off (it bootstraps) and the
  next race goes on with the same episode from where it stopped (an Atari episode lasts up to 30 minutes: 27,000
  actions would be one rollout of ~760 MB). The map of that next race is not used until the episode ends. Only races
  that fill the buffer go on with an episode: an evaluation race (`fill_buffer` False: held-out, evaluate.py, watch.py)
  always starts its own map's episode, and leaves none to go on with.

end_race_stats: `race_finished` (False: a race of these games has no finish line), `race_time` (the overall cut-off,
as for an unfinished CarRacing race), `race_time_for_ratio` (game ms played), `native_score` (the env's reward summed
over this race), `episode_return` and `episode_actions` (the episode's whole, in the race where it ended),
`episode_seed`, `end_reason` ("terminated", "truncated", or "cutoff": the episode goes on in the next race),
`progress_fraction` (0: no track to measure it on), `n_actions`, `value_starting_frame`, and the collector-loop
timings `instrumentation__<stage>` in ns per action (reset, env_step, frame, floats, exploration_policy,
update_network, bookkeeping).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from trackmania_rl.config.loader import frame_shape
from trackmania_rl.config.schema import ConfigError
from trackmania_rl.games.base import GAME_REWARD, RACE_RULES, RULES_TRAINING, GameCrashed, GameInstance, MapSpec
from trackmania_rl.games.frame_history import FrameHistory, repeated
from trackmania_rl.games.gymnasium import floats as gym_floats
from trackmania_rl.games.gymnasium.actions import env_actions
from trackmania_rl.games.gymnasium.frames import FramePreparer

END_TERMINATED, END_TRUNCATED, END_CUTOFF = "terminated", "truncated", "cutoff"
STAGES = ("reset", "env_step", "frame", "floats", "exploration_policy", "update_network")
ALE_NAMESPACE = "ALE/"


def make_env(cfg):
    """`gymnasium.make(cfg.gymnasium_env_id, render_mode="rgb_array", **cfg.gymnasium_env_kwargs)`, Atari's ROMs
    registered first. ConfigError for an env that is not registered, whose package is missing or that refuses the
    keyword arguments."""
    import gymnasium

    env_id = cfg.gymnasium_env_id
    if env_id.startswith(ALE_NAMESPACE):
        try:
            import ale_py
        except ImportError:
            raise ConfigError(
                f"setting `gymnasium_env_id` = {env_id!r} needs ale-py, the Atari emulator: pip install -e '.[atari]'"
            ) from None
        gymnasium.register_envs(ale_py)
    kwargs = dict(cfg.gymnasium_env_kwargs or {})
    try:
        return gymnasium.make(env_id, render_mode="rgb_array", **kwargs)
    except gymnasium.error.Error as e:
        raise ConfigError(f"setting `gymnasium_env_id` = {env_id!r}: {type(e).__name__}: {e}") from None
    except (TypeError, ValueError) as e:  # an argument the env does not take, or a value it refuses
        raise ConfigError(f"setting `gymnasium_env_kwargs` = {kwargs!r} for {env_id!r}: {type(e).__name__}: {e}") from None


def describe_env(cfg, env) -> list[int]:
    """The env action of each action of the action set; ConfigError naming the setting when the env cannot be played
    (not discrete actions, no image observation, an action that maps to nothing)."""
    import gymnasium

    env_id = cfg.gymnasium_env_id
    if not isinstance(env.action_space, gymnasium.spaces.Discrete):
        raise ConfigError(f"setting `gymnasium_env_id` = {env_id!r}: its actions are {env.action_space}, not discrete")
    space = env.observation_space
    if not isinstance(space, gymnasium.spaces.Box) or space.dtype != np.uint8:
        raise ConfigError(f"setting `gymnasium_env_id` = {env_id!r}: its observation {space} is not a uint8 image")
    FramePreparer(cfg).check(space.shape, env_id)
    meanings = getattr(env.unwrapped, "get_action_meanings", None)
    return env_actions(cfg, int(env.action_space.n), list(meanings()) if meanings else None)


@dataclass
class _Episode:
    """An env episode under way (it may go on over several races)."""

    seed: int
    recent: np.ndarray  # (C, H, W): the state it stands at
    previous_actions: list
    actions: int = 0
    game_return: float = 0.0


@dataclass
class _Race:
    results: dict
    timings: dict = field(default_factory=lambda: dict.fromkeys(STAGES, 0))
    score: float = 0.0
    end_reason: str | None = None
    value_start: float = 0.0  # the value and Q values the policy gave the race's first state
    q_start: tuple = ()


class GymnasiumGameInstance(GameInstance):
    """See the module docstring. Errors: a config that does not fit the env raises ConfigError; when the env raises
    during a race, it is rebuilt and GameCrashed raised (the race is dropped, its episode too)."""

    def __init__(self, cfg, rules: str = RULES_TRAINING, clock: Callable[[], int] = time.perf_counter_ns):
        if rules not in RACE_RULES:
            raise ValueError(f"race rules {rules!r}: expected one of {list(RACE_RULES)}")
        if cfg.game_backend != "gymnasium":
            raise ValueError(f"GymnasiumGameInstance needs a config built for the 'gymnasium' backend, got {cfg.game_backend!r}")
        self.rules = rules
        self.clock = clock
        self.cfg = cfg
        self.float_layout = gym_floats.make_float_layout(cfg)
        self.frame_shape = frame_shape(cfg)
        self.prepare = FramePreparer(cfg)
        self._flags = [[float(a[f]) for f in gym_floats.ACTION_FLAGS] for a in cfg.inputs]
        self._accelerates = [bool(a["accelerate"]) for a in cfg.inputs]
        self.env = make_env(cfg)
        try:
            self.env_actions = describe_env(cfg, self.env)
        except BaseException:
            self.env.close()
            raise
        self._episode: _Episode | None = None

    def close(self) -> None:
        self.env.close()

    def update_config(self, cfg) -> None:
        """A reloaded config between races; the settings that shape frames, floats or actions stay as they were."""
        fixed = ("gymnasium_env_id", "gymnasium_env_kwargs", "frame_stack", "frame_colour", "H_downsized", "W_downsized", "frame_crop")
        fixed += ("physics_steps_per_action",)
        fixed += ("n_prev_actions_in_inputs", "temporal_mini_race_duration_ms", "inputs", "gymnasium_actions", "gymnasium_action_words")
        changed = [name for name in fixed if getattr(cfg, name) != getattr(self.cfg, name)]
        if changed:
            raise ValueError(f"config settings {changed} cannot change in a running GymnasiumGameInstance")
        self.cfg = cfg

    def render_full_view(self) -> np.ndarray:
        """The env's own RGB picture now (its `render()`), for videos; the race is left as it is."""
        return np.asarray(self.env.render())

    # ----------------------------------------------------------------------------------------------
    def rollout(self, exploration_policy, map: MapSpec, zone_centers: np.ndarray, update_network: Callable[[], None]) -> tuple[dict, dict]:
        if not isinstance(map, MapSpec) or isinstance(map.seed, bool) or not isinstance(map.seed, (int, np.integer)) or map.seed < 0:
            raise ValueError(f"a map spec with a seed >= 0 is needed, got {map!r}")
        try:
            return self._play(exploration_policy, map, update_network)
        except _EnvFailure as failure:
            self._episode = None
            try:
                self.env.close()
            except Exception:  # the broken env may fail to close too; it is dropped either way
                pass
            self.env = make_env(self.cfg)
            raise GameCrashed(
                f"{self.cfg.gymnasium_env_id} raised {failure.__cause__!r} during the race of map {map.name!r} (seed {map.seed}); "
                "the env was rebuilt and the race must be dropped"
            ) from failure.__cause__

    def _play(self, exploration_policy, map_spec: MapSpec, update_network) -> tuple[dict, dict]:
        cfg, clock = self.cfg, self.clock
        t_start = clock()
        race = _Race({key: [] for key in ("frames", "state_float", "actions", "action_was_greedy", "q_values", "input_w", GAME_REWARD)})
        # only a training race goes on with the episode a training race left: an evaluation race starts its map's own
        continues = self.rules == RULES_TRAINING and map_spec.fill_buffer
        episode = self._episode if continues else None
        if episode is None:
            episode = self._new_episode(int(map_spec.seed))
        race.timings["reset"] = clock() - t_start
        history = FrameHistory(*self.frame_shape)
        history.start(episode.recent)
        results, timings = race.results, race.timings
        max_actions = cfg.cutoff_rollout_if_race_not_finished_within_duration_ms // cfg.ms_per_action
        steps_per_action = cfg.physics_steps_per_action
        update_every = cfg.update_inference_network_every_n_actions
        terminated = False
        while True:
            n_done = len(results["actions"])
            t0 = clock()
            state_float = self._state_float(episode.previous_actions)
            timings["floats"] += clock() - t0
            if n_done % update_every == 0:
                t0 = clock()
                update_network()
                timings["update_network"] += clock() - t0
            frame = history.stack()
            t0 = clock()
            action, was_greedy, _value, q_values = exploration_policy(frame, state_float)
            timings["exploration_policy"] += clock() - t0
            if isinstance(action, bool) or not isinstance(action, (int, np.integer)) or not 0 <= action < len(self.env_actions):
                raise ValueError(f"the policy chose action {action!r}: the action set has {len(self.env_actions)}")
            results["frames"].append(frame)
            results["state_float"].append(state_float)
            results["actions"].append(int(action))
            results["action_was_greedy"].append(bool(was_greedy))
            results["q_values"].append(np.asarray(q_values, np.float32))
            results["input_w"].append(self._accelerates[action])
            if n_done == 0:
                race.value_start, race.q_start = float(_value), tuple(np.asarray(q_values, np.float32))
            reward, image, terminated, truncated = self._hold(int(action), steps_per_action, timings)
            results[GAME_REWARD].append(reward)
            race.score += reward
            episode.previous_actions.append(int(action))
            episode.actions += 1
            t0 = clock()
            history.push(self.prepare(image))
            timings["frame"] += clock() - t0
            if terminated:  # the game is over: its last state is terminal
                results["frames"].append(history.stack())
                results["state_float"].append(self._state_float(episode.previous_actions))
                race.end_reason = END_TERMINATED
                break
            if truncated:
                race.end_reason = END_TRUNCATED
                break
            if self.rules == RULES_TRAINING and len(results["actions"]) >= max_actions:
                race.end_reason = END_CUTOFF
                break
        episode.game_return += race.score
        episode.recent = history.stack().copy()
        self._episode = episode if continues and race.end_reason == END_CUTOFF else None
        n_actions = len(results["actions"])
        if terminated:
            results["race_time"] = max(1, int(round(n_actions * cfg.ms_per_action)))
        return results, self._end_race_stats(race, episode, n_actions, clock() - t_start)

    def _state_float(self, previous_actions: list) -> np.ndarray:
        """The floats: the clock (0 while acting) and the flags of the last n_prev_actions_in_inputs actions, oldest
        first; before an episode's first actions, no flag."""
        n_prev = self.cfg.n_prev_actions_in_inputs
        recent = previous_actions[-n_prev:] if n_prev else []
        flags = [0.0] * (4 * (n_prev - len(recent)))
        for action in recent:
            flags += self._flags[action]
        return np.array([0.0, *flags], np.float32)

    def _new_episode(self, seed: int) -> _Episode:
        try:
            image, _ = self.env.reset(seed=seed)
        except Exception as e:
            raise _EnvFailure() from e
        return _Episode(seed, repeated(self.prepare(image), self.cfg.frame_stack), [])

    def _hold(self, action: int, steps: int, timings: dict) -> tuple[float, np.ndarray, bool, bool]:
        """The env action of `action` for `steps` env steps (fewer when the episode ends): (reward summed, last image,
        terminated, truncated)."""
        clock = self.clock
        t0 = clock()
        reward, env_action = 0.0, self.env_actions[action]
        try:
            for _ in range(steps):
                image, step_reward, terminated, truncated, _ = self.env.step(env_action)
                reward += float(step_reward)
                if terminated or truncated:
                    break
        except Exception as e:
            raise _EnvFailure() from e
        timings["env_step"] += clock() - t0
        return reward, image, bool(terminated), bool(truncated)

    def _end_race_stats(self, race: _Race, episode: _Episode, n_actions: int, total_ns: int) -> dict:
        cfg = self.cfg
        stats = {
            "race_finished": False,
            "race_time": cfg.cutoff_rollout_if_race_not_finished_within_duration_ms,
            "race_time_for_ratio": n_actions * cfg.ms_per_action,
            "native_score": race.score,
            "episode_seed": episode.seed,
            "end_reason": race.end_reason,
            "progress_fraction": 0.0,
            "n_actions": n_actions,
            "value_starting_frame": race.value_start,
        }
        for i, q in enumerate(race.q_start):
            stats[f"q_value_{i}_starting_frame"] = float(q)
        if race.end_reason != END_CUTOFF:
            stats["episode_return"] = episode.game_return
            stats["episode_actions"] = episode.actions
        timings = race.timings
        timings["bookkeeping"] = max(0, total_ns - sum(timings.values()))
        for stage, ns in timings.items():
            stats[f"instrumentation__{stage}"] = ns / max(1, n_actions)
        return stats


class _EnvFailure(Exception):
    """The env raised; the cause is the env's exception."""
