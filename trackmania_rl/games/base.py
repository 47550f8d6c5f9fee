"""The game-instance contract (DESIGN §3.1): the only place that knows which game is driven."""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from trackmania_rl.games.float_layout import FloatLayout

# rollout_results (DESIGN §3.2) as a game instance returns it: lists with one entry per state, lists with one
# entry per action (rollouts/contract.py adds what a rollout source attaches and checks both)
ROLLOUT_STATE_KEYS = ("frames", "state_float", "current_zone_idx", "meters_advanced_along_centerline", "car_gear_and_wheels")
ROLLOUT_ACTION_KEYS = ("actions", "action_was_greedy", "q_values", "input_w")
# per state, where the game has it: how many distinct road tiles the car has touched since the start (CarRacing;
# its native score pays for each); `reward_per_new_road_tile` needs it
ROAD_TILES_TOUCHED = "road_tiles_touched"

# exploration_policy(frame uint8 (1, H, W), state_float float32 (D,)) -> (action, action_was_greedy, value, q_values)
ExplorationPolicy = Callable[[np.ndarray, np.ndarray], tuple]


@dataclass(frozen=True)
class MapSpec:
    """One concrete race: a map name (for logs and trained/blind status) and the game's map id.

    For CarRacing the id is a track seed. `is_explo` and `fill_buffer` come from the map cycle.
    """

    name: str
    seed: int
    is_explo: bool = True
    fill_buffer: bool = True


class GameCrashed(RuntimeError):
    """The game failed during a race; the instance was rebuilt and the race must be dropped."""


class GameInstance(abc.ABC):
    """One game, driven one race at a time by one collector."""

    float_layout: FloatLayout

    @abc.abstractmethod
    def zone_centers_for(self, map_spec: MapSpec) -> np.ndarray:
        """The map's zone centers (M, dims): centerline resampled, extrapolated before start and after finish."""

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

    def close(self) -> None:  # noqa: B027 (a default that does nothing: a game without resources need not override it)
        """Release the game's resources."""
