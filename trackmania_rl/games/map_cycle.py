"""The map cycle (DESIGN §4): entries (name, seed or range of seeds, is_explo, fill_buffer), repeated.

A map whose entries fill the buffer somewhere in the cycle is "trained"; every other map is "blind"
(an evaluation track the learner never stores). An entry with a range of seeds hands out its seeds in
turn, so explo runs see a new track each time; several collectors start at different points of a range.
The run's `seed` shuffles the order in which a range's seeds come (seed 0: in increasing order), so two runs
with different seeds train on different track sequences.
"""

from __future__ import annotations

import math

import numpy as np

from trackmania_rl.games.base import MapSpec


def trained_and_blind_maps(map_cycle) -> tuple[set, set]:
    trained = {name for name, _, _, fill_buffer in map_cycle if fill_buffer}
    blind = {name for name, _, _, _ in map_cycle} - trained
    return trained, blind


def shuffled_position(position: int, n: int, seed: int) -> int:
    """A permutation of range(n) chosen by `seed` (identity for seed 0): position -> (a * position + b) mod n with
    a coprime to n, a bijection that needs no table (ranges hold up to ~10^5 seeds)."""
    if seed == 0 or n == 1:
        return position
    rng = np.random.default_rng(seed)
    a = int(rng.integers(1, n))
    while math.gcd(a, n) != 1:
        a = a % (n - 1) + 1
    b = int(rng.integers(0, n))
    return (a * position + b) % n


class MapCycle:
    """Endless iterator of MapSpec over a config's `map_cycle`.

    `collector_index`/`collectors_count` spread the seeds of ranges between collectors so that two
    collectors do not play the same tracks in lockstep; `seed` (the run's) picks the order.
    """

    def __init__(self, map_cycle, collector_index: int = 0, collectors_count: int = 1, seed: int = 0):
        self.collector_index = collector_index
        self.collectors_count = max(1, collectors_count)
        self.seed = seed
        self._position = 0
        self._next_seed_index: dict = {}
        self.set_cycle(map_cycle)

    def set_cycle(self, map_cycle) -> None:
        """Adopt a (possibly edited) cycle; restarts it from its beginning if it changed."""
        cycle = [tuple(entry) for entry in map_cycle]
        if getattr(self, "cycle", None) == cycle:
            return
        self.cycle = cycle
        self._position = 0
        self.trained, self.blind = trained_and_blind_maps(cycle)

    def status(self, name: str) -> str:
        return "trained" if name in self.trained else "blind"

    def _seed_for(self, seeds) -> int:
        if isinstance(seeds, range):
            # each collector walks its own interleaved share of the range
            key = (seeds.start, seeds.stop, seeds.step)
            i = self._next_seed_index.get(key, 0)
            self._next_seed_index[key] = i + 1
            position = (self.collector_index + i * self.collectors_count) % len(seeds)
            return seeds[shuffled_position(position, len(seeds), self.seed)]
        return int(seeds)

    def __iter__(self):
        return self

    def __next__(self) -> MapSpec:
        name, seeds, is_explo, fill_buffer = self.cycle[self._position % len(self.cycle)]
        self._position += 1
        return MapSpec(name=name, seed=self._seed_for(seeds), is_explo=is_explo, fill_buffer=fill_buffer)
