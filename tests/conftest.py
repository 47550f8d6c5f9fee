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


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    # pytest-randomly shuffles the tests (its seed is in the header, which -q hides): say how to replay this order
    if config.pluginmanager.has_plugin("randomly"):
        seed = config.option.randomly_seed
        terminalreporter.write_line(f"tests run in a shuffled order; replay it with: python -m pytest -p randomly --randomly-seed={seed}")
