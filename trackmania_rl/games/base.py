"""The game contract (DESIGN §3.1): a game instance, the races it plays, and a backend's description."""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

# the race rules' names live in the config layer (its settings take them); the contract's users import them from here
from trackmania_rl.config.game_backends import RACE_RULES as RACE_RULES
from trackmania_rl.config.game_backends import RULES_NATIVE as RULES_NATIVE
from trackmania_rl.config.game_backends import RULES_TRAINING
from trackmania_rl.config.schema import KART_ACTION_FLAGS, ConfigError
from trackmania_rl.games.float_layout import FloatLayout

# rollout_results (DESIGN §3.2) as a game instance returns it: lists with one entry per state, lists with one
# entry per action (rollouts/contract.py adds what a rollout source attaches and checks both). Every game has these:
ROLLOUT_STATE_KEYS = ("frames", "state_float")
ROLLOUT_ACTION_KEYS = ("actions", "action_was_greedy", "q_values", "input_w")
# A game with a centerline (CarRacing; Trackmania) also gives, per state, the zone the car is in, its progress along
# the centerline (`reward_per_m_advanced_along_centerline` needs it) and its car state, and the race's furthest zone
CENTERLINE_STATE_KEYS = ("current_zone_idx", "meters_advanced_along_centerline", "car_gear_and_wheels")
CURRENT_ZONE = "current_zone_idx"
METERS_ADVANCED = "meters_advanced_along_centerline"
FURTHEST_ZONE = "furthest_zone_idx"  # a scalar: max(current_zone_idx)
# per action, where the game has it: the game's own reward of the step the action was held for (Gymnasium envs; the
# score the game shows); `reward_per_game_point` needs it
GAME_REWARD = "game_reward"
# per state, where the game has it: how many distinct road tiles the car has touched since the start (CarRacing;
# its native score pays for each); `reward_per_new_road_tile` needs it
ROAD_TILES_TOUCHED = "road_tiles_touched"
# per state, where the game has it: how many road tiles of the lap the car has driven past without touching them
# (CarRacing: its native episode only ends once every tile is touched); `missed_road_tile_penalty` needs it
ROAD_TILES_MISSED = "road_tiles_missed"
ROAD_TILE_COUNTS = (ROAD_TILES_TOUCHED, ROAD_TILES_MISSED)
# which optional keys a race carries, by what the game has (GameBackend.race_keys)
CENTERLINE_RACE_KEYS = CENTERLINE_STATE_KEYS + (FURTHEST_ZONE,)

# How a race ends (the `rules` of a game instance):
# - "training": the trainer's own end of a race: the car crosses the finish line after one lap, or a cut-off ends
#   it (the overall duration `cutoff_rollout_if_race_not_finished_within_duration_ms`, no new zone within
#   `cutoff_rollout_if_no_vcp_passed_within_duration_ms`), or the game's own failure (CarRacing: off the
#   playfield). What collectors and the held-out evaluation play.
# - "native": only what ends an episode of the game itself, as its publishers define it (CarRacing: Gymnasium's
#   registered CarRacing-v3, its TimeLimit included), so that scores compare with published ones.
# (RULES_NATIVE and RULES_TRAINING: config/game_backends.py, imported above)

# exploration_policy(frame uint8 (C, H, W): the last C = frame_stack frames, oldest first, state_float float32 (D,))
# -> (action, action_was_greedy, value, q_values)
ExplorationPolicy = Callable[[np.ndarray, np.ndarray], tuple]


@dataclass(frozen=True)
class MapSpec:
    """One concrete race: a map name (for logs and trained/blind status) and the game's map id.

    For CarRacing the id is a track seed; for SuperTuxKart the name is the track and the seed the race's. `is_explo` and
    `fill_buffer` come from the map cycle.
    """

    name: str
    seed: int
    is_explo: bool = True
    fill_buffer: bool = True


# the name of an evaluation race's map given by its seed alone (CarRacing's tracks, a Gymnasium env's reset seeds)
EVAL_MAP_NAME = "eval"


def seed_map(seed: int) -> MapSpec:
    """The evaluation race (greedy, stored nowhere) on the map of `seed`."""
    return MapSpec(name=EVAL_MAP_NAME, seed=int(seed), is_explo=False, fill_buffer=False)


def held_out_seed_maps(cfg) -> list[MapSpec]:
    """The held-out evaluation's maps of a game whose maps are seeds: the config's `held_out_seeds`."""
    return [seed_map(seed) for seed in cfg.held_out_seeds]


def refuse_kart_flags(cfg, game: str) -> None:
    """ConfigError naming the first action of the config's action set that presses drift, nitro or rescue
    (config/schema.py KART_ACTION_FLAGS): SuperTuxKart's own controls, which `game` has not and would silently drop."""
    for i, action in enumerate(cfg.inputs):
        pressed = [flag for flag in KART_ACTION_FLAGS if action.get(flag)]
        if pressed:
            name = cfg.action_set[i] if cfg.action_set is not None else f"inputs[{i}]"
            raise ConfigError(
                f"setting `action_set`: action {name!r} presses {' and '.join(pressed)}, which {game} has not "
                "(only SuperTuxKart plays drift, nitro and rescue): remove it or drop those flags"
            )


class GameCrashed(RuntimeError):
    """The game failed during a race; the instance was rebuilt and the race must be dropped."""


class GameInstance(abc.ABC):
    """One game, driven one race at a time by one collector. `rules`: how its races end (RACE_RULES)."""

    float_layout: FloatLayout
    rules: str = RULES_TRAINING

    def zone_centers_for(self, map_spec: MapSpec) -> np.ndarray:
        """The map's zone centers (M, dims): centerline resampled, extrapolated before start and after finish. A game
        without a centerline has none: (0, 0)."""
        return np.zeros((0, 0), np.float32)

    @abc.abstractmethod
    def rollout(
        self,
        exploration_policy: ExplorationPolicy,
        map: MapSpec,
        zone_centers: np.ndarray,
        update_network: Callable[[], None],
    ) -> tuple[dict, dict]:
        """Play one race; return (rollout_results, end_race_stats) as DESIGN §3.2.

        Raises GameCrashed when the game failed mid-race (the instance rebuilds itself first).
        """

    def describe_map(self, map_spec: MapSpec) -> dict:
        """What a race record says of the map beyond its seed (rollouts/greedy.py race_record): {} for a map that is a
        seed; a game whose maps have names gives the name and what it means (SuperTuxKart: the track, its direction,
        the difficulty)."""
        return {}

    def ai_race(self, map_spec: MapSpec, difficulty: int | None = None, laps: int | None = None, time_cap_ms: int | None = None) -> dict:
        """One race of the map driven by the game's own AI, for a reference time (SuperTuxKart's instance says what it
        returns). NotImplementedError for a game without one."""
        raise NotImplementedError(f"{type(self).__name__}: this game has no AI driver of its own")

    def close(self) -> None:  # noqa: B027 (a default that does nothing: a game without resources need not override it)
        """Release the game's resources."""


@dataclass(frozen=True)
class GameBackend:
    """One game as the rest of the code sees it (games/backend.py `game_backend(name)` finds it by name).

    - `make_float_layout(cfg) -> FloatLayout`: the float inputs' layout, without starting the game;
    - `make_game_instance(cfg, rules) -> GameInstance`: a game to play races in (DESIGN §3.1), ending them by
      `rules` (RULES_TRAINING or RULES_NATIVE);
    - `distance_to_current_zone_center(layout, state_float) -> distances`: from the car to the current
      zone center, read from the floats (one state (D,) or a batch (..., D)); the reward-shaping
      potential is made from it (DESIGN §3.5); None for a game without a centerline (the potential is 0);
    - `off_road_fraction(layout, state_float) -> fractions in [0, 1]`: how far off the road the car is, read from
      the floats (CarRacing: the share of its wheels touching no road tile); the off-road reward term is made
      from it (`off_road_penalty_per_action`, replay/experience.py); None for a game that does not know;
    - `render_full_view(game) -> (H, W, 3) uint8`: the game's full view now, in RGB, as a person would
      see it (videos), rendered without changing the race;
    - `full_view_size(cfg)`: (width, height) of that view;
    - `frame_preprocessing(cfg) -> str`: how the game's view becomes the network's uint8 frame under `cfg` (its
      renderer, its frame size), in words, for clients that produce frames in another language (the ONNX policy's
      sidecar, agents/onnx_export.py);
    - `frame_renderer(cfg) -> str`: the word naming which of the game's ways of drawing its frames `cfg` uses, where it
      has more than one (CarRacing: its `frame_renderer`, "fast" or "pygame"); the ONNX sidecar's `frame.renderer`.
      None: the game draws its frames one way only, and the sidecar names no renderer;
    - `race_keys`: the optional rollout keys (CENTERLINE_RACE_KEYS, ROAD_TILE_COUNTS, GAME_REWARD) its races carry:
      the HTTP wire requires them of this game's clients, and says so (rollouts/http/wire.py);
    - `check_config(cfg)`: ConfigError naming the setting that cannot work with this game (at a run's start; the game
      may be started to find out); None: nothing to check beyond the schema;
    - `held_out_maps(cfg) -> [MapSpec]`: the maps the held-out evaluation races (best/ is chosen on them); by default the
      config's `held_out_seeds`;
    - `named_maps(cfg, text) -> [MapSpec]`: for a game whose maps have names (SuperTuxKart's tracks): the maps `text`
      names, a comma list or one of the config's sets of maps ("held_out", "test"), each checked raceable (ValueError
      naming one that is not: nothing has raced yet); None: the game's maps are seeds (evaluate.py --seeds);
    - `native_time_limit_s(cfg)`: the longest a race by the native rules lasts, in game seconds (how long a held-out
      evaluation may take); None: CarRacing-v3's 20 s (learner/held_out.py).
    """

    name: str
    make_float_layout: Callable[[Any], FloatLayout]
    make_game_instance: Callable[..., GameInstance]
    distance_to_current_zone_center: Callable[[FloatLayout, np.ndarray], np.ndarray] | None
    off_road_fraction: Callable[[FloatLayout, np.ndarray], np.ndarray] | None
    render_full_view: Callable[[GameInstance], np.ndarray]
    full_view_size: Callable[[Any], tuple[int, int]]
    frame_preprocessing: Callable[[Any], str]
    race_keys: tuple[str, ...] = ()
    check_config: Callable[[Any], None] | None = None
    held_out_maps: Callable[[Any], list[MapSpec]] = held_out_seed_maps
    named_maps: Callable[[Any, str], list[MapSpec]] | None = None
    native_time_limit_s: Callable[[Any], float] | None = None
    frame_renderer: Callable[[Any], str] | None = None

    def full_view_aspect(self, cfg) -> float:
        """Width / height of the full view."""
        width, height = self.full_view_size(cfg)
        return width / height
