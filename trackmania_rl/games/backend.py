"""Which game a name means: `game_backend(name) -> GameBackend` (the description, games/base.py).

Everything game-specific that the replay, evaluation, videos and the benchmarks need comes from a backend's
description, never from a game's own modules. `game_backend` raises ValueError for an unknown name and
NotImplementedError for 'trackmania' (DESIGN §8, roadmap). `MS_PER_PHYSICS_STEP[name]` and `DEFAULT_GAME_BACKEND`
come from config/game_backends.py (which the config reads).

Light to import (the standard library only). Each backend's own module is imported when `game_backend(name)` is
first called, and its game modules when a game instance is first made. The imports go one way: this lookup
imports the backends, a backend imports only the contract (games/base.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trackmania_rl.config.game_backends import DEFAULT_GAME_BACKEND, MS_PER_PHYSICS_STEP

if TYPE_CHECKING:
    from trackmania_rl.games.base import GameBackend

__all__ = ["DEFAULT_GAME_BACKEND", "MS_PER_PHYSICS_STEP", "game_backend"]


def game_backend(name: str) -> GameBackend:
    """The description of backend `name` (user_config.game_backend). ValueError for an unknown name,
    NotImplementedError for 'trackmania'."""
    if name == "carracing":
        from trackmania_rl.games.car_racing.backend import CAR_RACING

        return CAR_RACING
    if name == "gymnasium":
        from trackmania_rl.games.gymnasium.backend import GYMNASIUM

        return GYMNASIUM
    if name == "supertuxkart":
        from trackmania_rl.games.supertuxkart.backend import SUPERTUXKART

        return SUPERTUXKART
    if name == "trackmania":
        raise NotImplementedError(
            "user_config.game_backend = 'trackmania': the Trackmania backend is not implemented yet "
            "(DESIGN §7); set user_config.game_backend = 'carracing'"
        )
    raise ValueError(
        f"user_config.game_backend = {name!r}: unknown game backend; expected 'carracing', 'gymnasium', 'supertuxkart' or 'trackmania'"
    )
