"""The CarRacing game instance, on the real game (Gymnasium CarRacing-v3, headless)."""

import numpy as np
import pytest
from gymnasium.envs.box2d import car_racing as gym_car_racing

from trackmania_rl.config.loader import default_config
from trackmania_rl.games import make_game_instance
from trackmania_rl.games.base import ROLLOUT_ACTION_KEYS, ROLLOUT_STATE_KEYS, GameCrashed, MapSpec
from trackmania_rl.games.car_racing import floats as car_floats
from trackmania_rl.games.car_racing.actions import find_action
from trackmania_rl.games.car_racing.driver import centerline_follower
from trackmania_rl.games.car_racing.instance import CarRacingGameInstance
from trackmania_rl.games.zones import ZoneGeometry, ZoneTracker

LAP_SEEDS = (0, 1, 2)
INSTRUMENTATION = ("reset", "physics", "floats", "render", "convert_frame", "exploration_policy", "update_network", "bookkeeping")


def random_actions_policy(n_actions, seed):
    rng = np.random.default_rng(seed)

    def policy(frame, state_float):
        q = rng.normal(size=n_actions).astype(np.float32)
        greedy = rng.random() < 0.7
        action = int(np.argmax(q)) if greedy else int(rng.integers(n_actions))
        return action, greedy, float(q.max()), q

    return policy


@pytest.fixture(scope="module")
def cfg():
    return default_config()


@pytest.fixture(scope="module")
def game(cfg):
    g = CarRacingGameInstance(cfg)
    yield g
    g.close()


@pytest.fixture(scope="module")
def short_game(cfg):
    """Races cut off after 2 s of game time."""
    g = CarRacingGameInstance(cfg.replace(cutoff_rollout_if_race_not_finished_within_duration_ms=2_000))
    yield g
    g.close()


@pytest.fixture(scope="module")
def laps(game, cfg, play):
    """The scripted centerline follower on a few seeds: {seed: (rollout_results, end_race_stats)}."""
    return {seed: play(game, seed, centerline_follower(cfg, game.float_layout)) for seed in LAP_SEEDS}


@pytest.mark.slow
def test_scripted_policy_finishes_a_lap_on_several_seeds(laps, game):
    for seed, (results, stats) in laps.items():
        assert stats["race_finished"], (seed, stats["end_reason"], stats["progress_fraction"])
        assert stats["end_reason"] == "finished"
        # a lap of 800-1300 m at 20-70 m/s
        assert 10_000 < stats["race_time"] < 60_000
        assert stats["race_time"] == stats["race_time_for_ratio"] == results["race_time"]
        assert stats["race_time"] % 20 == 0  # physics-step resolution
        times = stats["cp_time_ms"]
        assert len(times) == 5 and times[0] == 0 and times[-1] == stats["race_time"]
        assert times == sorted(times) and len(set(times)) == 5
        # the car drove the lap on the road, so it collected nearly every tile
        assert stats["tiles_visited_fraction"] > 0.95
        # the per-state tile count the tile reward reads: ints from the first tiles under the car, non-decreasing, ending
        # at the fraction the native score paid for (a track has ~250-350 tiles)
        tiles = results["road_tiles_touched"]
        assert len(tiles) == len(results["frames"]) and all(type(n) is int for n in tiles)
        assert 0 <= tiles[0] <= 3 and np.all(np.diff(tiles) >= 0) and np.count_nonzero(np.diff(tiles)) > len(tiles) // 2
        n_tiles = round(tiles[-1] / stats["tiles_visited_fraction"])
        assert 200 < n_tiles < 400 and tiles[-1] / n_tiles == pytest.approx(stats["tiles_visited_fraction"], abs=1e-12)
        # the tiles driven past untouched: a non-decreasing int count that never exceeds the untouched ones, and at the
        # finish pseudo-step exactly the tiles the lap left untouched
        missed = results["road_tiles_missed"]
        assert len(missed) == len(tiles) and all(type(n) is int for n in missed) and np.all(np.diff(missed) >= 0)
        assert missed[0] == 0 and all(m + t <= n_tiles for m, t in zip(missed, tiles, strict=True))
        assert missed[-1] == n_tiles - tiles[-1]
        assert stats["native_score"] == pytest.approx(1000 * stats["tiles_visited_fraction"] - 0.1 * stats["race_time"] / 20, abs=1e-6)
        progress = np.array(results["meters_advanced_along_centerline"])
        zone_centers = game.zone_centers_for(MapSpec("x", seed))
        lap_length = np.sum(np.linalg.norm(np.diff(zone_centers[20:-100], axis=0), axis=1))
        assert progress[-1] - progress[0] == pytest.approx(lap_length, rel=0.01)
        assert stats["progress_fraction"] == pytest.approx(1.0)


@pytest.mark.slow
def test_rollout_contract_of_a_finished_race(laps, game, cfg):
    results, stats = laps[LAP_SEEDS[0]]
    layout = game.float_layout
    n_actions = len(cfg.inputs)
    A = len(results["actions"])
    F = A + 1
    for key in ROLLOUT_STATE_KEYS:
        assert len(results[key]) == F, key
    for key in ROLLOUT_ACTION_KEYS:
        assert len(results[key]) == A, key
    assert stats["n_actions"] == A
    for frame in results["frames"]:
        assert isinstance(frame, np.ndarray) and frame.dtype == np.uint8 and frame.shape == (1, cfg.H_downsized, cfg.W_downsized)
    car_block = layout.span(car_floats.CAR_STATE_FIRST, car_floats.CAR_STATE_LAST)
    for state, car in zip(results["state_float"], results["car_gear_and_wheels"], strict=True):
        assert state.dtype == np.float32 and state.shape == (layout.dim,)
        assert state[layout.slice(car_floats.MINI_RACE_CLOCK)] == 0.0
        assert np.all(np.isfinite(state))
        assert car.dtype == np.float32
        np.testing.assert_array_equal(car, state[car_block])
    assert all(type(i) is int for i in results["current_zone_idx"])
    assert all(type(m) is float for m in results["meters_advanced_along_centerline"])
    assert all(type(a) is int and 0 <= a < n_actions for a in results["actions"])
    assert all(type(g) is bool for g in results["action_was_greedy"])
    assert all(type(w) is bool for w in results["input_w"])
    assert all(q.dtype == np.float32 and q.shape == (n_actions,) for q in results["q_values"])
    assert results["input_w"] == [cfg.inputs[a]["accelerate"] for a in results["actions"]]
    # the finish pseudo-step
    n_zones = len(game.zone_centers_for(MapSpec("x", LAP_SEEDS[0])))
    finish_zone = n_zones - cfg.n_zone_centers_extrapolate_after_end_of_map
    assert results["current_zone_idx"][-1] == finish_zone
    assert max(results["current_zone_idx"][:-1]) == finish_zone - 1
    assert results["furthest_zone_idx"] == finish_zone == max(results["current_zone_idx"])
    finish_state = results["state_float"][-1]
    assert layout.get(finish_state, car_floats.DISTANCE_TO_FINISH)[0] == 0.0
    assert results["meters_advanced_along_centerline"][-1] >= max(results["meters_advanced_along_centerline"][:-1])
    # the pseudo-step's previous actions end with the last action played
    last_flags = layout.get(finish_state, car_floats.PREVIOUS_ACTIONS)[-4:]
    assert list(last_flags) == [float(cfg.inputs[results["actions"][-1]][f]) for f in car_floats.ACTION_FLAGS]
    assert type(results["race_time"]) is int
    assert (results["map_name"], results["seed"], results["is_explo"]) == ("seed0", 0, True)
    # end_race_stats
    assert stats["race_finished"] is True
    assert stats["value_starting_frame"] == 1.0
    assert [stats[f"q_value_{i}_starting_frame"] for i in range(n_actions)] == results["q_values"][0].tolist()
    assert isinstance(stats["native_score"], float)
    assert stats["left_playfield"] is False
    per_action = [stats[f"instrumentation__{s}"] for s in INSTRUMENTATION]
    assert all(ns >= 0 for ns in per_action)  # which stage gets which time: test_each_stage_is_timed_by_the_games_clock


@pytest.mark.slow
def test_float_inputs_describe_the_car(laps, game, cfg):
    results, _ = laps[LAP_SEEDS[0]]
    layout = game.float_layout
    states = np.stack(results["state_float"][:-1])
    first = states[0]
    # before the first action: previous actions are action 0, the car is at rest on the road
    np.testing.assert_array_equal(
        layout.get(first, car_floats.PREVIOUS_ACTIONS),
        np.tile([float(cfg.inputs[0][f]) for f in car_floats.ACTION_FLAGS], cfg.n_prev_actions_in_inputs),
    )
    assert np.all(layout.get(first, car_floats.WHEELS_ON_ROAD) == 1.0)
    assert abs(layout.get(first, car_floats.VELOCITY)).max() < 1e-3
    assert layout.get(first, car_floats.DISTANCE_TO_FINISH)[0] == cfg.margin_to_announce_finish_meters
    # the zone centers ahead are ahead: forward coordinates grow by about the look-ahead spacing
    zones = layout.get(states, car_floats.ZONE_CENTERS_AHEAD).reshape(len(states), -1, 2)
    spacing = cfg.distance_between_checkpoints * cfg.one_every_n_zone_centers_in_inputs
    assert np.median(zones[:, 1, 1] - zones[:, 0, 1]) == pytest.approx(spacing, rel=0.1)
    assert np.median(np.abs(zones[:, 0, 0])) < 3  # the car follows the centerline within a few metres
    # the car drives forward, mostly on the road, and the distance to the finish shrinks to 0
    speed = layout.get(states, car_floats.VELOCITY)
    assert np.median(speed[:, 1]) > 15 and np.median(np.abs(speed[:, 0])) < np.median(speed[:, 1]) / 5
    assert layout.get(states, car_floats.WHEELS_ON_ROAD).mean() > 0.9
    wheel_speed = layout.get(states, car_floats.WHEEL_SPEEDS)
    assert np.median(wheel_speed[:, 2]) > 20  # rad/s of the driven rear wheels
    to_finish = layout.get(states, car_floats.DISTANCE_TO_FINISH)[:, 0]
    assert np.all(np.diff(to_finish[-100:]) <= 0.5) and to_finish[-1] < 10
    # the steering angle is counterclockwise-positive: after a "right" action it is negative, after "left" positive
    steer = layout.get(states, car_floats.STEERING_ANGLE)[:, 0]
    actions = results["actions"][:-1]
    was_right = np.array([cfg.inputs[a]["right"] for a in actions])
    assert np.median(steer[1:][was_right]) < 0 < np.median(steer[1:][~was_right & np.array([cfg.inputs[a]["left"] for a in actions])])


def test_frames_show_the_road_darker_than_the_grass(game, cfg):
    """Project known world points into the frame: road centers are dark, grass away from the road light."""
    spec = MapSpec("frames", 4)
    zone_centers = game.zone_centers_for(spec)
    game.env.reset(seed=4)
    env = game.env
    track = np.array([(x, y) for _, _, x, y in env.track])
    policy = centerline_follower(cfg, game.float_layout)
    geometry = ZoneGeometry(
        zone_centers, cfg.n_zone_centers_extrapolate_before_start_of_map, cfg.n_zone_centers_extrapolate_after_end_of_map
    )
    tracker = ZoneTracker(geometry, game.max_distance_to_zone_center())
    road, grass, checked = [], [], 0
    for step in range(60):
        frame = game.convert_frame(env.render_state_pixels())[0]
        if step >= 15 and step % 5 == 0:  # the camera has finished its zoom-in after 1 s
            checked += 1
            # the HUD bar (black) is cut off: the bottom row shows the track
            assert frame[-1].mean() > 60
            car = np.array(env.car.hull.position)
            i = tracker.current_zone_idx
            centers = zone_centers[i + 2 : i + 8]
            for (row, col), point in zip(game.world_to_frame(centers), centers, strict=True):
                if np.linalg.norm(point - car) > 4 and 0 <= row < frame.shape[0] and 0 <= col < frame.shape[1]:
                    road.append(frame[int(row), int(col)])
            heading = zone_centers[i + 1] - zone_centers[i]
            side = np.array([-heading[1], heading[0]]) / np.linalg.norm(heading)
            candidates = np.concatenate([centers + side * 16, centers - side * 16])
            for (row, col), point in zip(game.world_to_frame(candidates), candidates, strict=True):
                far_from_road = np.min(np.linalg.norm(track - point, axis=1)) > 12
                if far_from_road and 0 <= row < frame.shape[0] and 0 <= col < frame.shape[1]:
                    grass.append(frame[int(row), int(col)])
        state = game.state_float(geometry, tracker.current_zone_idx, tracker.progress, [0] * cfg.n_prev_actions_in_inputs)
        control = game.controls[policy(None, state)[0]]
        for _ in range(cfg.physics_steps_per_action):
            env.step(control)
            tracker.update(tuple(env.car.hull.position), 0)
    assert checked == 9 and len(road) > 30 and len(grass) > 20
    road, grass = np.array(road), np.array(grass)
    # CarRacing's colours in grey: road ~102-107, grass 162 and 177
    assert np.all(road < 125), road
    assert np.all(grass > 145), grass


def test_cutoff_when_no_progress(game, cfg, play, fixed_actions_policy):
    """Braking at the start: the default 2 s no-progress cutoff (60 s overall)."""
    brake = find_action(cfg, brake=True)
    results, stats = play(game, 5, fixed_actions_policy(len(cfg.inputs), [brake]))
    assert stats["race_finished"] is False and stats["end_reason"] == "no_progress"
    assert stats["race_time"] == cfg.cutoff_rollout_if_race_not_finished_within_duration_ms
    assert stats["race_time_for_ratio"] == cfg.cutoff_rollout_if_no_vcp_passed_within_duration_ms
    assert "race_time" not in results
    A = cfg.cutoff_rollout_if_no_vcp_passed_within_duration_ms // cfg.ms_per_action
    for key in ROLLOUT_STATE_KEYS + ROLLOUT_ACTION_KEYS + ("road_tiles_touched", "road_tiles_missed"):
        assert len(results[key]) == A, key
    assert results["road_tiles_missed"][-1] == 0  # it never got 10 m past a tile
    assert stats["cp_time_ms"] == [0]
    assert stats["native_score"] == pytest.approx(1000 * stats["tiles_visited_fraction"] - 0.1 * A * cfg.physics_steps_per_action)


def test_overall_cutoff(short_game, cfg, play, fixed_actions_policy):
    results, stats = play(short_game, 6, fixed_actions_policy(len(cfg.inputs), [0]))
    A = 2_000 // cfg.ms_per_action
    assert stats["end_reason"] == "overall" and stats["race_time_for_ratio"] == 2_000
    assert stats["race_time"] == 2_000 and "race_time" not in results
    assert len(results["actions"]) == len(results["frames"]) == A


def test_leaving_the_playfield_ends_the_race_as_a_cutoff(short_game, cfg, play):
    """CarRacing's own rule (|x| or |y| > 333): the car is moved past the edge before its 6th action."""
    game = short_game
    n = len(cfg.inputs)
    calls = []

    def policy(frame, state_float):
        calls.append(1)
        if len(calls) == 6:
            for body in [game.env.car.hull] + game.env.car.wheels:
                body.position = (body.position[0] + 400.0, body.position[1])
        return 0, True, 0.0, np.zeros(n, np.float32)

    results, stats = play(game, 1, policy)
    assert stats["end_reason"] == "left_playfield" and stats["left_playfield"] is True
    assert stats["race_finished"] is False and stats["race_time"] == game.cfg.cutoff_rollout_if_race_not_finished_within_duration_ms
    assert stats["race_time_for_ratio"] == 5 * cfg.ms_per_action + 20  # the first physics step of action 6
    assert len(results["actions"]) == len(results["frames"]) == 6 and "race_time" not in results
    # Gymnasium's -100 replaces the last step's reward
    steps = stats["race_time_for_ratio"] // 20
    assert stats["native_score"] == pytest.approx(1000 * stats["tiles_visited_fraction"] - 0.1 * (steps - 1) - 100)
    # the action it left on carries the -100 in the game's own reward of each action (one per action)
    assert len(results["game_reward"]) == 6 and results["game_reward"][-1] == pytest.approx(-100, abs=0.5)
    assert sum(results["game_reward"]) == pytest.approx(stats["native_score"])


def test_each_stage_is_timed_by_the_games_clock(cfg, play):
    """The instrumentation reads the instance's clock: with a clock that moves only inside the game's reset, physics
    steps and renders (the pygame renderer's), the policy and the network update (by amounts of its own), each stage
    gets exactly its time per action."""
    now = [0]
    game = CarRacingGameInstance(
        cfg.replace(
            frame_renderer="pygame",
            cutoff_rollout_if_race_not_finished_within_duration_ms=1_600,
            update_inference_network_every_n_actions=3,
        ),
        clock=lambda: now[0],
    )
    env = game.env
    real_reset, real_step, real_render = env.reset, env.step, env.render_state_pixels

    def costing(function, ns):
        def timed(*args, **kwargs):
            now[0] += ns
            return function(*args, **kwargs)

        return timed

    env.reset, env.step, env.render_state_pixels = costing(real_reset, 11_000), costing(real_step, 500), costing(real_render, 7_000)

    def policy(frame, state_float):
        now[0] += 3_000
        return 0, True, 0.0, np.zeros(len(cfg.inputs), dtype=np.float32)

    try:
        first = play(game, 6, policy, costing(lambda: None, 900))  # the track fresh from zone_centers_for: no reset
        second = play(game, 6, policy, costing(lambda: None, 900))  # played on since: reset for this race
    finally:
        game.close()
    for (results, stats), reset_ns in ((first, 0), (second, 11_000 + 500)):  # CarRacing's reset plays one step of its own
        A = len(results["actions"])
        assert A == 1_600 // cfg.ms_per_action and stats["end_reason"] == "overall"
        updates = len(range(0, A, 3))
        expected = {
            "reset": reset_ns / A,
            "physics": 500 * cfg.physics_steps_per_action,
            "floats": 0,
            "render": 7_000,
            "convert_frame": 0,
            "exploration_policy": 3_000,
            "update_network": 900 * updates / A,
            "bookkeeping": 0,
        }
        # bookkeeping 0: all the race's time is in the timed stages (the zone centers' own reset, before the race, is not)
        assert {stage: stats[f"instrumentation__{stage}"] for stage in INSTRUMENTATION} == pytest.approx(expected)


def test_update_network_is_called_every_n_actions(cfg, play):
    game = CarRacingGameInstance(
        cfg.replace(cutoff_rollout_if_race_not_finished_within_duration_ms=1_600, update_inference_network_every_n_actions=3)
    )
    decisions = []
    updates_before_decision = []

    def policy(frame, state_float):
        decisions.append(len(updates_before_decision))
        return 0, True, 0.0, np.zeros(len(cfg.inputs), dtype=np.float32)

    def update():
        updates_before_decision.append(len(decisions))

    play(game, 6, policy, update)
    game.close()
    assert updates_before_decision == list(range(0, 20, 3))  # before decisions 0, 3, 6, ...


def test_same_seed_and_actions_give_identical_rollouts(short_game, cfg, play):
    def run(game):
        return play(game, 7, random_actions_policy(len(cfg.inputs), seed=11))

    first, again = run(short_game), run(short_game)
    other = CarRacingGameInstance(short_game.cfg)
    fresh = run(other)
    other.close()
    for results, stats in (again, fresh):
        for key in ROLLOUT_STATE_KEYS + ROLLOUT_ACTION_KEYS:
            assert len(results[key]) == len(first[0][key])
            for a, b in zip(results[key], first[0][key], strict=True):
                np.testing.assert_array_equal(a, b)
        assert results["furthest_zone_idx"] == first[0]["furthest_zone_idx"]
        assert stats["native_score"] == first[1]["native_score"]
        assert stats["cp_time_ms"] == first[1]["cp_time_ms"]


def test_one_render_per_action_is_bit_identical_to_plain_steps(cfg, monkeypatch, play, fixed_actions_policy):
    """With the pygame renderer, the rollout's frames and native score equal those of a plain CarRacing stepped k times
    per action (rendering at the same size: the plain env reads the module's STATE_W/STATE_H)."""
    game = CarRacingGameInstance(cfg.replace(frame_renderer="pygame", cutoff_rollout_if_race_not_finished_within_duration_ms=2_000))
    try:
        monkeypatch.setattr(gym_car_racing, "STATE_W", game.env.render_size[0])
        monkeypatch.setattr(gym_car_racing, "STATE_H", game.env.render_size[1])
        actions = [find_action(cfg, accelerate=True)] * 8 + [find_action(cfg, accelerate=True, left=True)] * 6
        actions += [find_action(cfg, brake=True, right=True)] * 4 + [find_action(cfg)] * 7
        results, stats = play(game, 8, fixed_actions_policy(len(cfg.inputs), actions))
        plain = gym_car_racing.CarRacing(render_mode="state_pixels")
        observation, _ = plain.reset(seed=8)
        native_score = 0.0
        plain_frames, plain_action_rewards = [], []
        for action in results["actions"]:
            plain_frames.append(game.convert_frame(observation))
            action_reward = 0.0
            for _ in range(cfg.physics_steps_per_action):
                observation, reward, _, _, _ = plain.step(game.controls[action].copy())
                native_score += reward
                action_reward += reward
            plain_action_rewards.append(action_reward)
        plain.close()
        assert len(plain_frames) == len(results["frames"]) == 25
        for ours, theirs in zip(results["frames"], plain_frames, strict=True):
            np.testing.assert_array_equal(ours, theirs)
        assert stats["native_score"] == native_score  # exact: same float operations
        assert results["game_reward"] == plain_action_rewards  # the game's own reward of each action, exact too
        assert any(r > 0 for r in plain_action_rewards) and any(r < 0 for r in plain_action_rewards)  # tiles and time
        # and the raw view after the last action (above the HUD: step() draws the HUD's score before
        # subtracting that step's 0.1, a render after the step shows it after, so the digits may differ)
        view_rows = cfg.H_downsized
        np.testing.assert_array_equal(game.env.render_state_pixels()[:view_rows], observation[:view_rows])
        assert tuple(game.env.car.hull.position) == tuple(plain.car.hull.position)
    finally:
        game.close()


def test_a_game_that_raises_mid_race_is_rebuilt(short_game, cfg, play, fixed_actions_policy):
    game = short_game
    broken_env = game.env
    real_step = broken_env.step
    calls = []

    def failing_step(action):
        calls.append(1)
        if len(calls) == 10:
            raise RuntimeError("Box2D fell over")
        return real_step(action)

    broken_env.step = failing_step
    with pytest.raises(GameCrashed) as crash:
        play(game, 9, fixed_actions_policy(len(cfg.inputs), [0]))
    assert isinstance(crash.value.__cause__, RuntimeError) and "Box2D fell over" in str(crash.value)
    assert game.env is not broken_env
    results, stats = play(game, 9, fixed_actions_policy(len(cfg.inputs), [0]))
    assert stats["end_reason"] == "overall" and len(results["frames"]) == 25


def test_bad_input_gets_a_clear_error(short_game, cfg, fixed_actions_policy, no_update):
    game = short_game
    zone_centers = game.zone_centers_for(MapSpec("ok", 1))
    for bad in ("seed 3", 3, MapSpec("neg", -1), MapSpec("str", "3"), MapSpec("bool", True), MapSpec("", 3)):
        with pytest.raises(ValueError, match="map spec"):
            game.zone_centers_for(bad)
        with pytest.raises(ValueError, match="map spec"):
            game.rollout(fixed_actions_policy(len(cfg.inputs), [0]), bad, zone_centers, no_update)
    n = len(cfg.inputs)
    for action in (n, -1, 2.0, True, None):
        with pytest.raises(ValueError, match=f"action {action!r}"):
            game.rollout(lambda f, s, a=action: (a, True, 0.0, np.zeros(n, np.float32)), MapSpec("ok", 1), zone_centers, no_update)
    with pytest.raises(ValueError, match="q_values"):
        game.rollout(lambda f, s: (0, True, 0.0, np.zeros(n + 1, np.float32)), MapSpec("ok", 1), zone_centers, no_update)
    with pytest.raises(ValueError, match="do not belong"):
        game.rollout(fixed_actions_policy(n, [0]), MapSpec("other", 2), zone_centers, no_update)
    with pytest.raises(ValueError, match="H_downsized"):
        CarRacingGameInstance(cfg.replace(H_downsized=701))
    with pytest.raises(ValueError, match="W_downsized"):
        CarRacingGameInstance(cfg.replace(W_downsized=1001))
    with pytest.raises(ValueError, match="H_downsized"):
        game.update_config(game.cfg.replace(H_downsized=32))
    with pytest.raises(NotImplementedError, match="user_config.game_backend"):
        make_game_instance(cfg, "trackmania")


def test_a_track_is_generated_once_for_its_first_race_and_again_only_once_played_on(
    short_game, cfg, play, fixed_actions_policy, monkeypatch
):
    """zone_centers_for resets the game on a new track; the race that follows starts from that very state instead of
    generating the track again (~10 ms), and plays as a race from its own reset does; a second race on the track, with
    the first played on it, resets it."""
    game = short_game
    resets = []
    real_reset = game.env.reset

    def counted_reset(*args, **kwargs):
        resets.append(kwargs.get("seed"))
        return real_reset(*args, **kwargs)

    monkeypatch.setattr(game.env, "reset", counted_reset)  # the game is the module's: undone after the test
    policy = fixed_actions_policy(len(cfg.inputs), [find_action(cfg, accelerate=True)])
    first = play(game, 123, policy)  # a new track: one reset, by zone_centers_for
    assert resets == [123]
    second = play(game, 123, fixed_actions_policy(len(cfg.inputs), [find_action(cfg, accelerate=True)]))
    assert resets == [123, 123]  # played on since: reset again
    assert [f.tobytes() for f in first[0]["frames"]] == [f.tobytes() for f in second[0]["frames"]]
    assert first[1]["native_score"] == second[1]["native_score"]
