"""Fixtures of the SuperTuxKart tests: the prepared data, the config, a game, scripted policies.

The tests skip without the `supertuxkart` extra (pysupertuxkart2) or without the game's data (Debian's supertuxkart-data);
they find the module without importing it: only the game's own process may import pystk2.
"""

import importlib.util
from pathlib import Path

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
# a small network, for tests of runs and collectors: the game, its frames and floats are the config's
SMALL_NETWORK = """
conv_layers = [(8, 4, 2), (8, 4, 2)]
dense_hidden_dimension = 32
float_hidden_dim = 16
iqn_embedding_dimension = 16
"""


def write_kart_config(folder, extra: str = ""):
    """folder/config.py: the shipped SuperTuxKart config as its base, with a small network and `extra` settings."""
    path = folder / "config.py"
    path.write_text(f"base = {str(KART_CONFIG)!r}\n" + SMALL_NETWORK + extra)
    return path


def game_process_of(pid: int) -> int | None:
    """The pid of the SuperTuxKart game process that process `pid` started (Linux /proc), or None."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue  # ended meanwhile
        if parent == pid and b"trackmania_rl.games.supertuxkart.child" in command:
            return int(stat.parent.name)
    return None


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
