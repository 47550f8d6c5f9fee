"""Config files that name a base (`base = "config.py"`, loader.py) and their whole copies (whole_copy.py)."""

import json
import re
from pathlib import Path

import pytest

from trackmania_rl.config.live import LiveConfig
from trackmania_rl.config.loader import CONFIG_DIR, REPO_ROOT, ConfigError, config_files, load_config, read_config_file, read_python_file
from trackmania_rl.config.schema import ADDED_LATER, RETIRED, SETTINGS
from trackmania_rl.config.values import read_settings
from trackmania_rl.config.whole_copy import whole_config_text

# What each shipped file sets over config_files/config.py: the values its whole copy (before issue 65) had where they
# differ from config.py's, and those it names for the game's sake. Frozen: a delta that loses or changes one fails.
# With config.py's other settings these are exactly the settings the whole copies resolved to (commit e54eebc), but
# the held-out selection and the validation and test sets of issue 64, which both files have taken since.
SHIPPED = {
    "carracing_pixels.py": {
        "H_downsized": 48,
        "W_downsized": 48,
        "frame_stack": 4,
        "float_inputs": "own_actions",
        "shaped_reward_dist_to_cur_vcp": 0.0,
        "keep_weights_at_minutes": [30, 60, 90, 120],
    },
    "enduro.py": {
        "game_backend": "gymnasium",
        "gymnasium_env_id": "ALE/Enduro-v5",
        "gymnasium_ms_per_step": 1000 * 4 / 60,
        "action_set": ["coast", "accelerate", "right", "left", "brake", "brake+right", "brake+left", "accelerate+right", "accelerate+left"],
        "gymnasium_action_words": ("FIRE", "DOWN", "LEFT", "RIGHT"),
        "frame_stack": 4,
        "frame_colour": False,
        "gymnasium_env_kwargs": None,
        "frame_crop": None,
        "reward_per_game_point": 1.0,
        "game_reward_clip": 1.0,
        "physics_steps_per_action": 1,
        "H_downsized": 84,
        "W_downsized": 84,
        "cutoff_rollout_if_race_not_finished_within_duration_ms": 60_000,
        "constant_reward_per_ms": 0.0,
        "reward_per_m_advanced_along_centerline": 0.0,
        "shaped_reward_dist_to_cur_vcp": 0.0,
        "reward_per_new_road_tile": 0.0,
        "missed_road_tile_penalty": 0.0,
        "temporal_mini_race_duration_ms": 8_000,
        "memory_size_schedule": [(0, (200_000, 5_000))],
        "number_times_single_memory_is_used_before_discard": 4,
        "conv_layers": [(32, 8, 4), (64, 4, 2), (64, 3, 1)],
        "batch_size": 32,
        "map_cycle": [("train", range(1_000, 50_000), True, True)],
        "held_out_seeds": range(100, 103),
        "held_out_eval_period_s": 900,
        "tail_score_bar": None,
        "best_tail_penalty": 0.0,
        "validation_seeds": [range(500_000, 500_010)],
        "test_seeds": [range(600_000, 600_030)],
    },
}


def _strict(values: dict) -> dict:
    """Values compared by repr and type: 1, 1.0 and True differ, and so do a list and a tuple."""
    return {name: (type(value).__name__, repr(value)) for name, value in values.items()}


def _copy_of_config(folder: Path, name: str = "config.py", **replace: str) -> Path:
    """config_files/config.py's text in `folder`, with some of its lines replaced (old line -> new line)."""
    text = (CONFIG_DIR / "config.py").read_text()
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    path = folder / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_a_shipped_file_resolves_to_config_py_with_its_own_values(name):
    path = CONFIG_DIR / name
    assert config_files(path) == [path.parent / "config.py", path]  # it names only what differs
    own = {k: v for k, v in read_python_file(path).items() if k != "base"}
    assert _strict(own) == _strict(SHIPPED[name])  # the file sets exactly these, with these values
    base = load_config(CONFIG_DIR / "config.py", game_backend="carracing")
    expected = base.replace(**SHIPPED[name])
    assert _strict(vars(load_config(path, game_backend="carracing"))) == _strict(vars(expected))


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_the_whole_copy_of_a_shipped_file_is_a_live_config_of_every_setting(tmp_path, name):
    path = CONFIG_DIR / name
    text = whole_config_text(path)
    live_path = tmp_path / "config_live.py"
    live_path.write_text(text)
    live = LiveConfig(live_path, log=lambda m: pytest.fail(m))
    assert _strict(vars(live.current)) == _strict(vars(load_config(path, game_backend="carracing")))
    assert not re.search(r"^base\b", text, re.M)
    for setting in read_config_file(path):  # each setting in force is a line of the copy, the user can edit it
        assert len(re.findall(rf"^{setting} = ", text, re.M)) == 1, setting
    own = path.read_text()
    assert own.split('"""')[1] in text  # its docstring, and each of its setting lines with its comment
    for line in own.splitlines():
        if re.match(r"\w+ = ", line) and not line.startswith("base = "):
            assert line in text.splitlines() or f"{line}  #" in text, line  # a bare line may take the base's comment
    base = (CONFIG_DIR / "config.py").read_text()
    assert "# Map cycle: (name, seed or range of seeds, is_explo, fill_buffer)" in base  # the base's comments are kept
    assert "# Map cycle: (name, seed or range of seeds, is_explo, fill_buffer)" in text
    assert f"Written whole from config_files/{name} over config_files/config.py" in text


def test_a_base_is_relative_to_its_file_and_each_file_sets_only_what_differs(tmp_path):
    _copy_of_config(tmp_path)
    (tmp_path / "games").mkdir()
    middle = tmp_path / "games" / "middle.py"
    middle.write_text(
        '"""A middle file."""\n\nbase = "../config.py"\n\n'
        "# the middle's reason\n"
        "batch_size = 64\n"
        "n_steps = 5  # [restart] longer returns\n"
        "iqn_n = 16\n"
        "_frames = 3\n"
        "frame_stack = _frames  # written as its value: `_frames` is the middle's own helper\n"
    )
    top = tmp_path / "top.py"
    top.write_text('base = "games/middle.py"\nbatch_size = 256  # the top wins\ngame_backend = "carracing"\n')
    assert config_files(top) == [tmp_path / "games" / "../config.py", middle, top]
    cfg = load_config(top, game_backend="trackmania")
    assert (cfg.batch_size, cfg.n_steps, cfg.iqn_n, cfg.frame_stack, cfg.game_backend) == (256, 5, 16, 3, "carracing")
    default = load_config(CONFIG_DIR / "config.py", game_backend="carracing")
    assert cfg.lr_schedule == default.lr_schedule and cfg.map_cycle == default.map_cycle

    text = whole_config_text(top)
    copy = tmp_path / "copy.py"
    copy.write_text(text)
    assert _strict(vars(load_config(copy, bases=False, game_backend="trackmania"))) == _strict(vars(cfg))
    lines = text.splitlines()
    assert '"""A middle file."""' in text and "base" not in re.findall(r"^(\w+) =", text, re.M)  # the nearest docstring
    assert "batch_size = 256  # the top wins" in lines
    assert "n_steps = 5  # [restart] longer returns" in lines
    assert "iqn_n = 16  # quantiles per sample when training (even)" in lines  # a bare line keeps the base's comment
    assert "frame_stack = 3  # written as its value: `_frames` is the middle's own helper" in lines
    assert lines.index("# the middle's reason") == lines.index("batch_size = 256  # the top wins") - 1
    assert lines.index('game_backend = "carracing"') < lines.index("physics_steps_per_action = 4")  # not in the base: on top
    assert f"# Written whole from {top.resolve()} over {middle.resolve()} over {(tmp_path / 'config.py').resolve()}." in lines


def test_a_base_statement_that_reads_a_replaced_setting_is_written_as_its_value(tmp_path):
    # each file runs in its own namespace: W_downsized is the base's 64 whatever the delta sets H_downsized to
    _copy_of_config(tmp_path, **{"W_downsized = 64": "W_downsized = H_downsized"})
    delta = tmp_path / "delta.py"
    delta.write_text('base = "config.py"\nH_downsized = 48\n')
    cfg = load_config(delta, game_backend="carracing")
    assert (cfg.H_downsized, cfg.W_downsized) == (48, 64)
    text = whole_config_text(delta)
    assert "W_downsized = 64" in text.splitlines() and "H_downsized = 48" in text.splitlines()


def test_a_setting_the_base_sets_twice_is_set_again_at_the_end(tmp_path):
    _copy_of_config(tmp_path, **{"batch_size = 128  # [restart]": "batch_size = 128  # [restart]\nbatch_size = 96"})
    delta = tmp_path / "delta.py"
    delta.write_text('base = "config.py"\nbatch_size = 48  # the delta\n')
    text = whole_config_text(delta)
    assert text.splitlines()[-1] == "batch_size = 48  # the delta"
    copy = tmp_path / "copy.py"
    copy.write_text(text)
    assert load_config(copy, bases=False, game_backend="carracing").batch_size == 48


def test_a_file_without_a_base_is_copied_as_it_is(tmp_path):
    path = _copy_of_config(tmp_path)
    assert whole_config_text(path) == path.read_text()
    assert whole_config_text(CONFIG_DIR / "config.py") == (CONFIG_DIR / "config.py").read_text()


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"a.py": 'base = "missing.py"\n'}, r"a\.py: its base \S*missing\.py does not exist"),
        ({"a.py": 'base = "a.py"\n'}, r"a\.py: its bases form a cycle: \S*a\.py -> \S*a\.py"),
        (
            {"a.py": 'base = "b.py"\n', "b.py": 'base = "c.py"\n', "c.py": 'base = "a.py"\n'},
            r"cycle: \S*a\.py -> \S*b\.py -> \S*c\.py -> \S*a\.py",
        ),
        ({"a.py": "base = 3\n"}, r'a\.py, line 1: `base` names the file .* as base = "config.py" \(a file name in quotes\)'),
        ({"a.py": 'base = "config.py"\nbase = "config.py"\n'}, r"a\.py, line 1: `base` names the file this one starts from: set it once"),
        ({"a.py": 'base = "config.py"\nfor base in ["other.py"]:\n    pass\n'}, r"a\.py: `base` names the file this one starts from"),
        ({"a.py": 'base = "config.py"\nbatch_size = (\n'}, r"a\.py does not parse: line 2"),
    ],
)
def test_missing_bases_cycles_and_other_declarations_are_refused_naming_the_file(tmp_path, files, message):
    _copy_of_config(tmp_path)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(tmp_path / "a.py", game_backend="carracing")
    with pytest.raises(ConfigError, match=message):
        whole_config_text(tmp_path / "a.py")


def test_an_invalid_value_names_the_file_and_its_bases(tmp_path):
    base = _copy_of_config(tmp_path, **{"batch_size = 128  # [restart]": "batch_size = 0"})
    delta = tmp_path / "delta.py"
    delta.write_text('base = "config.py"\niqn_n = 16\n')
    with pytest.raises(ConfigError, match=rf"delta\.py \(over {re.escape(str(base))}\): setting `batch_size` = 0 is invalid"):
        load_config(delta, game_backend="carracing")


def test_a_live_config_never_names_a_base(tmp_path):
    _copy_of_config(tmp_path)
    delta = tmp_path / "delta.py"
    delta.write_text('base = "config.py"\nbatch_size = 64\n')
    with pytest.raises(ConfigError, match=r"`base` is not allowed in a run's live config"):
        LiveConfig(delta)
    live_path = tmp_path / "config_live.py"
    live_path.write_text(whole_config_text(delta))
    messages = []
    live = LiveConfig(live_path, log=messages.append)
    live_path.write_text('base = "config.py"\nbatch_size = 64\ntau_epsilon_boltzmann = 0.5\n')  # an edit that names one
    assert not live.reload() and live.current.tau_epsilon_boltzmann == 0.01
    assert any("refused" in m and "`base` is not allowed" in m for m in messages), messages


def test_base_is_never_a_setting():
    assert "base" not in SETTINGS and "base" not in ADDED_LATER and "base" not in RETIRED


@pytest.mark.parametrize("path", sorted((REPO_ROOT / "docs" / "runs").rglob("config_live.py")), ids=str)
def test_recorded_runs_live_configs_still_load(path):
    LiveConfig(path, game_backend="carracing", log=lambda m: pytest.fail(m))


@pytest.mark.parametrize("path", sorted((REPO_ROOT / "models").glob("*/settings.json")), ids=lambda p: p.parent.name)
def test_shipped_models_settings_still_load(path):
    assert read_settings(path).settings().keys() == SETTINGS.keys()
    assert json.loads(path.read_text())  # data, nothing executed
