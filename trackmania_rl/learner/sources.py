"""Which rollout sources a run uses (DESIGN §2, §7), and the pacing that holds them back when the learner lags.

The local collector processes are built here; a Ray cluster (`ray_address`, `--ray`) and an HTTP endpoint
(`http_listen`, `--listen`) are optional installs, imported only when configured, so the default install
never loads them. Several sources are combined into one (rollouts/source.py: CombinedSources).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch.multiprocessing as torch_mp

from trackmania_rl.agents.iqn import make_network
from trackmania_rl.config.live import LiveConfig
from trackmania_rl.config.loader import ConfigError
from trackmania_rl.rollouts.local.collector import collector_main
from trackmania_rl.rollouts.local.pool import CollectorPool
from trackmania_rl.rollouts.local.shared_network import SharedNetwork
from trackmania_rl.rollouts.local.source import LocalCollectorSource
from trackmania_rl.rollouts.source import CombinedSources, RolloutSource


@dataclass
class SourceContext:
    """What a source needs from the run: the options (train.py's arguments), the run's live config and its file
    (the settings collectors play with), the game, the float layout, the run folder and the learner's log."""

    options: object  # learner.train_loop.TrainOptions
    live: LiveConfig
    live_path: Path
    game_backend: str
    layout: object
    run_dir: Path
    log: Callable[[str], None]

    def setting(self, option: str, setting: str):
        """A command-line override if given, else the config value."""
        value = getattr(self.options, option, None)
        return value if value is not None else getattr(self.live.current, setting)


def ray_address(options, cfg) -> str | None:
    return options.ray if getattr(options, "ray", None) is not None else cfg.ray_address


def ray_actors(options, cfg) -> int:
    return options.ray_actors if getattr(options, "ray_actors", None) is not None else cfg.ray_actors


def http_listen(options, cfg) -> str | None:
    return options.listen if getattr(options, "listen", None) is not None else cfg.http_listen


def remote_source_names(options, cfg) -> list[str]:
    """The remote sources this run is configured with, as words for the start-up log line."""
    names = []
    if ray_address(options, cfg) is not None:
        names.append(f"{ray_actors(options, cfg)} Ray actor(s) on {ray_address(options, cfg)}")
    if http_listen(options, cfg) is not None:
        names.append(f"HTTP clients on {http_listen(options, cfg)}")
    return names


def games_on_this_machine(options, cfg, collectors_count: int) -> int:
    """How many games the sources run on the learner's machine, each wanting a core: the local collectors, the
    actors of a Ray cluster `--ray auto` starts here, and one client for an HTTP endpoint on a loopback address
    (a client elsewhere costs nothing here; one on this machine is the usual case, and one core is its share)."""
    games = collectors_count
    if ray_address(options, cfg) == "auto":
        games += ray_actors(options, cfg)
    listen = http_listen(options, cfg)
    if listen is not None:
        host = listen.rpartition(":")[0].strip("[]")
        games += host in ("localhost", "::1") or host.startswith("127.")
    return games


def _source_module(extra: str):
    """The module of a remote source (rollouts/ray or rollouts/http), ConfigError naming the pip command when its
    optional install is missing (the default install has neither Ray nor a web server)."""
    try:
        return importlib.import_module(f"trackmania_rl.rollouts.{extra}.source")
    except ImportError as e:
        raise ConfigError(f'this run needs the optional "{extra}" install ({e}); install it with: pip install -e ".[{extra}]"') from None


def check_source_settings(options, cfg, collectors_count: int | str) -> None:
    """The sources as configured, refused with a ConfigError naming the problem before any is built (and, at a start,
    before the run folder changes): no source at all, a remote source whose install is missing, Ray without actors
    or at an address nothing answers at."""
    address, listen = ray_address(options, cfg), http_listen(options, cfg)
    if collectors_count == 0 and address is None and listen is None:
        raise ConfigError("no rollout source: collectors_count is 0 and neither ray_address (--ray) nor http_listen (--listen) is set")
    if listen is not None:
        _source_module("http")
    if address is not None:
        _source_module("ray")
        actors = ray_actors(options, cfg)
        if actors < 1:
            raise ConfigError(f"ray_actors is {actors} with ray_address {address!r}: give --ray-actors N (N >= 1) or set ray_actors")
        if address != "auto":
            from trackmania_rl.rollouts.ray.cluster import ClusterError, check_answers

            try:
                check_answers(address)
            except ClusterError as e:
                raise ConfigError(f"Ray cluster {address!r} (ray_address / --ray): {e}") from None


def build_sources(context: SourceContext, collectors_count: int, producers: int | None = None) -> RolloutSource:
    """The run's rollout source: the local collectors (if any), then the remote sources configured, as one. A learner
    group's rank 0 runs the first `collectors_count` of the run's `producers` local collectors."""
    cfg, options = context.live.current, context.options
    check_source_settings(options, cfg, collectors_count)
    sources: list[RolloutSource] = []
    if collectors_count > 0:
        sources.append(local_source(context, collectors_count, 0, producers))
    producers_so_far = producers if producers is not None else collectors_count  # the map cycle's shares taken
    if ray_address(options, cfg) is not None:
        ray_source = _source_module("ray").make_ray_source(context, local_producers=producers_so_far)
        sources.append(ray_source)
        producers_so_far = ray_source.producers  # the local collectors and the actors
    if http_listen(options, cfg) is not None:
        sources.append(_source_module("http").make_http_source(context, http_listen(options, cfg), first_producer=producers_so_far))
    return sources[0] if len(sources) == 1 else CombinedSources(sources)


def local_source(
    context: SourceContext, collectors_count: int, first_producer: int = 0, producers: int | None = None
) -> LocalCollectorSource:
    """`collectors_count` collector processes sharing one lock-guarded network, not started. They play as producers
    `first_producer`... of `producers` (default: this pool alone; a learner group's ranks share the numbers)."""
    cfg = context.live.current
    ctx = torch_mp.get_context("spawn")
    shared = SharedNetwork(make_network(cfg, context.layout, len(cfg.inputs), "cpu"), ctx)
    frames_played = ctx.Value("q", 0, lock=False)  # the learner's count, read by collectors for their schedules
    pause_event = ctx.Event()
    idle_flags = ctx.Array("b", collectors_count, lock=False)  # one byte per collector, 1 while it waits out a pause
    pool = CollectorPool(
        ctx,
        collector_main,
        args=(
            str(context.live_path),
            context.game_backend,
            producers or collectors_count,
            shared,
            frames_played,
            pause_event,
            idle_flags,
            first_producer,
        ),
        count=collectors_count,
        queue_size=cfg.max_rollout_queue_size,
        log=context.log,
    )
    live = context.live
    return LocalCollectorSource(
        pool, shared, pause_event, frames_played, stall_timeout_s=lambda: live.current.collector_stall_timeout_s, idle_flags=idle_flags
    )


class Pacing:
    """Pauses the sources while the learner owes more than `limit` batches to its replay ratio and resumes them at
    half of it (hysteresis: no pause/resume flapping at every race). Counts the seconds spent paused."""

    def __init__(self, source: RolloutSource, log: Callable[[str], None]):
        self.source = source
        self.log = log
        self.paused_since: float | None = None
        self.paused_seconds = 0.0  # since the last `take_paused_seconds`
        self.pauses = 0

    def update(self, backlog_batches: float, limit: int) -> None:
        now = time.perf_counter()
        if self.paused_since is None and backlog_batches > limit:
            self.source.pause()
            self.paused_since = now
            self.pauses += 1
            if self.pauses == 1:
                self.log(
                    f"the learner owes {backlog_batches:.0f} batches (> max_training_backlog_batches {limit}): "
                    "sources paused until it catches up (logged once; see pipeline/sources_paused_percent)"
                )
        elif self.paused_since is not None and backlog_batches <= limit / 2:
            self.source.resume()
            self.paused_seconds += now - self.paused_since
            self.paused_since = None

    def take_paused_seconds(self) -> float:
        """Seconds paused since the previous call (the current pause counted up to now)."""
        now = time.perf_counter()
        seconds = self.paused_seconds
        if self.paused_since is not None:
            seconds += now - self.paused_since
            self.paused_since = now
        self.paused_seconds = 0.0
        return seconds
