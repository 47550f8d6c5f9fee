"""Which sources a run builds: the local collectors by default, a clear refusal when there is none or when a
remote source's optional install is missing (the default install has neither Ray nor a web server)."""

import sys

import pytest

from tests.helpers import write_config
from trackmania_rl.config.live import LiveConfig
from trackmania_rl.config.loader import ConfigError
from trackmania_rl.games import float_layout_for
from trackmania_rl.learner.sources import SourceContext, build_sources, games_on_this_machine, remote_source_names
from trackmania_rl.learner.train_loop import TrainOptions
from trackmania_rl.rollouts.local.source import LocalCollectorSource


def _context(tmp_path, **options):
    live = LiveConfig(write_config(tmp_path, ""), log=lambda m: None)
    return SourceContext(TrainOptions(**options), live, live.path, "carracing", float_layout_for(live.current), tmp_path, lambda m: None)


def test_local_collectors_alone_by_default(tmp_path):
    context = _context(tmp_path)
    source = build_sources(context, collectors_count=2)
    assert isinstance(source, LocalCollectorSource) and len(source.pool.slots) == 2
    assert remote_source_names(context.options, context.live.current) == []


def test_no_source_at_all_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="no rollout source"):
        build_sources(_context(tmp_path), collectors_count=0)


@pytest.mark.parametrize(
    "module, option, extra",
    [("ray", {"ray": "auto", "ray_actors": 1}, "ray"), ("fastapi", {"listen": "127.0.0.1:8642"}, "http")],
)
def test_a_remote_source_without_its_install_names_the_pip_command(tmp_path, monkeypatch, module, option, extra):
    monkeypatch.setitem(sys.modules, module, None)  # as on a default install: importing it fails
    for name in [m for m in sys.modules if m.startswith(f"trackmania_rl.rollouts.{extra}")]:
        monkeypatch.delitem(sys.modules, name)
    context = _context(tmp_path, **option)
    assert remote_source_names(context.options, context.live.current)
    with pytest.raises(ConfigError, match=rf'pip install -e "\.\[{extra}\]"'):
        build_sources(context, collectors_count=0)


@pytest.mark.parametrize(
    "options, collectors, expected",
    [
        ({}, 2, 2),
        ({"ray": "auto", "ray_actors": 3}, 1, 4),  # a cluster started here: its actors play on this machine
        ({"ray": "10.0.0.5:6379", "ray_actors": 3}, 0, 0),  # a cluster elsewhere costs no core here
        ({"listen": "127.0.0.1:8642"}, 0, 1),  # a client on this machine is the usual case
        ({"listen": "0.0.0.0:8642"}, 1, 1),
    ],
)
def test_the_learner_counts_the_games_that_share_its_machine(tmp_path, options, collectors, expected):
    context = _context(tmp_path, **options)
    assert games_on_this_machine(context.options, context.live.current, collectors) == expected
