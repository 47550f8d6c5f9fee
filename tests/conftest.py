import pytest


@pytest.fixture
def cfg():
    """The repository's default config."""
    from trackmania_rl.config.loader import default_config

    return default_config()


def pytest_configure(config):
    # One torch thread: on a 2-core machine shared with game processes, more threads oversubscribe the
    # cores and make small train steps tens of times slower.
    import torch

    torch.set_num_threads(1)
