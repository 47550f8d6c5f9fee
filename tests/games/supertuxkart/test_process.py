"""The game in a process of its own (games/supertuxkart/process.py, child.py): the game's fatal errors end that process,
never the one driving it; a dead game is rebuilt and its race dropped (GameCrashed)."""

import os
import signal
import sys

import numpy as np
import pytest

from trackmania_rl.games.base import GameCrashed, MapSpec
from trackmania_rl.games.supertuxkart.process import GameProcess, GameProcessDied, GameProcessError
from trackmania_rl.games.supertuxkart.tracks import UnraceableMap

pytestmark = pytest.mark.supertuxkart

RACE = dict(reverse=False, laps=1, difficulty=3, kart="tux", seed=0)


def test_an_arena_ends_the_games_process_and_says_why(kart_root):
    game = GameProcess()
    try:
        assert "lighthouse" in game.info["tracks"] and "tux" in game.info["karts"]
        with pytest.raises(GameProcessError, match="Track 'moon_base' not found"):
            game.request("start", 60, track="moon_base", **RACE)  # the game raised: it lives on
        answer = game.request("start", 60, track="lighthouse", **RACE)
        assert np.asarray(answer["driveline"]["nodes"]).shape == (115, 2, 3) and answer["intro_steps"] > 0
        # an arena has no lap line: the game ends its own process (what would have ended a trainer's)
        with pytest.raises(GameProcessDied, match="exit status 1.*no kind of lap line for track found"):
            game.request("start", 60, track="stadium", **RACE)
        assert game.process.poll() is not None
        with pytest.raises(GameProcessDied, match="closed"):
            game.request("step", 60, controls=(1.0, False, 0.0, False, False, False), steps=1)
    finally:
        game.close()
    assert "pystk2" not in sys.modules  # only the game's process imports the game


def test_a_killed_game_is_rebuilt_and_its_race_dropped(game, kart_cfg, constant_policy, race):
    n_actions = len(kart_cfg.inputs)
    drive = constant_policy(n_actions, 0)
    pid = game.process.pid
    decisions = []

    def killing(frame, state_float):
        decisions.append(1)
        if len(decisions) == 30:
            os.kill(game.process.pid, signal.SIGKILL)  # a crash mid-race, as abort() would be
        return drive(frame, state_float)

    with pytest.raises(GameCrashed, match=r"lighthouse.*died during request 'step', exit status -9"):
        race(game, "lighthouse", killing)
    assert game.process.pid != pid and len(decisions) == 30
    # the next race plays on the rebuilt game
    results, stats = race(game, "lighthouse", constant_policy(n_actions, 0))
    assert stats["n_actions"] > 30 and results["meters_advanced_along_centerline"][-1] > 100
    # a map the game would abort on is refused before it reaches the game
    pid = game.process.pid
    with pytest.raises(UnraceableMap, match="'stadium' is a arena track"):
        game.zone_centers_for(MapSpec("stadium", 0))
    assert game.process.pid == pid and game.process.process.poll() is None
