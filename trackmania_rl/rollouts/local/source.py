"""The local rollout source: collector processes on this machine (DESIGN §2), the default source.

Envelopes come from the collector pool's bounded queues (one per collector); weights go to the
lock-guarded shared network the collectors reload from. Pausing asks the collectors to start no new race.
"""

from __future__ import annotations

from collections.abc import Callable

from trackmania_rl.rollouts.local.collector import SOURCE_NAME
from trackmania_rl.rollouts.local.pool import CollectorPool
from trackmania_rl.rollouts.local.shared_network import SharedNetwork
from trackmania_rl.rollouts.packed_race import unpack_race
from trackmania_rl.rollouts.source import RolloutSource, SourceHealth


class LocalCollectorSource(RolloutSource):
    """`pool` runs the collector processes; `pause_event` (an mp Event), `frames_played` (an mp Value) and
    `idle_flags` (an mp Array of one byte per collector, 1 while it waits out a pause; optional) are the ones its
    collectors were given."""

    name = SOURCE_NAME

    def __init__(
        self,
        pool: CollectorPool,
        shared_network: SharedNetwork,
        pause_event,
        frames_played,
        stall_timeout_s: Callable[[], float],
        idle_flags=None,
    ):
        self.pool = pool
        self.shared_network = shared_network
        self.pause_event = pause_event
        self.frames_played = frames_played
        self.stall_timeout_s = stall_timeout_s  # read at every check: a live config may change it
        self.idle_flags = idle_flags

    def start(self) -> None:
        self.pool.start()

    def get(self, timeout_s: float):
        got = self.pool.get_rollout(timeout_s)
        if got is None:
            return None
        _, (rollout_results, end_race_stats, meta) = got
        return unpack_race(rollout_results), end_race_stats, meta

    def publish(self, version: int, weights: dict) -> None:
        self.shared_network.publish(version, weights)

    def pause(self) -> None:
        self.pause_event.set()

    def resume(self) -> None:
        self.pause_event.clear()

    def idle_games_here(self) -> int:
        # a flag can lag the event by one sleep of the collector (50 ms): counted only while the pause stands
        if self.idle_flags is None or not self.pause_event.is_set():
            return 0
        return sum(1 for flag in self.idle_flags if flag)

    def health(self) -> SourceHealth:
        replaced = self.pool.check(self.stall_timeout_s())
        alive = sum(1 for slot in self.pool.slots if slot.process is not None and slot.process.is_alive())
        active = self.pool.active_count()
        return SourceHealth(self.name, len(self.pool.slots), alive, replaced, self.pause_event.is_set(), active, exhausted=active == 0)

    def learner_progress(self, frames_played: int, batches_done: int) -> None:
        self.frames_played.value = frames_played

    def stop(self) -> None:
        self.pool.stop()

    def summary(self) -> list[str]:
        return self.pool.summary()
