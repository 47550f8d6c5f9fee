"""Greedy evaluation (trackmania_rl/evaluation/evaluate.py, rollouts/greedy.py, scripts/evaluate.py) and race videos
(scripts/watch.py),
on the real game with a real (tiny, untrained) network whose weights are saved to a temporary run folder.
The scripts run as subprocesses, as a user would run them."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from trackmania_rl.agents.iqn import make_network, save_network
from trackmania_rl.config.loader import default_config
from trackmania_rl.config.values import settings_json
from trackmania_rl.evaluation import evaluate as evaluation
from trackmania_rl.evaluation import video as race_video
from trackmania_rl.games import float_layout_for
from trackmania_rl.learner.checkpoint import CHECKPOINT, CHECKPOINTS, COMPLETE_MARKER, CONFIG_COPY, SETTINGS, WEIGHTS_ONLINE
from trackmania_rl.rollouts import greedy

REPO_ROOT = Path(__file__).resolve().parents[2]
EVALUATE = REPO_ROOT / "scripts" / "evaluate.py"
WATCH = REPO_ROOT / "scripts" / "watch.py"
SEEDS = "0-2,5"
SEED_LIST = [0, 1, 2, 5]
RACE_KEYS = {
    "kind",
    "seed",
    "rules",
    "finished",
    "race_time_s",
    "native_score",
    "progress_fraction",
    "tile_coverage",
    "every_tile",
    "lap_time_s",
    "end_reason",
    "n_actions",
    "game_time_s",
}
SUMMARY_KEYS = {
    "kind",
    "rules",
    "races",
    "finished",
    "finished_fraction",
    "mean_native_score",
    "std_native_score",
    "mean_tile_coverage",
    "every_tile_fraction",
    "mean_lap_time_s",
    "laps",
    "mean_race_time_s",
    "mean_progress_fraction",
    "seeds",
}
# small network; under the training rules, races of at most 2.5 s of game time (the no-progress cutoff usually ends
# them sooner)
TINY = dict(
    conv_layers=[(4, 8, 4), (8, 4, 2)],
    float_hidden_dim=16,
    dense_hidden_dimension=16,
    iqn_embedding_dimension=8,
    iqn_k=4,
    iqn_n=4,
    use_jit=False,
    cutoff_rollout_if_race_not_finished_within_duration_ms=2_500,
)


def write_config(cfg, path: Path) -> None:
    """A config file with the settings of `cfg` (all reprs of plain values and ranges)."""
    path.write_text("".join(f"{name} = {value!r}\n" for name, value in cfg.settings().items()))


def save_random_weights(cfg, path: Path, seed: int) -> None:
    torch.manual_seed(seed)
    save_network(make_network(cfg, float_layout_for(cfg), len(cfg.inputs)), path)


def run_script(script: Path, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *map(str, args)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)


def json_lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def tiny_cfg():
    return default_config(**TINY)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_cfg):
    """save/<run>-like folder: checkpoints/000001/ with weights_online.torch, settings.json and the COMPLETE marker."""
    run = tmp_path_factory.mktemp("evaluation") / "tiny_run"
    folder = run / CHECKPOINTS / "000001"
    folder.mkdir(parents=True)
    save_random_weights(tiny_cfg, folder / WEIGHTS_ONLINE, seed=0)
    (folder / SETTINGS).write_text(settings_json(tiny_cfg))
    (folder / COMPLETE_MARKER).write_text("ok\n")
    return run


@pytest.fixture(scope="module")
def weights(run_dir):
    return run_dir / CHECKPOINTS / "000001" / WEIGHTS_ONLINE


@pytest.fixture(scope="module")
def evaluated(weights):
    """scripts/evaluate.py --weights on SEEDS by the training rules: (completed process, JSON objects)."""
    result = run_script(EVALUATE, "--weights", weights, "--seeds", SEEDS, "--rules", "training")
    assert result.returncode == 0, result.stderr
    return result, json_lines(result.stdout)


# ------------------------------------------------------------------------------------------------
# Seeds and summaries (no game)
# ------------------------------------------------------------------------------------------------
def test_parse_seeds_reads_ranges_and_lists():
    assert evaluation.parse_seeds("0-9,20,30-31") == list(range(10)) + [20, 30, 31]
    assert evaluation.parse_seeds(" 7 ") == [7]
    assert evaluation.parse_seeds("4-4, 2") == [4, 2]  # order kept


@pytest.mark.parametrize(
    "text, named",
    [
        ("5-2", "5-2"),
        ("x", "'x'"),
        ("", "empty"),
        ("1,,2", "''"),
        ("-3", "'-3'"),
        ("1-", "'1-'"),
        ("1.5", "'1.5'"),
        ("0-2,2", "seed 2"),
        ("3-x", "'3-x'"),
    ],
)
def test_parse_seeds_rejects_malformed_lists(text, named):
    with pytest.raises(evaluation.EvaluationError) as error:
        evaluation.parse_seeds(text)
    assert named in str(error.value)


def test_summary_of_finished_and_unfinished_races():
    records = [
        {"seed": 0, "finished": True, "race_time_s": 30.0, "native_score": 900.0, "progress_fraction": 1.0},
        {"seed": 1, "finished": False, "race_time_s": None, "native_score": 100.0, "progress_fraction": 0.25},
        {"seed": 2, "finished": True, "race_time_s": 40.0, "native_score": 800.0, "progress_fraction": 1.0},
        {"seed": 3, "finished": False, "race_time_s": None, "native_score": -50.0, "progress_fraction": 0.05},
    ]
    summary = greedy.summarise(records)
    assert summary["every_tile_fraction"] is None and summary["mean_lap_time_s"] is None  # records of no tiles, no laps
    tiles = [True, False, False, False]
    laps = [30.0, None, 38.0, None]  # a lap is completed without every tile touched too
    with_tiles = greedy.summarise([{**r, "every_tile": t, "lap_time_s": lap} for r, t, lap in zip(records, tiles, laps, strict=True)])
    assert with_tiles["every_tile_fraction"] == 0.25 and with_tiles["mean_lap_time_s"] == 34.0 and with_tiles["laps"] == 2
    assert summary["races"] == 4 and summary["finished"] == 2 and summary["rules"] is None
    assert summary["finished_fraction"] == 0.5
    assert summary["mean_native_score"] == pytest.approx(437.5)
    assert summary["mean_race_time_s"] == pytest.approx(35.0)  # finished races only
    assert summary["mean_progress_fraction"] == pytest.approx(0.575)
    assert greedy.summarise(records[1::2])["mean_race_time_s"] is None
    # the tail: the median, the worst race and, given a bar, the races below it (800 itself is not below)
    assert summary["median_native_score"] == pytest.approx(450.0) and summary["worst_native_score"] == -50.0
    assert summary["races_below_bar"] is None and summary["score_bar"] is None
    assert greedy.summarise(records, bar=800.0)["races_below_bar"] == 2
    assert greedy.summarise(records, bar=900.5)["races_below_bar"] == 4
    # the rules the races were played by are the summary's; races of different rules are not summed up together
    assert greedy.summarise([{**r, "rules": "native"} for r in records])["rules"] == "native"
    with pytest.raises(ValueError, match="different rules"):
        greedy.summarise([{**records[0], "rules": "native"}, {**records[1], "rules": "training"}])


# ------------------------------------------------------------------------------------------------
# scripts/evaluate.py
# ------------------------------------------------------------------------------------------------
def test_evaluate_prints_one_line_per_race_and_a_consistent_summary(evaluated, weights, tiny_cfg):
    result, objects = evaluated
    races, summary = objects[:-1], objects[-1]
    assert [r["kind"] for r in races] == ["race"] * len(SEED_LIST)
    assert [r["seed"] for r in races] == SEED_LIST
    for race in races:
        assert set(race) == RACE_KEYS
        assert isinstance(race["finished"], bool) and race["rules"] == "training"
        assert race["end_reason"] in ("finished", "left_playfield", "overall", "no_progress")
        assert (race["race_time_s"] is None) == (not race["finished"])
        assert 0.0 <= race["progress_fraction"] <= 1.0
        assert 0.0 < race["tile_coverage"] <= 1.0  # the start tile at least
        assert race["n_actions"] > 0
        assert race["game_time_s"] == pytest.approx(race["n_actions"] * tiny_cfg.ms_per_action / 1000, abs=0.1)
        # the overall cutoff of the config found beside the weights (2.5 s) was applied
        assert race["game_time_s"] <= 2.5 + tiny_cfg.ms_per_action / 1000
    assert summary["kind"] == "summary" and summary["rules"] == "training"
    assert SUMMARY_KEYS <= set(summary)
    assert summary["races"] == len(races) == len(SEED_LIST)
    assert summary["seeds"] == SEED_LIST
    assert summary["finished"] == sum(r["finished"] for r in races)
    assert summary["finished_fraction"] == pytest.approx(np.mean([r["finished"] for r in races]))
    assert summary["mean_native_score"] == pytest.approx(np.mean([r["native_score"] for r in races]))
    assert summary["std_native_score"] == pytest.approx(np.std([r["native_score"] for r in races]))
    assert summary["mean_tile_coverage"] == pytest.approx(np.mean([r["tile_coverage"] for r in races]))
    assert summary["mean_progress_fraction"] == pytest.approx(np.mean([r["progress_fraction"] for r in races]))
    finished_times = [r["race_time_s"] for r in races if r["finished"]]
    assert summary["mean_race_time_s"] == (pytest.approx(np.mean(finished_times)) if finished_times else None)
    # the config used is the settings.json beside the weights
    assert Path(summary["config"]) == weights.parent / SETTINGS
    assert summary["max_race_seconds"] == 2.5
    assert SETTINGS in result.stderr


def test_seeds_test_plays_each_of_the_configs_test_sets_and_sums_each_up(weights, tiny_cfg, tmp_path):
    """--seeds test: the config's test sets, one set_summary each (its own races), then the summary of all; --seeds
    validation the validation sets."""
    sets = dict(test_seeds=[range(600_000, 600_002), [700_005]], validation_seeds=[[500_003]], tail_score_bar=-1e9)
    config = tmp_path / "settings.json"
    config.write_text(settings_json(tiny_cfg.replace(**sets)))
    result = run_script(EVALUATE, "--weights", weights, "--config", config, "--seeds", "test", "--rules", "training", "--workers", 2)
    assert result.returncode == 0, result.stderr
    objects = json_lines(result.stdout)
    races = {o["seed"]: o for o in objects if o["kind"] == "race"}
    set_summaries = [o for o in objects if o["kind"] == "set_summary"]
    assert sorted(races) == [600_000, 600_001, 700_005]
    assert [(o["set"], o["role"], o["seeds"]) for o in set_summaries] == [
        ("600000-600001", "test", [600_000, 600_001]),
        ("700005", "test", [700_005]),
    ]
    first = set_summaries[0]
    assert first["mean_native_score"] == pytest.approx(np.mean([races[s]["native_score"] for s in (600_000, 600_001)]))
    assert first["worst_native_score"] == min(races[s]["native_score"] for s in (600_000, 600_001))
    assert first["races_below_bar"] == 0 and first["score_bar"] == -1e9  # every race is above a bar that low
    summary = objects[-1]
    assert summary["kind"] == "summary" and summary["races"] == 3 and summary["sets"] == ["600000-600001", "700005"]
    validation = run_script(EVALUATE, "--weights", weights, "--config", config, "--seeds", "validation", "--rules", "training")
    assert [o["seed"] for o in json_lines(validation.stdout) if o["kind"] == "race"] == [500_003]


def test_the_validation_and_test_sets_of_a_config_name_their_seeds(tiny_cfg):
    assert evaluation.seed_sets("test", tiny_cfg) == [
        ("600000-600099", list(range(600_000, 600_100))),
        ("700000-700099", list(range(700_000, 700_100))),
        ("800000-800099", list(range(800_000, 800_100))),
    ]
    validation = evaluation.seed_sets("validation", tiny_cfg)
    assert [name for name, _ in validation] == [f"{start}-{start + 99}" for start in (500_000, 200_000, 300_000, 400_000, 900_000)]
    assert all(seeds == list(range(seeds[0], seeds[0] + 100)) for _, seeds in validation)
    assert evaluation.seed_sets("3,5-6", tiny_cfg) == [("3,5-6", [3, 5, 6])]
    assert evaluation.set_name([4, 9, 10]) == "4,9,10"


def test_greedy_evaluation_is_deterministic(evaluated, run_dir):
    _, objects = evaluated
    first = objects[:-1]
    # the same seeds again, in another process, through the run folder
    again = run_script(EVALUATE, "--run", run_dir, "--seeds", SEEDS, "--rules", "training")
    assert again.returncode == 0, again.stderr
    assert json_lines(again.stdout)[:-1] == first
    # and in this process, through the library the scripts use
    policy = evaluation.open_policy(run=run_dir)
    assert not policy.network.training and not policy.inferer.is_explo
    game = evaluation.make_eval_game(policy, "training")
    try:
        assert list(greedy.evaluate_seeds(game, policy, SEED_LIST)) == first
    finally:
        game.close()


def test_races_played_by_worker_processes_are_the_same_races(evaluated, weights):
    """--workers 2: each race in a process of its own, the records the same as one after the other (printed as they
    end), the summary over the seeds in order."""
    _, objects = evaluated
    result = run_script(EVALUATE, "--weights", weights, "--seeds", SEEDS, "--rules", "training", "--workers", "2")
    assert result.returncode == 0, result.stderr
    *races, summary = json_lines(result.stdout)
    assert sorted(races, key=lambda race: race["seed"]) == objects[:-1]
    assert summary == objects[-1]
    refused = run_script(EVALUATE, "--weights", weights, "--seeds", SEEDS, "--workers", "0")
    assert refused.returncode == 2 and "--workers" in refused.stderr


def test_the_native_rules_are_the_default_and_ignore_the_cutoffs(weights):
    """Without --rules the races end by CarRacing-v3's own rules: not by the 2.5 s cut-off of the settings beside the
    weights, at the latest at the game's 20 s time limit; --max-race-seconds belongs to the training rules."""
    result = run_script(EVALUATE, "--weights", weights, "--seeds", "3")
    assert result.returncode == 0, result.stderr
    race, summary = json_lines(result.stdout)
    assert race["rules"] == summary["rules"] == "native" and summary["max_race_seconds"] is None
    assert race["end_reason"] in ("finished", "left_playfield", "time_limit")
    assert race["game_time_s"] <= 20.0 and (race["end_reason"] != "time_limit" or race["game_time_s"] == 20.0)
    assert race["game_time_s"] > 2.5 or race["end_reason"] != "time_limit"
    refused = run_script(EVALUATE, "--weights", weights, "--seeds", "3", "--max-race-seconds", "5")
    assert refused.returncode == 2 and "--rules training" in refused.stderr and refused.stdout == ""


def test_max_race_seconds_overrides_the_cutoff(weights):
    config = weights.parent / SETTINGS
    assert evaluation.load_eval_config(config).cutoff_rollout_if_race_not_finished_within_duration_ms == 2_500
    assert evaluation.load_eval_config(config, 0.5).cutoff_rollout_if_race_not_finished_within_duration_ms == 500
    for bad in (0, -3, float("nan"), 0.01):
        with pytest.raises(evaluation.EvaluationError, match="--max-race-seconds"):
            evaluation.load_eval_config(config, bad)


def test_checkpoint_resolution(run_dir, weights, tmp_path):
    config_copy = weights.parent / SETTINGS
    for source in ({"run": run_dir}, {"run": weights.parent}, {"weights": weights}):
        paths = evaluation.resolve_checkpoint(**source)
        assert (paths.weights, paths.config, paths.config_is_default) == (weights, config_copy, False)
    # weights without a config beside them: the repository's config, unless --config
    lone = tmp_path / "w.torch"
    lone.write_bytes(weights.read_bytes())
    assert evaluation.resolve_checkpoint(weights=lone).config == evaluation.DEFAULT_CONFIG
    assert evaluation.resolve_checkpoint(weights=lone, config=config_copy).config == config_copy
    for source, named in (
        ({"run": tmp_path / "none"}, "no such folder"),
        ({"run": tmp_path}, "no complete checkpoint"),
        ({"run": lone}, "not a folder"),
        ({"weights": run_dir}, "is a folder"),
        ({"weights": lone, "config": tmp_path / "none.py"}, "none.py: no such file"),
        ({}, "exactly one"),
    ):
        with pytest.raises(evaluation.EvaluationError, match=named):
            evaluation.resolve_checkpoint(**source)


def _checkpoint_folder(folder: Path, weights: Path, settings: str | None = None, complete: bool = True) -> Path:
    folder.mkdir(parents=True)
    (folder / WEIGHTS_ONLINE).write_bytes(weights.read_bytes())
    if settings is not None:
        (folder / SETTINGS).write_text(settings)
    if complete:
        (folder / COMPLETE_MARKER).write_text("ok\n")
    return folder


def test_run_resolution_takes_the_newest_complete_checkpoint_of_either_layout(weights, tiny_cfg, tmp_path):
    settings = settings_json(tiny_cfg)
    run = tmp_path / "run"
    _checkpoint_folder(run / CHECKPOINT, weights, settings)  # an older run's layout: the oldest candidate
    assert evaluation.resolve_checkpoint(run=run).weights == run / CHECKPOINT / WEIGHTS_ONLINE
    _checkpoint_folder(run / CHECKPOINTS / "000002", weights, settings)
    _checkpoint_folder(run / CHECKPOINTS / "000010", weights, settings)
    _checkpoint_folder(run / CHECKPOINTS / "000011", weights, settings, complete=False)  # no marker: skipped
    paths = evaluation.resolve_checkpoint(run=run)
    assert (paths.weights, paths.config) == (run / CHECKPOINTS / "000010" / WEIGHTS_ONLINE, run / CHECKPOINTS / "000010" / SETTINGS)
    best = _checkpoint_folder(run / "best", weights, settings)  # a model folder is given as itself
    assert evaluation.resolve_checkpoint(run=best).config == best / SETTINGS


def test_a_python_file_beside_weights_is_never_executed(weights, tiny_cfg, tmp_path):
    """An older run's (or a received model's) config_copy.py is refused with a way forward; only --config runs one."""
    marker = tmp_path / "executed"
    old_run = tmp_path / "old_run"
    folder = _checkpoint_folder(old_run / CHECKPOINT, weights)
    write_config(tiny_cfg, folder / CONFIG_COPY)
    with (folder / CONFIG_COPY).open("a") as f:
        f.write(f"open({str(marker)!r}, 'w').write('ran')\n")
    for source in ({"run": old_run}, {"run": folder}, {"weights": folder / WEIGHTS_ONLINE}):
        with pytest.raises(evaluation.EvaluationError) as error:
            evaluation.resolve_checkpoint(**source)
        message = str(error.value)
        assert "not executed" in message and f"--config {folder / CONFIG_COPY}" in message
    result = run_script(EVALUATE, "--run", old_run, "--seeds", "0")
    assert result.returncode == 2 and "not executed" in result.stderr and "Traceback" not in result.stderr
    assert not marker.exists()
    # asked for explicitly, it is the user's config: executed
    paths = evaluation.resolve_checkpoint(run=old_run, config=folder / CONFIG_COPY)
    assert evaluation.load_eval_config(paths.config).dense_hidden_dimension == tiny_cfg.dense_hidden_dimension
    assert marker.read_text() == "ran"


def test_bad_settings_json_is_named(weights, tiny_cfg, tmp_path):
    values = json.loads(settings_json(tiny_cfg))
    for name, content, named in (
        ("not_json.json", "{", "not valid JSON"),
        ("bad_value.json", json.dumps({**values, "n_steps": "three"}), "`n_steps`"),
        ("bad_range.json", json.dumps({**values, "map_cycle": [["train", {"range": [0]}, True, True]]}), "`map_cycle`"),
        ("missing.json", json.dumps({k: v for k, v in values.items() if k != "batch_size"}), "batch_size"),
    ):
        path = tmp_path / name
        path.write_text(content)
        with pytest.raises(evaluation.EvaluationError, match=named) as error:
            evaluation.load_eval_config(path)
        assert str(path) in str(error.value)


def test_the_shipped_model_folder_is_data():
    folder = REPO_ROOT / "models" / "carracing_default"
    assert not list(folder.glob("*.py"))
    paths = evaluation.resolve_checkpoint(weights=folder / "weights.torch")
    assert (paths.config, paths.config_is_default) == (folder / SETTINGS, False)
    cfg = evaluation.load_eval_config(paths.config)
    evaluation.load_policy(paths, cfg)  # the weights fit the settings


@pytest.fixture(scope="module")
def other_weights(tmp_path_factory, tiny_cfg):
    """Weights of a network with another conv head (no config beside them)."""
    path = tmp_path_factory.mktemp("other") / "weights.torch"
    save_random_weights(tiny_cfg.replace(conv_layers=[(2, 8, 4)]), path, seed=1)
    return path


@pytest.mark.parametrize(
    "case, args, named",
    [
        ("descending seed range", ["--weights", "{weights}", "--seeds", "5-2"], "5-2"),
        ("missing weights", ["--weights", "{tmp}/missing.torch", "--seeds", "0"], "missing.torch: no such file"),
        ("mismatched weights", ["--weights", "{other}", "--config", "{config}", "--seeds", "0"], "does not match"),
    ],
)
def test_evaluate_rejects_bad_arguments_with_exit_code_2(case, args, named, weights, other_weights, tmp_path):
    values = {"weights": weights, "tmp": tmp_path, "other": other_weights, "config": weights.parent / SETTINGS}
    result = run_script(EVALUATE, *[a.format(**values) for a in args])
    assert result.returncode == 2, (case, result.stdout, result.stderr)
    assert named in result.stderr, (case, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_mismatched_weights_name_the_entries(other_weights, weights):
    cfg = evaluation.load_eval_config(weights.parent / SETTINGS)
    paths = evaluation.CheckpointPaths(other_weights, weights.parent / SETTINGS, False)
    with pytest.raises(evaluation.EvaluationError) as error:
        evaluation.load_policy(paths, cfg)
    message = str(error.value)
    assert str(other_weights) in message and "img_head.0.weight (2, 1, 8, 8) vs (4, 1, 8, 8)" in message
    assert "missing entries: img_head.2.bias" in message


def test_weights_files_that_are_not_state_dicts_are_named(weights, tmp_path):
    cfg = evaluation.load_eval_config(weights.parent / SETTINGS)
    network = make_network(cfg, float_layout_for(cfg), len(cfg.inputs))
    garbage, listed = tmp_path / "garbage.torch", tmp_path / "list.torch"
    garbage.write_bytes(b"not a torch file")
    torch.save([torch.zeros(1)], listed)
    for path, fragment in (
        (tmp_path / "none.torch", "none.torch: no such file"),
        (garbage, "cannot be loaded as a state_dict: it is not a torch file, or it holds objects other than tensors (torch.load"),
        (listed, f"is not a state_dict (a dict of named tensors, as the learner saves {WEIGHTS_ONLINE})"),
    ):
        with pytest.raises(evaluation.EvaluationError) as error:
            evaluation.load_state_dict_checked(network, path)
        assert str(error.value).startswith(f"weights file {path}") and fragment in str(error.value)
        assert error.value.__cause__ is None and error.value.__suppress_context__


# ------------------------------------------------------------------------------------------------
# scripts/watch.py
# ------------------------------------------------------------------------------------------------
def test_watch_writes_a_gif_with_one_frame_per_decision(weights, tiny_cfg, tmp_path):
    import imageio.v3 as iio

    out = tmp_path / "race.gif"
    height = 96
    result = run_script(
        WATCH, "--weights", weights, "--seed", 1, "--out", out, "--height", height, "--rules", "training", "--max-race-seconds", 1.5
    )
    assert result.returncode == 0, result.stderr
    (record,) = json_lines(result.stdout)
    frames = iio.imread(out, index=None)  # (n, H, W, 3)
    layout = race_video.panel_layout(tiny_cfg, height)
    # side by side: 600x400 game view scaled to 96 high, the 64x64 network frame upscaled, the Q panel
    assert (layout.view_width, layout.network_width) == (144, 96)
    assert frames.shape == (record["n_actions"], height, layout.width, 3)
    assert record["frames"] == record["n_actions"] and record["width"] == layout.width == frames.shape[2]
    # the middle panel is the network's grey frame
    middle = frames[0, height // 2 :, layout.view_width : layout.view_width + layout.network_width].astype(int)
    assert np.abs(middle[..., 0] - middle[..., 1]).mean() < 4 and np.abs(middle[..., 1] - middle[..., 2]).mean() < 4
    # rendering the view for the video does not change the race
    policy = evaluation.open_policy(weights=weights, max_race_seconds=1.5)
    game = evaluation.make_eval_game(policy, "training")
    try:
        expected = greedy.play_race(game, policy, 1)
    finally:
        game.close()
    assert {k: record[k] for k in expected} == expected
    assert not list(tmp_path.glob(".race.partial*"))  # the temporary file was renamed


@pytest.mark.skipif(not race_video.mp4_available(), reason="MP4 needs imageio-ffmpeg")
def test_watch_writes_an_mp4(weights, tmp_path):
    import imageio.v2 as imageio

    out = tmp_path / "race.mp4"
    result = run_script(
        WATCH, "--run", weights.parent, "--seed", 2, "--out", out, "--height", 100, "--rules", "training", "--max-race-seconds", 1
    )
    assert result.returncode == 0, result.stderr
    (record,) = json_lines(result.stdout)
    reader = imageio.get_reader(out)
    try:
        assert reader.count_frames() == record["frames"] == record["n_actions"]
        assert tuple(reader.get_meta_data()["size"]) == (record["width"], record["height"]) == (record["width"], 100)
    finally:
        reader.close()


def test_video_output_checks(tmp_path):
    assert race_video.check_output_path(tmp_path / "a.gif") == tmp_path / "a.gif"
    for path, named in (
        (tmp_path / "race.avi", ".gif or .mp4"),
        (tmp_path / "race", "no extension"),
        (tmp_path / "nowhere" / "race.gif", "does not exist"),
    ):
        with pytest.raises(ValueError, match=named):
            race_video.check_output_path(path)


def test_watch_rejects_an_unknown_video_format(weights, tmp_path):
    result = run_script(WATCH, "--weights", weights, "--seed", 0, "--out", tmp_path / "race.avi")
    assert result.returncode == 2
    assert ".avi" in result.stderr and ".gif or .mp4" in result.stderr
    assert not (tmp_path / "race.avi").exists()


@pytest.mark.parametrize(
    "args, named",
    [
        (("--height", "15"), "--height"),
        (("--height", "2161"), "--height"),
        (("--fps", "nan"), "--fps"),
        (("--fps", "inf"), "--fps"),
        (("--fps", "0"), "--fps"),
        (("--fps", "241"), "--fps"),
        (("--max-race-seconds", "nan"), "--max-race-seconds"),
        (("--max-race-seconds", "inf"), "--max-race-seconds"),
        (("--max-race-seconds", "-1"), "--max-race-seconds"),
    ],
)
def test_watch_bounds_its_numbers_with_exit_code_2(args, named, weights, tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("watch_script", WATCH)
    watch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(watch)
    with pytest.raises(SystemExit) as exit_:
        watch.main(["--weights", str(weights), "--seed", "0", "--out", str(tmp_path / "race.gif"), *args])
    assert exit_.value.code == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "race.gif").exists()
