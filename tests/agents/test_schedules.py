import math

import pytest

from trackmania_rl.agents import schedules


def test_linear():
    s = [(0, 0.999), (300_000, 1.0)]
    assert schedules.linear(s, 0) == 0.999
    assert schedules.linear(s, 150_000) == pytest.approx(0.9995)
    assert schedules.linear(s, 10**9) == 1.0
    assert schedules.linear([(0, 5.0)], 123) == 5.0
    assert schedules.linear([(0, 0.0), (10, 10.0), (20, 0.0)], 15) == pytest.approx(5.0)


def test_exponential_is_linear_in_log():
    s = [(0, 1e-3), (300_000, 3e-4), (1_000_000, 1e-4)]
    assert schedules.exponential(s, 0) == pytest.approx(1e-3)
    assert schedules.exponential(s, 150_000) == pytest.approx(math.sqrt(1e-3 * 3e-4))
    assert schedules.exponential(s, 650_000) == pytest.approx(math.sqrt(3e-4 * 1e-4))
    assert schedules.exponential(s, 5_000_000) == pytest.approx(1e-4)
    assert schedules.exponential([(0, -4.0), (10, -1.0)], 5) == pytest.approx(-2.0)
    with pytest.raises(ValueError):
        schedules.exponential([(0, 1.0), (10, -1.0)], 5)


def test_staircase():
    s = [(0, (30_000, 3_000)), (200_000, (100_000, 3_000))]
    assert schedules.staircase(s, 0) == (30_000, 3_000)
    assert schedules.staircase(s, 199_999) == (30_000, 3_000)
    assert schedules.staircase(s, 200_000) == (100_000, 3_000)
    assert schedules.staircase(s, 10**9) == (100_000, 3_000)


def test_config_schedules_evaluate(cfg):
    assert 0 < schedules.exponential(cfg.lr_schedule, 12_345) <= cfg.lr_schedule[0][1]
    assert schedules.exponential(cfg.epsilon_schedule, 10_000) == pytest.approx(0.3)
    assert schedules.linear(cfg.gamma_schedule, 0) == cfg.gamma_schedule[0][1]
    capacity, start_learn = schedules.staircase(cfg.memory_size_schedule, 0)
    assert capacity >= start_learn
