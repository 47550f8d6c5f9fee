"""Fixtures of the agent tests: the tiny network config of tests/helpers.py and its float layout."""

import pytest

from tests.helpers import layout_for, tiny_config


@pytest.fixture(scope="module")
def cfg():
    return tiny_config()


@pytest.fixture(scope="module")
def layout(cfg):
    return layout_for(cfg)
