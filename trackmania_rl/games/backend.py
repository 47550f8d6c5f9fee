"""What the rest of the code may know about a game: its backend description (DESIGN §3.1, §4).

Everything game-specific that the replay, evaluation, videos and the benchmarks need comes from here,
never from a game's own modules:
- `game_backend(name) -> GameBackend`: the description of an implemented backend (physics step, float
  layout, game instance, shaping distance, full view for videos); ValueError for an unknown name,
  NotImplementedError for 'trackmania' (DESIGN §8, roadmap);
- `MS_PER_PHYSICS_STEP[name]`, `DEFAULT_GAME_BACKEND`: from games/registry.py (which the config reads).

Light to import (the standard library only). Each backend's own module is imported when
`game_backend(name)` is first called, and its game modules when a game instance is first made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trackmania_rl.games.registry import DEFAULT_GAME_BACKEND, MS_PER_PHYSICS_STEP

if TYPE_CHECKING:
    import numpy as np

    from trackmania_rl.games.base import GameInstance
    from trackmania_rl.games.float_layout import FloatLayout

__all__ = ["DEFAULT_GAME_BACKEND", "MS_PER_PHYSICS_STEP", "GameBackend", "game_backend"]


@dataclass(frozen=True)
class GameBackend:
    """One game as the rest of the code sees it.

    - `make_float_layout(cfg) -> FloatLayout`: the float inputs' layout, without starting the game;
    - `make_game_instance(cfg) -> GameInstance`: a game to play races in (DESIGN §3.1);
    - `distance_to_current_zone_center(layout, state_float) -> distances`: from the car to the current
      zone center, read from the floats (one state (D,) or a batch (..., D)); the reward-shaping
      potential is made from it (DESIGN §3.5);
    - `off_road_fraction(layout, state_float) -> fractions in [0, 1]`: how far off the road the car is, read from
      the floats (CarRacing: the share of its wheels touching no road tile); the off-road reward term is made
      from it (`off_road_penalty_per_action`, replay/experience.py);
    - `render_full_view(game) -> (H, W, 3) uint8`: the game's full view now, in RGB, as a person would
      see it (videos), rendered without changing the race;
    - `full_view_size`: (width, height) of that view;
    - `frame_preprocessing`: how the game's view becomes the network's uint8 frame, in words, for clients that
      produce frames in another language (the ONNX policy's sidecar, agents/onnx_export.py).
    """

    name: str
    ms_per_physics_step: int
    make_float_layout: Callable[[Any], FloatLayout]
    make_game_instance: Callable[[Any], GameInstance]
    distance_to_current_zone_center: Callable[[FloatLayout, np.ndarray], np.ndarray]
    off_road_fraction: Callable[[FloatLayout, np.ndarray], np.ndarray]
    render_full_view: Callable[[GameInstance], np.ndarray]
    full_view_size: tuple[int, int]
    frame_preprocessing: str

    @property
    def full_view_aspect(self) -> float:
        """Width / height of the full view."""
        width, height = self.full_view_size
        return width / height


def game_backend(name: str) -> GameBackend:
    """The description of backend `name` (user_config.game_backend). ValueError for an unknown name,
    NotImplementedError for 'trackmania'."""
    if name == "carracing":
        from trackmania_rl.games.car_racing.backend import CAR_RACING

        return CAR_RACING
    if name == "trackmania":
        raise NotImplementedError(
            "user_config.game_backend = 'trackmania': the Trackmania backend is not implemented yet "
            "(DESIGN §7); set user_config.game_backend = 'carracing'"
        )
    raise ValueError(f"user_config.game_backend = {name!r}: unknown game backend; expected 'carracing' or 'trackmania'")
