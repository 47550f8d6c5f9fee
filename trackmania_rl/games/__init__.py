"""Game backends. `make_game_instance` builds the one named by user_config.game_backend; what else the
rest of the code may know about a game is its description, `games.backend.game_backend(name)`.

Importing this package is light: the game
contract (base.py, with numpy) loads when one of its names is first read from here, the backends' module
and the games when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trackmania_rl.games.base import GameCrashed, GameInstance, MapSpec
    from trackmania_rl.games.float_layout import FloatLayout

__all__ = ["GameCrashed", "GameInstance", "MapSpec", "float_layout_for", "make_game_instance"]

_FROM_BASE = ("GameCrashed", "GameInstance", "MapSpec")


def __getattr__(name: str):
    """GameCrashed, GameInstance and MapSpec from games/base.py, imported on first use."""
    if name in _FROM_BASE:
        from trackmania_rl.games import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_game_instance(cfg, game_backend: str | None = None, rules: str = "training") -> GameInstance:
    """A game instance for `game_backend` (default: the backend the config was built for) whose races end by
    `rules`: "training" (the trainer's cut-offs) or "native" (the game's own episode end); games/base.py RACE_RULES."""
    from trackmania_rl.games.backend import game_backend as _game_backend

    return _game_backend(cfg.game_backend if game_backend is None else game_backend).make_game_instance(cfg, rules)


def float_layout_for(cfg, game_backend: str | None = None) -> FloatLayout:
    """The float-input layout of a backend, without starting the game (the learner needs only this)."""
    from trackmania_rl.games.backend import game_backend as _game_backend

    return _game_backend(cfg.game_backend if game_backend is None else game_backend).make_float_layout(cfg)
