"""Fixtures of the agent tests: the tiny network config of tests/helpers.py, its float layout, and random states."""

import pytest
import torch

from tests.helpers import layout_for, tiny_config
from trackmania_rl.config.loader import frame_shape


@pytest.fixture(scope="module")
def cfg():
    return tiny_config()


@pytest.fixture(scope="module")
def layout(cfg):
    return layout_for(cfg)


def _random_states(cfg, layout, batch, seed=0):
    g = torch.Generator().manual_seed(seed)
    img = torch.randint(0, 256, (batch, *frame_shape(cfg)), dtype=torch.uint8, generator=g)
    floats = torch.randn(batch, layout.dim, generator=g) * torch.from_numpy(layout.std) + torch.from_numpy(layout.mean)
    return img, floats


@pytest.fixture
def random_states():
    """`random_states(cfg, layout, batch, seed=0)` -> (frames uint8 (B, C, H, W), floats (B, D) around the
    layout's mean, spread by its std)."""
    return _random_states
