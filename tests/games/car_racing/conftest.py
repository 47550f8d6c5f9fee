"""Fixtures of the CarRacing tests: scripted policies and playing one race."""

import numpy as np
import pytest

from trackmania_rl.games.base import MapSpec


def _no_update():
    pass


def _fixed_actions_policy(n_actions, actions):
    """Plays `actions` in turn (then the last one forever); q_values favour the chosen action."""
    played = iter(actions)
    last = [actions[-1]]

    def policy(frame, state_float):
        action = next(played, last[0])
        q = np.arange(n_actions, dtype=np.float32) * -0.1
        q[action] = 1.0
        return action, True, 1.0, q

    return policy


def _play(game, seed, policy, update_network=_no_update):
    spec = MapSpec(f"seed{seed}", seed, is_explo=True, fill_buffer=True)
    return game.rollout(policy, spec, game.zone_centers_for(spec), update_network)


@pytest.fixture(scope="session")
def no_update():
    """An update_network that does nothing."""
    return _no_update


@pytest.fixture(scope="session")
def fixed_actions_policy():
    """`fixed_actions_policy(n_actions, actions)`: a policy playing `actions` in turn, then the last one forever."""
    return _fixed_actions_policy


@pytest.fixture(scope="session")
def play():
    """`play(game, seed, policy, update_network=no_update)`: one race on track `seed` (MapSpec "seed<seed>",
    exploring, filling the buffer) -> (rollout_results, end_race_stats)."""
    return _play
