import sys

import pytest


@pytest.fixture
def cfg():
    """The repository's default config."""
    from trackmania_rl.config.loader import default_config

    return default_config()


def pytest_configure(config):
    # The tests need the project's own dependencies (torch first): without them, one line that says what to do instead
    # of an internal error (pytest run by a Python the project is not installed in, e.g. outside its virtual environment)
    try:
        import torch
    except ImportError as e:
        pytest.exit(
            f"the project is not installed in the Python running the tests ({sys.executable}): {e}. "
            "Install it first, as the README says: pip install -r requirements.txt",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )
    # One torch thread: on a 2-core machine shared with game processes, more threads oversubscribe the
    # cores and make small train steps tens of times slower.

    torch.set_num_threads(1)
    # hypothesis's pytest plugin imports hypothesis at the terminal summary, through pytest's assertion rewriting
    # (ast.parse of each module). On CPython 3.11 ast.parse shares one recursion counter between threads, so a thread
    # formatting a traceback at that moment (a queue feeder whose reader process is gone, say) made it raise
    # "SystemError: AST constructor recursion depth mismatch" and the session ended with exit 1 after every test
    # passed. Importing it here, before any test starts a thread, leaves nothing for that moment.
    try:
        import hypothesis.internal.observability  # noqa: F401
    except ImportError:  # hypothesis comes with the dev extra
        pass


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    # pytest-randomly shuffles the tests (its seed is in the header, which -q hides): say how to replay this order
    if config.pluginmanager.has_plugin("randomly"):
        seed = config.option.randomly_seed
        terminalreporter.write_line(f"tests run in a shuffled order; replay it with: python -m pytest --randomly-seed={seed}")
