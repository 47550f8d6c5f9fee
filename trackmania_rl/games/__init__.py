"""Game backends. `make_game_instance` builds the one named by user_config.game_backend."""

from __future__ import annotations

from trackmania_rl.games.base import GameCrashed, GameInstance, MapSpec

__all__ = ["GameCrashed", "GameInstance", "MapSpec", "float_layout_for", "make_game_instance"]


def make_game_instance(cfg, game_backend: str | None = None) -> GameInstance:
    """A game instance for `game_backend` (default: the backend the config was built for)."""
    if _checked_backend(cfg, game_backend) == "carracing":
        from trackmania_rl.games.car_racing.instance import CarRacingGameInstance

        return CarRacingGameInstance(cfg)


def float_layout_for(cfg, game_backend: str | None = None):
    """The float-input layout of a backend, without starting the game (the learner needs only this)."""
    if _checked_backend(cfg, game_backend) == "carracing":
        from trackmania_rl.games.car_racing.floats import make_float_layout

        return make_float_layout(cfg)


def _checked_backend(cfg, game_backend: str | None) -> str:
    backend = cfg.game_backend if game_backend is None else game_backend
    if backend == "carracing":
        return backend
    if backend == "trackmania":
        raise NotImplementedError(
            "user_config.game_backend = 'trackmania': the Trackmania backend is not implemented yet "
            "(DESIGN §7); set user_config.game_backend = 'carracing'"
        )
    raise ValueError(f"user_config.game_backend = {backend!r}: unknown game backend; expected 'carracing' or 'trackmania'")
