"""The map cycle (DESIGN §4): entries (name, seed or range of seeds, is_explo, fill_buffer), repeated.

A map whose entries fill the buffer somewhere in the cycle is "trained"; every other map is "blind"
(an evaluation track the learner never stores). An entry with a range of seeds hands out its seeds in
turn, so explo runs see a new track each time; several collectors start at different points of a range.
"""

from __future__ import annotations

from trackmania_rl.games.base import MapSpec


def trained_and_blind_maps(map_cycle) -> tuple[set, set]:
    trained = {name for name, _, _, fill_buffer in map_cycle if fill_buffer}
    blind = {name for name, _, _, _ in map_cycle} - trained
    return trained, blind


class MapCycle:
    """Endless iterator of MapSpec over a config's `map_cycle`.

    `collector_index`/`collectors_count` spread the seeds of ranges between collectors so that two
    collectors do not play the same tracks in lockstep.
    """

    def __init__(self, map_cycle, collector_index: int = 0, collectors_count: int = 1):
        self.collector_index = collector_index
        self.collectors_count = max(1, collectors_count)
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
            return seeds[(self.collector_index + i * self.collectors_count) % len(seeds)]
        return int(seeds)

    def __iter__(self):
        return self

    def __next__(self) -> MapSpec:
        name, seeds, is_explo, fill_buffer = self.cycle[self._position % len(self.cycle)]
        self._position += 1
        return MapSpec(name=name, seed=self._seed_for(seeds), is_explo=is_explo, fill_buffer=fill_buffer)
