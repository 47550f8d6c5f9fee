import pytest


@pytest.fixture
def served(tmp_path):
    """A real HTTP source serving on 127.0.0.1 (see support.py); skipped without the http extra."""
    pytest.importorskip("fastapi")
    from tests.rollouts.http.support import make_served

    s = make_served(tmp_path)
    yield s
    s.source.stop()
