"""Fixtures of the SuperTuxKart tests: the prepared data, the config, a game, scripted policies.

The tests skip without the `supertuxkart` extra (pysupertuxkart2) or without the game's data (Debian's supertuxkart-data);
they find the module without importing it: only the game's own process may import pystk2.
"""

import importlib.util

import numpy as np
import pytest

from trackmania_rl.config.loader import REPO_ROOT, load_config
from trackmania_rl.games.base import MapSpec
from trackmania_rl.games.supertuxkart.data import DEBIAN_DATA, prepare

if importlib.util.find_spec("pystk2") is None:
    pytest.skip("needs the supertuxkart extra (pip install -e '.[supertuxkart]')", allow_module_level=True)
if not (DEBIAN_DATA / "tracks").is_dir():
    pytest.skip(f"needs SuperTuxKart's data ({DEBIAN_DATA}: python -m trackmania_rl.games.supertuxkart.setup)", allow_module_level=True)

KART_CONFIG = REPO_ROOT / "config_files" / "supertuxkart.py"


@pytest.fixture(scope="session")
def kart_root():
    """The prepared game root (the project's folder, prepared again: it is repeatable)."""
    return prepare()


@pytest.fixture(scope="session")
def kart_cfg(kart_root):
    return load_config(KART_CONFIG)


@pytest.fixture(scope="module")
def game(kart_cfg):
    from trackmania_rl.games import make_game_instance

    game = make_game_instance(kart_cfg)
    yield game
    game.close()


def _constant_policy(n_actions, action):
    def policy(frame, state_float):
        q = np.zeros(n_actions, dtype=np.float32)
        q[action] = 1.0
        return action, True, 0.5, q

    return policy


@pytest.fixture(scope="session")
def constant_policy():
    """`constant_policy(n_actions, action)`: plays `action` at every decision."""
    return _constant_policy


def _race(game, name, policy, seed=0):
    spec = MapSpec(name, seed)
    return game.rollout(policy, spec, game.zone_centers_for(spec), lambda: None)


@pytest.fixture(scope="session")
def race():
    """`race(game, map_name, policy, seed=0)` -> (rollout_results, end_race_stats)."""
    return _race
