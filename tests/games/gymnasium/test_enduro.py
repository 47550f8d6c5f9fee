"""The Gymnasium backend on a real game: Atari Enduro in ale-py's emulator (games/gymnasium/, config_files/enduro.py)."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ale_py")

from trackmania_rl.config.loader import REPO_ROOT, ConfigError, frame_shape, load_config  # noqa: E402
from trackmania_rl.games import make_game_instance  # noqa: E402
from trackmania_rl.games.backend import game_backend  # noqa: E402
from trackmania_rl.games.base import GAME_REWARD, RULES_NATIVE, MapSpec  # noqa: E402
from trackmania_rl.games.gymnasium import floats as gym_floats  # noqa: E402
from trackmania_rl.games.gymnasium.actions import meaning_words  # noqa: E402
from trackmania_rl.replay.experience import rollout_to_experience  # noqa: E402
from trackmania_rl.rollouts.contract import InvalidRollout, require_reward_keys, validate_rollout  # noqa: E402

pytestmark = pytest.mark.atari

ENDURO_CONFIG = REPO_ROOT / "config_files" / "enduro.py"
ACTIONS = 9  # Enduro's minimal action set


@pytest.fixture(scope="module")
def enduro_cfg():
    return load_config(ENDURO_CONFIG).replace(cutoff_rollout_if_race_not_finished_within_duration_ms=4_000)  # 60 actions a race


@pytest.fixture(scope="module")
def game(enduro_cfg):
    game = make_game_instance(enduro_cfg)
    yield game
    game.close()


def scripted_policy(actions):
    """A policy playing `actions` in turn (cycled): (action, greedy, value, q_values); it records the frames and floats it saw."""
    seen = []

    def policy(frame, state_float):
        action = actions[len(seen) % len(actions)]
        seen.append((frame.copy(), state_float.copy()))
        return action, True, 0.0, np.arange(ACTIONS, dtype=np.float32)

    policy.seen = seen
    return policy


def test_the_config_is_the_game_with_its_defaults(enduro_cfg, game):
    assert enduro_cfg.game_backend == "gymnasium" and enduro_cfg.gymnasium_env_id == "ALE/Enduro-v5"
    spec = game.env.spec.kwargs
    assert (spec["frameskip"], spec["repeat_action_probability"], spec["max_num_frames_per_episode"]) == (4, 0.25, 108_000)
    assert enduro_cfg.ms_per_action == pytest.approx(4000 / 60)
    # the action set maps flag by flag onto Enduro's minimal set: FIRE accelerates, DOWN brakes
    meanings = game.env.unwrapped.get_action_meanings()
    assert len(meanings) == ACTIONS and sorted(game.env_actions) == list(range(ACTIONS))
    words = {"accelerate": "FIRE", "brake": "DOWN", "left": "LEFT", "right": "RIGHT"}
    for action, number in zip(enduro_cfg.inputs, game.env_actions, strict=True):
        assert meaning_words(meanings[number]) == {words[flag] for flag, pressed in action.items() if pressed}
    layout = game_backend("gymnasium").make_float_layout(enduro_cfg)
    assert layout.names() == list(gym_floats.SEGMENT_NAMES)  # the clock and the agent's own actions: nothing from memory
    assert layout.dim == 1 + 4 * enduro_cfg.n_prev_actions_in_inputs


def test_a_race_is_stacked_frames_the_games_reward_and_the_agents_own_actions(enduro_cfg):
    actions = [1, 1, 7, 8, 0, 4]
    policy = scripted_policy(actions)
    game = make_game_instance(enduro_cfg)  # its own: a new episode
    try:
        results, stats = game.rollout(policy, MapSpec("train", 1_000), game.zone_centers_for(MapSpec("train", 1_000)), lambda: None)
    finally:
        game.close()
    n = len(results["actions"])
    assert n == enduro_cfg.cutoff_rollout_if_race_not_finished_within_duration_ms // enduro_cfg.ms_per_action == 59
    layout = game_backend("gymnasium").make_float_layout(enduro_cfg)
    steps = validate_rollout(results, frame_shape(enduro_cfg), layout.dim, ACTIONS)  # a cut-off race: F = A
    assert steps.frames.shape == (n, 4, 84, 84) and "race_time" not in results and stats["end_reason"] == "cutoff"
    assert "meters_advanced_along_centerline" not in results and len(results[GAME_REWARD]) == n
    # an episode's first state is its first frame four times; each later state drops the oldest frame for the newest
    first = steps.frames[0]
    assert all(np.array_equal(first[0], first[k]) for k in range(4)) and first.std() > 0
    for k in range(1, n):
        np.testing.assert_array_equal(steps.frames[k][:3], steps.frames[k - 1][1:])
    assert not np.array_equal(steps.frames[-1][3], steps.frames[0][3])  # the picture moved
    # the floats: the clock at 0, then the flags of the last actions, none before the first
    n_prev = enduro_cfg.n_prev_actions_in_inputs
    for k, (frame, state_float) in enumerate(policy.seen):
        np.testing.assert_array_equal(frame, steps.frames[k])
        expected = [0.0] * (4 * max(0, n_prev - k))
        for past in range(max(0, k - n_prev), k):
            expected += [float(enduro_cfg.inputs[actions[past % len(actions)]][f]) for f in gym_floats.ACTION_FLAGS]
        np.testing.assert_array_equal(state_float, [0.0, *expected])
    assert stats["native_score"] == sum(results[GAME_REWARD]) and "episode_return" not in stats


def test_an_episode_goes_on_over_races_until_the_game_ends_it(enduro_cfg):
    """Training rules: a race cut off at its duration hands its episode on; the next race starts where it stopped, from
    the same emulator, whatever map it was given; the episode's return comes with the race it ended in."""
    game = make_game_instance(enduro_cfg)
    try:
        policy = scripted_policy([0])  # no gas: Enduro's first day ends with the quota unmet, and the game with it
        races = []
        for k in range(80):  # the first day lasts ~3,300 actions: ~56 races of 59
            results, stats = game.rollout(policy, MapSpec("train", 1_000 + k), np.zeros((0, 0)), lambda: None)
            races.append((results, stats))
            if stats["end_reason"] != "cutoff":
                break
        *going, (last, last_stats) = races
        assert len(going) >= 10 and last_stats["end_reason"] == "terminated"
        assert all(stats["episode_seed"] == 1_000 and "episode_return" not in stats for _, stats in going)
        assert last_stats["episode_seed"] == 1_000 and last_stats["episode_actions"] == sum(len(r["actions"]) for r, _ in races)
        assert last_stats["episode_return"] == sum(s["native_score"] for _, s in races)
        for (before, _), (after, _) in zip(races, races[1:], strict=False):  # the next race's first state follows on
            np.testing.assert_array_equal(after["frames"][0][:3], before["frames"][-1][1:])
        # terminated: the last state is terminal (F = A + 1, race_time set) and bootstraps nothing
        assert len(last["frames"]) == len(last["actions"]) + 1
        assert last["race_time"] == round(len(last["actions"]) * enduro_cfg.ms_per_action)
        experience = rollout_to_experience(last, enduro_cfg, game.float_layout, 0.99)
        assert experience.terminal_actions[-1] == 1 and np.isfinite(experience.terminal_actions).all()
        # the next race starts a new episode on its own map
        _, stats = game.rollout(policy, MapSpec("train", 7), np.zeros((0, 0)), lambda: None)
        assert stats["episode_seed"] == 7 and stats["end_reason"] == "cutoff"
        # an evaluation race (it fills no buffer) plays its own map's episode, and leaves none to go on with
        evaluation = MapSpec("eval", 8, is_explo=False, fill_buffer=False)
        first, stats = game.rollout(policy, evaluation, np.zeros((0, 0)), lambda: None)
        assert stats["episode_seed"] == 8 and stats["end_reason"] == "cutoff"
        assert all(np.array_equal(first["frames"][0][0], first["frames"][0][k]) for k in range(4))  # an episode's start
        again, stats = game.rollout(policy, evaluation, np.zeros((0, 0)), lambda: None)
        assert stats["episode_seed"] == 8 and np.array_equal(again["frames"][5], first["frames"][5])  # the same start again
        _, stats = game.rollout(policy, MapSpec("train", 9), np.zeros((0, 0)), lambda: None)
        assert stats["episode_seed"] == 9  # the training episode of seed 7 was left when the evaluation reset the game
    finally:
        game.close()


def test_native_rules_play_one_whole_episode_and_a_seed_replays_it(enduro_cfg):
    game = make_game_instance(enduro_cfg, rules=RULES_NATIVE)
    try:
        scores = []
        for _ in range(2):
            results, stats = game.rollout(scripted_policy([1, 7, 1, 8]), MapSpec("eval", 500_000), np.zeros((0, 0)), lambda: None)
            scores.append((stats["episode_return"], len(results["actions"]), stats["end_reason"], results[GAME_REWARD]))
        (score, n_actions, end, rewards), again = scores
        assert (score, n_actions, end) == again[:3] and rewards == again[3]  # sticky actions are seeded by the map
        assert end == "terminated" and n_actions > 3_000 and score == sum(rewards) == stats["native_score"]
        assert score > 0  # gas passes cars: the game's own points
    finally:
        game.close()


def test_the_games_reward_is_clipped_and_scaled_as_configured(enduro_cfg, game):
    results, _ = game.rollout(scripted_policy([1]), MapSpec("train", 2_000), np.zeros((0, 0)), lambda: None)
    rewards = np.asarray(results[GAME_REWARD][:-1])  # the last action of a cut-off race leads to no stored state
    layout = game.float_layout
    results[GAME_REWARD] = [5.0, -3.0, *results[GAME_REWARD][2:]]  # a game whose points come in larger steps
    rewards[:2] = [5.0, -3.0]
    for clip, scale in ((1.0, 1.0), (None, 0.5), (2.0, 3.0)):
        cfg = enduro_cfg.replace(game_reward_clip=clip, reward_per_game_point=scale, n_steps=1)
        experience = rollout_to_experience(results, cfg, layout, 1.0)
        expected = scale * (rewards if clip is None else np.clip(rewards, -clip, clip))
        np.testing.assert_allclose(experience.rewards[:, 0], expected, rtol=1e-6)
    without = {k: v for k, v in results.items() if k != GAME_REWARD}
    with pytest.raises(InvalidRollout, match="lacks `game_reward`, which reward_per_game_point needs"):
        require_reward_keys(without, enduro_cfg)
    with pytest.raises(InvalidRollout, match="lacks `meters_advanced_along_centerline`"):
        require_reward_keys(results, enduro_cfg.replace(reward_per_m_advanced_along_centerline=0.1))


def _config_with(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "config.py"
    path.write_text(f"base = {str(ENDURO_CONFIG)!r}\n" + extra + "\n")  # enduro.py with these settings changed
    return path


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('gymnasium_env_id = "ALE/NoSuchGame-v5"', "setting `gymnasium_env_id` = 'ALE/NoSuchGame-v5'"),
        ('gymnasium_env_id = "CartPole-v1"', "not a uint8 image"),
        ('action_set = ["accelerate", "accelerate+brake"]', "action 'accelerate+brake' is DOWN+FIRE"),
        ("gymnasium_actions = [0, 1, 2, 3, 4, 5, 6, 7, 9]", "setting `gymnasium_actions` holds 9"),
        ("frame_crop = (100, 110, 0, 0)", "setting `frame_crop` = (100, 110, 0, 0) leaves nothing"),
        ('gymnasium_env_kwargs = {"no_such_option": 1}', "setting `gymnasium_env_kwargs` = {'no_such_option': 1} for 'ALE/Enduro-v5'"),
        ('frame_colour = True\ngymnasium_env_kwargs = {"obs_type": "grayscale"}', "setting `frame_colour` = True: ALE/Enduro-v5's"),
    ],
)
def test_a_setting_the_game_cannot_work_with_is_refused_at_start(tmp_path, extra, message):
    cfg = load_config(_config_with(tmp_path, extra))
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        game_backend("gymnasium").check_config(cfg)


def test_train_py_refuses_a_game_it_cannot_play_with_exit_2_and_stores_nothing(tmp_path):
    config = _config_with(tmp_path, 'action_set = ["coast", "accelerate+brake"]')
    save = tmp_path / "save"
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "train.py"), "--config", str(config), "--run-name", "refused"]
        + ["--save-dir", str(save), "--tensorboard-dir", str(tmp_path / "tb"), "--max-minutes", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "action 'accelerate+brake'" in proc.stderr and str(config) in proc.stderr
    assert not (save / "refused" / "checkpoints").exists()


def test_config_settings_are_checked_by_the_schema(tmp_path):
    for extra, message in (
        ('action_set = ["accelerate", "accelerate"]', "setting `action_set`"),
        ('action_set = ["accelerate+jump"]', "setting `action_set`"),
        ("frame_stack = 0", "setting `frame_stack`"),
        ("gymnasium_env_id = None", "setting `gymnasium_env_id` must name the env"),
        ("gymnasium_actions = [0, 1]", "setting `gymnasium_actions` has 2 entries for an action set of 9"),
        ('gymnasium_env_kwargs = {"frameskip": [4]}', "setting `gymnasium_env_kwargs`"),
    ):
        with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
            load_config(_config_with(tmp_path, extra))


def test_the_envs_own_options_reach_it(tmp_path):
    cfg = load_config(_config_with(tmp_path, 'gymnasium_env_kwargs = {"repeat_action_probability": 0.0}'))
    game = make_game_instance(cfg)
    try:
        assert game.env.spec.kwargs["repeat_action_probability"] == 0.0
    finally:
        game.close()
