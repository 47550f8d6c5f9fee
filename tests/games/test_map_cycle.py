from itertools import islice

from trackmania_rl.games.map_cycle import MapCycle


def test_cycle_repeats_entries_and_walks_seed_ranges():
    cycle = [("train", range(100, 200), True, True)] * 2 + [("blind", range(0, 3), False, False), ("fixed", 7, False, True)]
    specs = list(islice(MapCycle(cycle), 8))
    assert [s.name for s in specs] == ["train", "train", "blind", "fixed"] * 2
    assert [s.seed for s in specs if s.name == "train"] == [100, 101, 102, 103]
    assert [s.seed for s in specs if s.name == "blind"] == [0, 1]
    assert all(s.seed == 7 for s in specs if s.name == "fixed")
    assert [s.is_explo for s in specs[:4]] == [True, True, False, False]


def test_trained_and_blind_status():
    cycle = MapCycle([("a", 1, True, True), ("a", 1, False, False), ("b", 2, False, False)])
    assert cycle.status("a") == "trained"
    assert cycle.status("b") == "blind"


def test_collectors_get_disjoint_seeds_from_a_range():
    cycle = [("train", range(0, 1000), True, True)]
    first = [s.seed for s in islice(MapCycle(cycle, 0, 2), 5)]
    second = [s.seed for s in islice(MapCycle(cycle, 1, 2), 5)]
    assert first == [0, 2, 4, 6, 8] and second == [1, 3, 5, 7, 9]


def test_edited_cycle_restarts_from_its_beginning():
    cycle = MapCycle([("a", 1, True, True), ("b", 2, True, True)])
    next(cycle)
    cycle.set_cycle([("c", 3, True, True), ("d", 4, True, True)])
    assert next(cycle).name == "c"


def test_the_run_seed_reorders_a_range_and_keeps_collectors_disjoint():
    cycle = [("train", range(1_000, 1_100), True, True)]
    default = [s.seed for s in islice(MapCycle(cycle), 100)]
    assert default == list(range(1_000, 1_100))
    seeded = [s.seed for s in islice(MapCycle(cycle, seed=7), 100)]
    other = [s.seed for s in islice(MapCycle(cycle, seed=8), 100)]
    assert sorted(seeded) == default and sorted(other) == default  # every track once per pass, none outside the range
    assert seeded != default and seeded != other
    assert seeded == [s.seed for s in islice(MapCycle(cycle, seed=7), 100)]  # the same seed, the same order
    halves = [[s.seed for s in islice(MapCycle(cycle, index, 2, seed=7), 50)] for index in (0, 1)]
    assert set(halves[0]).isdisjoint(halves[1]) and sorted(halves[0] + halves[1]) == default
