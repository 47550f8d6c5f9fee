"""SuperTuxKart races as the trainer plays them (games/supertuxkart/instance.py): the driveline's zones and progress,
the floats and frames, how a race ends by either rules, what the learner takes from it, and the game's AI."""

import numpy as np
import pytest

from trackmania_rl.config.loader import frame_shape
from trackmania_rl.games import make_game_instance
from trackmania_rl.games.backend import game_backend
from trackmania_rl.games.base import RULES_NATIVE, MapSpec
from trackmania_rl.games.supertuxkart import floats as kart_floats
from trackmania_rl.games.supertuxkart.actions import find_action
from trackmania_rl.games.supertuxkart.driver import zone_follower
from trackmania_rl.replay.experience import rollout_to_experience
from trackmania_rl.rollouts.contract import require_reward_keys, validate_rollout

pytestmark = pytest.mark.supertuxkart


def test_a_scripted_driver_finishes_a_lap_and_the_race_is_a_valid_rollout(game, kart_cfg, race):
    layout = game.float_layout
    results, stats = race(game, "lighthouse", zone_follower(kart_cfg, layout))
    assert stats["race_finished"] and stats["end_reason"] == "finished" and stats["progress_fraction"] == 1.0
    n = stats["n_actions"]
    # the game's own finish time, within the last action held; the race is deterministic
    assert (n - 1) * 100 < results["race_time"] <= n * 100 + 100 and stats["race_time"] == results["race_time"]
    assert stats["native_score"] == pytest.approx(1000 - results["race_time"] / 1000)
    assert stats["cp_time_ms"][0] == 0 and stats["cp_time_ms"] == sorted(stats["cp_time_ms"]) and len(stats["cp_time_ms"]) == 5
    steps = validate_rollout(results, frame_shape(kart_cfg), layout.dim, len(kart_cfg.inputs))
    assert len(results["frames"]) == n + 1 and results["frames"][0].shape == (1, 64, 64)
    # progress along the driveline: it grows to the finish (a lap of 880 m) and the finish pseudo-state has it
    progress = np.array(results["meters_advanced_along_centerline"])
    geometry_lap = progress[-1] - progress[0]
    assert 850 < geometry_lap < 900 and np.all(np.diff(progress[::10]) > -1.0)
    assert (
        results["current_zone_idx"][-1]
        == len(game.zone_centers_for(MapSpec("lighthouse", 0))) - kart_cfg.n_zone_centers_extrapolate_after_end_of_map
    )
    require_reward_keys(results, kart_cfg)
    experience = rollout_to_experience(results, kart_cfg, layout, 1.0)
    assert len(experience) > 0 and steps is not None
    again, again_stats = race(game, "lighthouse", zone_follower(kart_cfg, layout))
    assert again["race_time"] == results["race_time"] and again_stats["n_actions"] == n


def test_the_floats_say_the_karts_state_in_its_frame(game, kart_cfg, race):
    layout = game.float_layout
    results, _ = race(game, "lighthouse", zone_follower(kart_cfg, layout))
    floats = np.array(results["state_float"])
    assert layout.names() == list(kart_floats.SEGMENT_NAMES) and floats.shape[1] == layout.dim
    velocity = layout.get(floats, kart_floats.VELOCITY)
    assert velocity[0, 2] == pytest.approx(0.0, abs=0.5) and velocity[100:, 2].mean() > 15  # forward once going
    assert np.abs(velocity[100:, 0]).mean() < 0.3 * velocity[100:, 2].mean()  # driving ahead, not sideways
    centers = layout.get(floats, kart_floats.ZONE_CENTERS_AHEAD).reshape(len(floats), -1, 3)
    # centers further along the lap lie further ahead of the kart: the last center is ahead of the first, on average
    assert np.mean(np.linalg.norm(centers[:, -1], axis=1)) > 100 > np.mean(np.linalg.norm(centers[:, 0], axis=1))
    assert np.all(layout.get(floats, kart_floats.SKID) > 0)
    on_road = layout.get(floats, kart_floats.ON_ROAD)
    assert set(np.unique(on_road)) <= {0.0, 1.0} and on_road.mean() > 0.8
    # the previous actions are the flags of the actions played
    previous = layout.get(floats, kart_floats.PREVIOUS_ACTIONS).reshape(len(floats), kart_cfg.n_prev_actions_in_inputs, -1)
    played = np.array(
        [[float(kart_cfg.inputs[a].get(f, False)) for f in ("accelerate", "brake", "left", "right")] for a in results["actions"]]
    )
    np.testing.assert_array_equal(previous[1:, -1, :4], played)
    assert np.all(previous[0] == 0.0)  # before the start: nothing pressed
    distance = game_backend("supertuxkart").distance_to_current_zone_center(layout, floats)
    assert distance.shape == (len(floats),) and np.median(distance) < kart_cfg.distance_between_checkpoints * 2


def test_the_frame_is_the_road_around_the_kart_from_above(game, kart_cfg, race, constant_policy):
    results, _ = race(game, "lighthouse", constant_policy(len(kart_cfg.inputs), find_action(kart_cfg, accelerate=True)))
    frame = results["frames"][0][0]
    row, column = int(64 * 0.75), 32
    assert 140 <= frame[row, column] <= 160  # the kart stands on its own road, at its own height
    assert frame[row, 0] == 0 and frame[row, 63] == 0  # beside the road: nothing
    full = game.render_full_view()
    assert full.shape == (400, 400, 3) and full.dtype == np.uint8 and full[300, 200, 0] > full[300, 200, 2]  # the red kart
    # the frames change as the kart drives, never the race: another race gives the same frames
    again, _ = race(game, "lighthouse", constant_policy(len(kart_cfg.inputs), find_action(kart_cfg, accelerate=True)))
    for ours, theirs in zip(results["frames"][:50], again["frames"][:50], strict=True):
        np.testing.assert_array_equal(ours, theirs)
    assert not np.array_equal(results["frames"][0], results["frames"][40])


def test_a_kart_that_does_not_move_is_cut_off_by_the_training_rules_and_capped_by_the_native_ones(game, kart_cfg, race, constant_policy):
    coast = constant_policy(len(kart_cfg.inputs), find_action(kart_cfg))
    game.update_config(kart_cfg.replace(cutoff_rollout_if_no_vcp_passed_within_duration_ms=1_500))
    try:
        results, stats = race(game, "zengarden", coast)
    finally:
        game.update_config(kart_cfg)
    assert stats["end_reason"] == "no_progress" and not stats["race_finished"] and "race_time" not in results
    assert stats["n_actions"] == 15 and len(results["frames"]) == 15  # F = A: the last state bootstraps
    native = make_game_instance(kart_cfg.replace(supertuxkart_native_time_cap_ms=2_000), rules=RULES_NATIVE)
    try:
        _, stats = race(native, "zengarden", coast)
    finally:
        native.close()
    assert stats["end_reason"] == "time_cap" and stats["n_actions"] == 20 and stats["race_time_for_ratio"] == 2_000
    assert stats["native_score"] == pytest.approx(1000 * stats["progress_fraction"] - 2.0)


def test_a_reverse_race_follows_the_driveline_the_other_way(game, kart_cfg, race):
    forward = game.zone_centers_for(MapSpec("zengarden", 0))
    backward = game.zone_centers_for(MapSpec("zengarden:reverse", 0))
    n_before = kart_cfg.n_zone_centers_extrapolate_before_start_of_map
    # the same road: the lap's points of one direction are near those of the other, in the other order
    assert abs(len(forward) - len(backward)) <= 2
    heading = forward[n_before + 5] - forward[n_before]
    reverse_heading = backward[n_before + 5] - backward[n_before]
    assert np.dot(heading, reverse_heading) < 0
    _, stats = race(game, "zengarden:reverse", zone_follower(kart_cfg, game.float_layout))
    assert stats["race_finished"]


def test_the_games_ai_drives_our_kart_to_its_lap_time(game):
    best = game.ai_race(MapSpec("olivermath", 0), difficulty=3)
    assert best["finished"] and best["difficulty"] == 3 and best["map_name"] == "olivermath"
    assert 15_000 < best["race_time_ms"] < 20_000  # 17.6 s, DESIGN §4c
    slowest = game.ai_race(MapSpec("olivermath", 0), difficulty=0)
    assert slowest["race_time_ms"] > 1.5 * best["race_time_ms"]  # difficulty scales our kart too (35.5 s)
    capped = game.ai_race(MapSpec("olivermath", 0), difficulty=3, time_cap_ms=5_000)
    assert not capped["finished"] and capped["race_time_ms"] is None and capped["steps"] == 50
    with pytest.raises(ValueError, match="difficulty 4"):
        game.ai_race(MapSpec("olivermath", 0), difficulty=4)
