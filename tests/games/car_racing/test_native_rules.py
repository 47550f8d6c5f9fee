"""The native rules (games/base.py RULES_NATIVE): a race of the game instance ends exactly when an episode of a plain
`gymnasium.make("CarRacing-v3")` (its TimeLimit included) driven with the same controls ends, with the same native
score. The game holds one action for `physics_steps_per_action` physics steps; the plain env gets each action once
per physics step. One case per way an episode ends: every tile touched (the model shipped until 2026-11-28, which does it in ~11 s),
the time limit (the scripted driver, slower than 20 s a lap) and leaving the playfield (the car moved past it)."""

from pathlib import Path

import gymnasium
import numpy as np
import pytest

from trackmania_rl.evaluation.evaluate import open_policy
from trackmania_rl.games.base import RULES_NATIVE, MapSpec
from trackmania_rl.games.car_racing.actions import find_action
from trackmania_rl.games.car_racing.driver import centerline_follower
from trackmania_rl.games.car_racing.env import NATIVE_ENV_ID, native_step_limit
from trackmania_rl.games.car_racing.instance import CarRacingGameInstance

# the model shipped until 2026-11-28 (trained on pygame frames), kept: its races on these tracks are known
SHIPPED_WEIGHTS = Path(__file__).resolve().parents[3] / "models" / "carracing_pygame_2026-11-26" / "weights.torch"
PLAYFIELD_ACTION = 5  # the car is moved past the playfield's edge before this action (0-based)


def move_past_the_playfield(car) -> None:
    for body in [car.hull] + car.wheels:
        body.position = (body.position[0] + 400.0, body.position[1])


def plain_episode(seed: int, controls: list[np.ndarray], steps_per_action: int, move_before: int | None = None) -> dict:
    """Drive a plain CarRacing-v3 episode with each control held for `steps_per_action` steps until it ends: how many
    steps it lasted, its summed reward, how it ended, and the steps it was given (to see that it did end)."""
    env = gymnasium.make(NATIVE_ENV_ID)
    try:
        env.reset(seed=seed)
        score, steps, end = 0.0, 0, None
        for index, control in enumerate(controls):
            if index == move_before:
                move_past_the_playfield(env.unwrapped.car)
            for _ in range(steps_per_action):
                _, reward, terminated, truncated, info = env.step(control.copy())
                score += reward
                steps += 1
                if terminated:
                    end = "finished" if info["lap_finished"] else "left_playfield"
                elif truncated:
                    end = "time_limit"
                if end is not None:
                    return {"steps": steps, "native_score": score, "end_reason": end}
        return {"steps": steps, "native_score": score, "end_reason": None}
    finally:
        env.close()


def race(cfg, seed: int, policy_for) -> tuple[CarRacingGameInstance, dict, dict]:
    game = CarRacingGameInstance(cfg, RULES_NATIVE)
    try:
        spec = MapSpec("native", seed, is_explo=False, fill_buffer=False)
        results, stats = game.rollout(policy_for(game), spec, game.zone_centers_for(spec), lambda: None)
    finally:
        game.close()
    return game, results, stats


def shipped_model(_game):
    return open_policy(weights=SHIPPED_WEIGHTS)


def scripted_driver(game):
    return centerline_follower(game.cfg, game.float_layout)


def driver_leaving_the_playfield(game):
    decisions = []
    n_actions = len(game.cfg.inputs)

    def policy(frame, state_float):
        if len(decisions) == PLAYFIELD_ACTION:
            move_past_the_playfield(game.env.car)
        decisions.append(1)
        return 0, True, 0.0, np.zeros(n_actions, np.float32)

    return policy


@pytest.mark.parametrize(
    "policy_for, seed, expected_end",
    [(shipped_model, 500_000, "finished"), (scripted_driver, 3, "time_limit"), (driver_leaving_the_playfield, 1, "left_playfield")],
    ids=["every_tile", "time_limit", "off_the_playfield"],
)
def test_a_native_race_ends_as_a_plain_carracing_v3_episode(cfg, policy_for, seed, expected_end):
    if policy_for is shipped_model:
        cfg = open_policy(weights=SHIPPED_WEIGHTS).cfg  # the settings the model was trained with
    game, results, stats = race(cfg, seed, policy_for)
    k = cfg.physics_steps_per_action
    steps = stats["race_time_for_ratio"] // 20
    assert stats["end_reason"] == expected_end  # each case covers one way an episode ends
    controls = [game.controls[a] for a in results["actions"]]
    plain = plain_episode(seed, controls, k, PLAYFIELD_ACTION if expected_end == "left_playfield" else None)
    assert plain["end_reason"] == stats["end_reason"]
    assert plain["steps"] == steps and (len(controls) - 1) * k < steps <= len(controls) * k  # ended in the last action
    assert plain["native_score"] == stats["native_score"]  # exact: the same float operations
    assert stats["race_finished"] == (expected_end == "finished")
    if expected_end == "time_limit":
        assert steps == native_step_limit() == 1000  # gymnasium 1.4.0's max_episode_steps for CarRacing-v3
    if expected_end == "finished":
        assert stats["tiles_visited_fraction"] == 1.0 and len(results["frames"]) == len(results["actions"]) + 1
        assert 0 < stats["lap_time_ms"] <= stats["race_time_for_ratio"]  # the line crossed, or every tile touched first
    if expected_end == "time_limit":  # the slow scripted driver does not lap in 20 s: no lap time
        assert stats["lap_time_ms"] is None and stats["progress_fraction"] < 1.0


def test_the_native_rules_check_no_cutoff(cfg, play, fixed_actions_policy):
    """Braking at the start: the training rules end the race after 2 s without progress, the native rules only at
    CarRacing-v3's time limit; and an unknown rule is refused."""
    brake = find_action(cfg, brake=True)
    short = cfg.replace(cutoff_rollout_if_race_not_finished_within_duration_ms=4_000)
    training = CarRacingGameInstance(short)
    native = CarRacingGameInstance(short, RULES_NATIVE)
    try:
        _, stats = play(training, 5, fixed_actions_policy(len(cfg.inputs), [brake]))
        assert stats["end_reason"] == "no_progress" and stats["race_time_for_ratio"] == 2_000
        results, stats = play(native, 5, fixed_actions_policy(len(cfg.inputs), [brake]))
        assert stats["end_reason"] == "time_limit" and stats["race_time_for_ratio"] == native_step_limit() * 20
        assert len(results["actions"]) == len(results["frames"]) == -(-native_step_limit() // cfg.physics_steps_per_action)
    finally:
        training.close()
        native.close()
    with pytest.raises(ValueError, match=r"race rules 'gym': expected one of \['native', 'training'\]"):
        CarRacingGameInstance(cfg, "gym")


def test_a_lap_that_misses_a_tile_has_a_lap_time_and_runs_to_the_time_limit():
    """The model shipped until 2026-11-28 on 500005 crosses the finish line having missed a tile (CarRacing's lap flag needs them all):
    the race runs on to the time limit, and its lap time is when the line was crossed."""
    policy = open_policy(weights=SHIPPED_WEIGHTS)
    game = CarRacingGameInstance(policy.cfg, RULES_NATIVE)
    try:
        spec = MapSpec("native", 500_005, is_explo=False, fill_buffer=False)
        _, stats = game.rollout(policy, spec, game.zone_centers_for(spec), lambda: None)
    finally:
        game.close()
    assert stats["end_reason"] == "time_limit" and stats["tiles_visited_fraction"] < 1.0
    assert 5_000 < stats["lap_time_ms"] < stats["race_time_for_ratio"] == native_step_limit() * 20
