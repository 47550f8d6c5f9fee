"""The rollout-source seam (DESIGN §2, §7): where the learner's races come from, and where its weights go.

A source produces envelopes (rollout_results, end_race_stats, meta; see contract.py) over a bounded channel
and delivers the learner's published weights to whatever plays the races. The local collector processes
(rollouts/local/source.py) are the first implementation; collector actors on a Ray cluster and external
game clients over HTTP plug in behind the same interface. The learner does not care which.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field


@dataclass
class SourceHealth:
    """What a source reports about its producers (collector processes, actors, clients)."""

    source: str
    producers: int  # how many it is meant to run or serve
    alive: int
    replaced: list = field(default_factory=list)  # producers restarted or forgotten by this check
    paused: bool = False
    active: int | None = None  # producers still served (not given up after repeated failures); None: producers
    # True when nothing will ever come from this source again (every collector given up); a source that waits
    # for producers to arrive (HTTP clients) is never exhausted, even with none connected
    exhausted: bool = False

    def __post_init__(self):
        if self.active is None:
            self.active = self.producers


class RolloutSource(abc.ABC):
    """One origin of races. Every method is called from the learner's thread; `get` must not block longer
    than asked, and everything between producers and `get` is bounded (backpressure, never unbounded)."""

    name: str = "source"

    @abc.abstractmethod
    def start(self) -> None:
        """Start producing (processes, actors, a server). Weights may be published before or after."""

    @abc.abstractmethod
    def get(self, timeout_s: float):
        """The next envelope, or None when none came within `timeout_s` (0: do not wait). Not validated:
        the learner checks every envelope with contract.validate_envelope."""

    @abc.abstractmethod
    def publish(self, version: int, weights: dict) -> None:
        """Make these weights (name -> tensor, the online network's state_dict) the ones producers act with,
        as policy `version`; producers record, for each action, the version they acted with."""

    @abc.abstractmethod
    def pause(self) -> None:
        """Ask producers to start no new race until `resume` (pacing); races in flight still arrive."""

    @abc.abstractmethod
    def resume(self) -> None:
        """Undo `pause`."""

    @abc.abstractmethod
    def health(self) -> SourceHealth:
        """Check the producers, replace or forget the dead and the silent, and report."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop every producer and release the channel; returns in bounded time."""

    def idle_games_here(self) -> int:
        """Games on the learner's machine that sit idle now because of `pause` (between races, starting none):
        the learner may use their cores until `resume`. A source whose producers run elsewhere, or cannot say, 0."""
        return 0

    def learner_progress(self, frames_played: int, batches_done: int) -> None:
        """The learner's counters, given after every ingest and train chunk: producers read frames_played for
        their exploration schedules; a source may report them (HTTP status)."""
        return None  # a source whose producers need neither

    def scalars(self) -> dict[str, float]:
        """The source's own figures since the previous call (per-producer timings, queue sizes, races refused),
        logged to TensorBoard as `sources/<name>` every aggregate window. Names are prefixed by the source."""
        return {}

    def summary(self) -> list[str]:
        """Lines for the end-of-run log (races per producer, restarts)."""
        return []


class CombinedSources(RolloutSource):
    """Several sources as one: envelopes taken from each in turn, weights published to all."""

    name = "combined"

    def __init__(self, sources: list[RolloutSource]):
        if not sources:
            raise ValueError("no rollout source: configure at least one (local collectors, Ray actors or an HTTP endpoint)")
        self.sources = list(sources)
        self._next = 0

    def start(self) -> None:
        for source in self.sources:
            source.start()

    def get(self, timeout_s: float):
        # poll each source without waiting, then wait on them in turn for what is left of the timeout
        for _ in range(len(self.sources)):
            source = self.sources[self._next]
            self._next = (self._next + 1) % len(self.sources)
            envelope = source.get(0.0)
            if envelope is not None:
                return envelope
        if timeout_s <= 0:
            return None
        share = timeout_s / len(self.sources)
        for source in self.sources:
            envelope = source.get(share)
            if envelope is not None:
                return envelope
        return None

    def publish(self, version: int, weights: dict) -> None:
        for source in self.sources:
            source.publish(version, weights)

    def pause(self) -> None:
        for source in self.sources:
            source.pause()

    def resume(self) -> None:
        for source in self.sources:
            source.resume()

    def idle_games_here(self) -> int:
        return sum(source.idle_games_here() for source in self.sources)

    def health(self) -> SourceHealth:
        reports = [source.health() for source in self.sources]
        return SourceHealth(
            source="+".join(r.source for r in reports),
            producers=sum(r.producers for r in reports),
            alive=sum(r.alive for r in reports),
            replaced=[f"{r.source}:{p}" for r in reports for p in r.replaced],
            paused=all(r.paused for r in reports),
            active=sum(r.active for r in reports),
            exhausted=all(r.exhausted for r in reports),
        )

    def learner_progress(self, frames_played: int, batches_done: int) -> None:
        for source in self.sources:
            source.learner_progress(frames_played, batches_done)

    def stop(self) -> None:
        for source in self.sources:
            source.stop()

    def scalars(self) -> dict[str, float]:
        return {name: value for source in self.sources for name, value in source.scalars().items()}

    def summary(self) -> list[str]:
        return [line for source in self.sources for line in source.summary()]
