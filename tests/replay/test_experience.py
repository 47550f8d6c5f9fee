import numpy as np
import pytest

from tests.helpers import layout_for, make_rollout, markers, tiny_config
from trackmania_rl.config.loader import default_config
from trackmania_rl.games.car_racing import floats as car_floats
from trackmania_rl.replay.buffers import make_buffers
from trackmania_rl.replay.experience import (
    InvalidRollout,
    fill_buffers,
    missed_road_tile_penalties,
    n_steps_per_transition,
    off_road_penalties,
    potentials,
    road_tile_rewards,
    rollout_to_experience,
    route_to_test,
    step_rewards,
)

GAMMA = 0.9


@pytest.fixture(scope="module")
def cfg():
    # round numbers: -0.8 per 80 ms action, +1 per metre, no tile term
    return tiny_config(n_steps=3, constant_reward_per_ms=-0.01, reward_per_m_advanced_along_centerline=1.0, reward_per_new_road_tile=0.0)


@pytest.fixture(scope="module")
def layout(cfg):
    return layout_for(cfg)


def test_finished_race_by_hand(cfg, layout):
    assert cfg.ms_per_action == 80
    rollout = make_rollout(cfg, layout, 5, finished=True, progress=[0, 1, 3, 6, 10], race_time=3 * 80 + 40)
    np.testing.assert_allclose(step_rewards(rollout, cfg), [0.2, 1.2, 2.2, 4 - 0.4])
    exp = rollout_to_experience(rollout, cfg, layout, GAMMA)
    assert len(exp) == 4 and exp.n_states == 5  # each state once, the finish pseudo-state included
    np.testing.assert_array_equal(exp.n_steps, [3, 3, 2, 1])
    np.testing.assert_array_equal(exp.next_state_index, [3, 4, 4, 4])
    np.testing.assert_array_equal(exp.terminal_actions, [4, 3, 2, 1])
    expected = [
        [0.2, 0.2 + 0.9 * 1.2, 0.2 + 0.9 * 1.2 + 0.81 * 2.2],
        [1.2, 1.2 + 0.9 * 2.2, 1.2 + 0.9 * 2.2 + 0.81 * 3.6],
        [2.2, 2.2 + 0.9 * 3.6, 0.0],
        [3.6, 0.0, 0.0],
    ]
    np.testing.assert_allclose(exp.rewards, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(exp.gammas, np.tile([0.9, 0.81, 0.729], (4, 1)), rtol=1e-6)
    np.testing.assert_array_equal(exp.action, rollout["actions"][:4])
    assert exp.potential[4] == 0.0  # finish pseudo-state
    t = exp.transition(3)
    assert markers(layout, t["next_state_float"]) == 4 and t["next_state_potential"] == 0.0


def test_cut_off_race_by_hand(cfg, layout):
    rollout = make_rollout(cfg, layout, 5, finished=False, progress=[0, 1, 3, 6, 10])
    assert len(rollout["actions"]) == 5
    np.testing.assert_allclose(step_rewards(rollout, cfg), [0.2, 1.2, 2.2, 3.2])
    exp = rollout_to_experience(rollout, cfg, layout, GAMMA)
    assert len(exp) == 4
    np.testing.assert_array_equal(exp.n_steps, [3, 3, 2, 1])
    assert np.all(np.isinf(exp.terminal_actions))
    np.testing.assert_allclose(exp.rewards[1], [1.2, 1.2 + 0.9 * 2.2, 1.2 + 0.9 * 2.2 + 0.81 * 3.2], rtol=1e-6)
    assert exp.potential[4] != 0.0  # an ordinary state keeps its potential


def test_n_steps_stop_at_first_non_greedy_action(cfg, layout):
    greedy = [True, False, True, True, True, False, True, True]
    assert list(n_steps_per_transition(greedy, 8, 3, True)) == [1, 3, 3, 2, 1, 2, 1]
    assert list(n_steps_per_transition(greedy, 8, 3, False)) == [3, 3, 3, 3, 3, 2, 1]
    rollout = make_rollout(cfg, layout, 8, finished=False, greedy=greedy)
    exp = rollout_to_experience(rollout, cfg, layout, GAMMA)
    np.testing.assert_array_equal(exp.n_steps, [1, 3, 3, 2, 1, 2, 1])
    np.testing.assert_array_equal(exp.next_state_index - exp.state_index, exp.n_steps)
    # the bootstrap state of transition 0 is state 1, where the exploratory action was taken
    np.testing.assert_allclose(exp.rewards[0], [step_rewards(rollout, cfg)[0], 0, 0], rtol=1e-6)


def test_potential_reads_the_zone_center_by_name(cfg, layout):
    centers = [(3.0, 4.0), (0.0, 1.0), (30.0, 0.0), (0.0, 10.0)]  # distances 5, 1 (clipped to 2), 30 (to 20), 10
    rollout = make_rollout(cfg, layout, 4, finished=False, zone_center=centers)
    states = np.stack(rollout["state_float"])
    distance = car_floats.distance_to_current_zone_center(layout, states)
    np.testing.assert_allclose(distance, [5, 1, 30, 10])
    c = cfg.shaped_reward_dist_to_cur_vcp
    np.testing.assert_allclose(potentials(states, layout, cfg), [c * 5, c * 2, c * 20, c * 10], rtol=1e-6)
    exp = rollout_to_experience(rollout, cfg, layout, GAMMA)
    np.testing.assert_allclose(exp.potential, [c * 5, c * 2, c * 20, c * 10], rtol=1e-6)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r["state_float"][2].__setitem__(3, np.nan), "NaN"),
        (lambda r: r["frames"].__setitem__(1, np.zeros((16, 16), np.uint8)), "frames"),
        (lambda r: r["meters_advanced_along_centerline"].pop(), "entries"),
        (lambda r: r["actions"].__setitem__(slice(0, None), r["actions"][:2]), "actions"),
        (lambda r: r.__setitem__("race_time", 10), "race_time"),
        (lambda r: r["state_float"].__setitem__(0, np.zeros(5, np.float32)), "state_float"),
    ],
)
def test_broken_rollouts_are_refused(cfg, layout, change, message):
    rollout = make_rollout(cfg, layout, 6, finished=True)
    change(rollout)
    with pytest.raises(InvalidRollout, match=message):
        rollout_to_experience(rollout, cfg, layout, GAMMA)


def test_tiny_rollouts(cfg, layout):
    assert len(rollout_to_experience(make_rollout(cfg, layout, 1, finished=False), cfg, layout, GAMMA)) == 0
    exp = rollout_to_experience(make_rollout(cfg, layout, 2, finished=True), cfg, layout, GAMMA)
    assert len(exp) == 1 and exp.terminal_actions[0] == 1 and exp.n_steps[0] == 1


def test_select_keeps_only_the_states_it_needs(cfg, layout):
    exp = rollout_to_experience(make_rollout(cfg, layout, 10, finished=False), cfg, layout, GAMMA)
    part = exp.select(np.array([False] * 5 + [True] * 2 + [False] * 2))  # transitions 5, 6 (n = 3, 3)
    assert len(part) == 2
    np.testing.assert_array_equal(markers(layout, part.state_float), [5, 6, 8, 9])
    for k, i in enumerate([5, 6]):
        a, b = part.transition(k), exp.transition(i)
        np.testing.assert_array_equal(a["next_state_frame"], b["next_state_frame"])
        np.testing.assert_array_equal(a["rewards"], b["rewards"])


def test_test_split_comes_in_short_runs(cfg):
    mask = route_to_test(400_000, cfg, np.random.default_rng(1))
    assert abs(mask.mean() - cfg.buffer_test_ratio) < 0.01
    starts = np.flatnonzero(np.diff(mask.astype(int)) == 1)
    mean_run = mask.sum() / len(starts)
    expected = 1 / (cfg.buffer_test_switch_probability * (1 - cfg.buffer_test_ratio))
    assert abs(mean_run - expected) < 0.15 * expected
    assert route_to_test(1000, cfg.replace(buffer_test_ratio=0.0), np.random.default_rng(1)).sum() == 0


def test_fill_buffers_routes_transitions(cfg, layout):
    buffer, buffer_test = make_buffers(cfg, layout, 1000, rng=np.random.default_rng(0))
    rollout = make_rollout(cfg, layout, 300, finished=True)
    expected_test = route_to_test(299, cfg, np.random.default_rng(7))
    n_train, n_test = fill_buffers(rollout, buffer, buffer_test, cfg, layout, GAMMA, np.random.default_rng(7))
    assert (n_train, n_test) == (299 - expected_test.sum(), expected_test.sum()) and n_test > 0
    assert len(buffer) == n_train and len(buffer_test) == n_test
    for buf, mask in ((buffer, ~expected_test), (buffer_test, expected_test)):
        stored = buf.storage.to_experience()
        np.testing.assert_array_equal(markers(layout, stored.state_float[stored.state_index]), np.flatnonzero(mask))
    with pytest.raises(InvalidRollout):
        bad = make_rollout(cfg, layout, 10, finished=False)
        bad["state_float"][4][1] = np.inf
        fill_buffers(bad, buffer, buffer_test, cfg, layout, GAMMA, np.random.default_rng(0))
    assert len(buffer) == n_train  # nothing stored from a broken rollout


def test_off_road_penalty_follows_the_wheels_off_the_road_in_the_state_arrived_in():
    cfg = tiny_config(off_road_penalty_per_action=0.5, n_steps=1, shaped_reward_dist_to_cur_vcp=0.0, reward_per_new_road_tile=0.0)
    layout = layout_for(cfg)
    rollout = make_rollout(cfg, layout, 5, finished=True, rng=np.random.default_rng(0))
    on_road = [[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0]]  # the last: the finish pseudo-state
    for state, wheels in zip(rollout["state_float"], on_road, strict=True):
        state[layout.slice(car_floats.WHEELS_ON_ROAD)] = wheels
    floats = np.stack(rollout["state_float"])
    np.testing.assert_allclose(off_road_penalties(floats, layout, cfg), [-0.25, -0.5, -0.125, -0.5])
    with_penalty = rollout_to_experience(rollout, cfg, layout, gamma=0.9)
    without = rollout_to_experience(rollout, cfg.replace(off_road_penalty_per_action=0.0), layout, gamma=0.9)
    np.testing.assert_allclose(with_penalty.rewards[:, 0] - without.rewards[:, 0], [-0.25, -0.5, -0.125, 0.0], atol=1e-6)


def test_road_tile_reward_pays_the_tiles_first_touched_in_each_step():
    cfg = tiny_config(reward_per_new_road_tile=0.1, n_steps=1, shaped_reward_dist_to_cur_vcp=0.0)
    layout = layout_for(cfg)
    rollout = make_rollout(cfg, layout, 5, finished=True)
    rollout["road_tiles_touched"] = [1, 3, 3, 7, 8]  # the last: at the finish pseudo-state
    np.testing.assert_allclose(road_tile_rewards(rollout, cfg), [0.2, 0.0, 0.4, 0.1])
    with_tiles = rollout_to_experience(rollout, cfg, layout, gamma=0.9)
    without = rollout_to_experience(rollout, cfg.replace(reward_per_new_road_tile=0.0), layout, gamma=0.9)
    np.testing.assert_allclose(with_tiles.rewards[:, 0] - without.rewards[:, 0], [0.2, 0.0, 0.4, 0.1], atol=1e-6)


def test_road_tiles_touched_while_driving_back_pay_nothing_when_the_run_limits_it():
    cfg = tiny_config(reward_per_new_road_tile=0.1, n_steps=1, shaped_reward_dist_to_cur_vcp=0.0)
    layout = layout_for(cfg)
    rollout = make_rollout(cfg, layout, 6, finished=False)
    rollout["road_tiles_touched"] = [0, 2, 3, 5, 6, 8]
    # forward to 30 m, back to 27 m (3 m behind), back to 20 m (10 m behind), forward again to 26 m (4 m behind)
    rollout["meters_advanced_along_centerline"] = [10.0, 20.0, 30.0, 27.0, 20.0, 26.0]
    np.testing.assert_allclose(road_tile_rewards(rollout, cfg), [0.2, 0.1, 0.2, 0.1, 0.2])  # None: all pay
    limited = cfg.replace(road_tile_reward_max_m_behind_furthest=5.0)
    np.testing.assert_allclose(road_tile_rewards(rollout, limited), [0.2, 0.1, 0.2, 0.0, 0.2])
    strict = cfg.replace(road_tile_reward_max_m_behind_furthest=0.0)
    np.testing.assert_allclose(road_tile_rewards(rollout, strict), [0.2, 0.1, 0.0, 0.0, 0.0])


def test_missed_road_tile_penalty_charges_the_tiles_judged_missed_in_each_step():
    cfg = tiny_config(missed_road_tile_penalty=2.0, n_steps=1, shaped_reward_dist_to_cur_vcp=0.0)
    layout = layout_for(cfg)
    rollout = make_rollout(cfg, layout, 5, finished=True)
    rollout["road_tiles_missed"] = [0, 0, 1, 1, 3]  # the last: at the finish, every tile left untouched
    np.testing.assert_allclose(missed_road_tile_penalties(rollout, cfg), [0.0, -2.0, 0.0, -4.0])
    charged = rollout_to_experience(rollout, cfg, layout, gamma=0.9)
    free = rollout_to_experience(rollout, cfg.replace(missed_road_tile_penalty=0.0), layout, gamma=0.9)
    np.testing.assert_allclose(charged.rewards[:, 0] - free.rewards[:, 0], [0.0, -2.0, 0.0, -4.0], atol=1e-6)


@pytest.mark.parametrize(
    ("setting", "key"), [("reward_per_new_road_tile", "road_tiles_touched"), ("missed_road_tile_penalty", "road_tiles_missed")]
)
def test_road_tile_terms_need_their_tile_counts_and_check_them(setting, key):
    cfg = tiny_config(**{setting: 0.1})
    layout = layout_for(cfg)
    rollout = make_rollout(cfg, layout, 4, finished=False)
    rollout.pop(key, None)
    rollout_to_experience(rollout, cfg.replace(**{setting: 0.0}), layout, GAMMA)  # not needed when 0
    with pytest.raises(InvalidRollout, match=f"lacks `{key}`, which {setting} needs"):
        rollout_to_experience(rollout, cfg, layout, GAMMA)
    for bad, message in (([0, 2, 1, 3], "non-decreasing"), ([0, 1, 2], "3 entries but `frames` has 4"), ([0, 1.5, 2, 3], "integers")):
        rollout[key] = bad
        with pytest.raises(InvalidRollout, match=f"`{key}`.*{message}"):
            rollout_to_experience(rollout, cfg.replace(**{setting: 0.0}), layout, GAMMA)


def test_the_no_progress_penalty_falls_on_the_last_step_of_the_races_that_cut_off_ended():
    """Real CarRacing races, each ended by a known rule; the penalty reads which from the race's own records and
    charges exactly those the no-progress cut-off ended, on their last step."""
    from trackmania_rl.games.base import MapSpec
    from trackmania_rl.games.car_racing.actions import find_action
    from trackmania_rl.games.car_racing.driver import centerline_follower
    from trackmania_rl.games.car_racing.instance import CarRacingGameInstance
    from trackmania_rl.replay.experience import no_progress_penalties

    cfg = default_config(no_progress_penalty=7.0, cutoff_rollout_if_race_not_finished_within_duration_ms=6_000)
    n = len(cfg.inputs)
    accelerate, brake = find_action(cfg, accelerate=True), find_action(cfg, brake=True)

    def actions(plan):
        played = iter(plan)

        def policy(frame, state_float):
            action = next(played, plan[-1])
            return action, True, 0.0, np.eye(n, dtype=np.float32)[action]

        return policy

    game = CarRacingGameInstance(cfg)
    try:
        races = {}
        for name, seed, policy in [
            ("stalled at the start", 3, actions([brake])),
            ("drove, then stopped", 4, actions([accelerate] * 20 + [brake])),
            ("overall cut-off while driving", 5, centerline_follower(cfg, game.float_layout)),
        ]:
            spec = MapSpec(f"seed{seed}", seed)
            races[name] = game.rollout(policy, spec, game.zone_centers_for(spec), lambda: None)
        # a lap finished: the follower, with the time to finish it
        finishing = CarRacingGameInstance(cfg.replace(cutoff_rollout_if_race_not_finished_within_duration_ms=60_000))
        try:
            spec = MapSpec("seed5", 5)
            races["finished"] = finishing.rollout(
                centerline_follower(cfg, game.float_layout), spec, finishing.zone_centers_for(spec), lambda: None
            )
        finally:
            finishing.close()
    finally:
        game.close()
    reasons = {name: stats["end_reason"] for name, (_, stats) in races.items()}
    assert reasons == {
        "stalled at the start": "no_progress",
        "drove, then stopped": "no_progress",
        "overall cut-off while driving": "overall",
        "finished": "finished",
    }
    for name, (results, stats) in races.items():
        penalties = no_progress_penalties(results, cfg)
        assert len(penalties) == len(results["frames"]) - 1
        expected = -7.0 if stats["end_reason"] == "no_progress" else 0.0
        assert penalties[-1] == expected and not penalties[:-1].any(), name
        assert not no_progress_penalties(results, cfg.replace(no_progress_penalty=0.0)).any()
    # the penalty reaches the transitions into the cut-off, within their n steps
    results = races["drove, then stopped"][0]
    layout = layout_for(cfg)
    charged = rollout_to_experience(results, cfg, layout, GAMMA)
    free = rollout_to_experience(results, cfg.replace(no_progress_penalty=0.0), layout, GAMMA)
    difference = charged.rewards[np.arange(len(charged)), charged.n_steps - 1] - free.rewards[np.arange(len(free)), free.n_steps - 1]
    last = len(charged) - 1
    reaching = charged.next_state_index == last + 1
    np.testing.assert_allclose(difference[reaching], -7.0 * GAMMA ** (last - charged.state_index[reaching]), rtol=1e-5)
    assert not difference[~reaching].any()
