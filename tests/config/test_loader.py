import shutil

import pytest

from trackmania_rl.config.live import LiveConfig
from trackmania_rl.config.loader import CONFIG_DIR, ConfigError, load_config


def test_default_config_loads_with_derived_values(cfg):
    assert cfg.ms_per_action == cfg.physics_steps_per_action * 20
    assert cfg.temporal_mini_race_duration_actions == cfg.temporal_mini_race_duration_ms // cfg.ms_per_action
    assert len(cfg.inputs) == 12 and all(set(a) == {"accelerate", "brake", "left", "right"} for a in cfg.inputs)


@pytest.mark.parametrize(
    "setting, value, fragment",
    [
        ("batch_size", 0, "`batch_size`"),
        ("iqn_n", 7, "`iqn_n`"),
        ("gamma_schedule", [(10, 0.99)], "`gamma_schedule`"),
        ("lr_schedule", [(0, 1e-3), (10, 0.0)], "`lr_schedule`"),
        ("memory_size_schedule", [(0, (100, 10)), (5, (50, 10))], "`memory_size_schedule`"),
        ("map_cycle", [("a", -1, True, True)], "`map_cycle`"),
        ("n_steps", 1000, "`n_steps`"),
    ],
)
def test_invalid_settings_are_named(cfg, setting, value, fragment):
    with pytest.raises(ConfigError, match=fragment):
        cfg.replace(**{setting: value})


def test_unknown_setting_is_refused(cfg):
    with pytest.raises(ConfigError, match="batchsize"):
        cfg.replace(batchsize=3)


def test_file_that_does_not_parse_names_the_file_and_line(tmp_path):
    path = tmp_path / "config.py"
    path.write_text("batch_size = (\n")
    with pytest.raises(ConfigError, match=r"config.py does not parse: line"):
        load_config(path, game_backend="carracing")


def _write_edit(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_live_config_applies_valid_edits_refuses_invalid_and_holds_back_restart_settings(tmp_path):
    path = tmp_path / "config_copy.py"
    shutil.copy(CONFIG_DIR / "config.py", path)
    messages = []
    live = LiveConfig(path, log=messages.append)
    before = live.current

    _write_edit(path, "tau_epsilon_boltzmann = 0.01", "tau_epsilon_boltzmann = 0.02")
    assert live.reload()
    assert live.current.tau_epsilon_boltzmann == 0.02

    _write_edit(path, "tau_epsilon_boltzmann = 0.02", "tau_epsilon_boltzmann = 'x'")
    assert not live.reload()
    assert live.current.tau_epsilon_boltzmann == 0.02
    assert any("refused" in m and "tau_epsilon_boltzmann" in m for m in messages)

    _write_edit(path, "tau_epsilon_boltzmann = 'x'", "tau_epsilon_boltzmann = (")
    assert not live.reload()
    assert any("does not parse" in m for m in messages)

    _write_edit(path, "tau_epsilon_boltzmann = (", f"tau_epsilon_boltzmann = 0.03\nbatch_size = {before.batch_size * 2}")
    assert live.reload()
    assert live.current.tau_epsilon_boltzmann == 0.03
    assert live.current.batch_size == before.batch_size
    assert any("`batch_size`" in m and "needs a restart" in m for m in messages)


def test_ms_per_action_comes_from_the_backends_physics_step(cfg):
    from trackmania_rl.config.game_backends import MS_PER_PHYSICS_STEP
    from trackmania_rl.config.loader import build_config

    values = {name: value for name, value in cfg.settings().items() if name != "game_backend"}  # a file that names no game
    for backend, ms in (("carracing", 20), ("trackmania", 10)):
        assert MS_PER_PHYSICS_STEP[backend] == ms
        built = build_config(values, game_backend=backend, inputs=cfg.inputs_file())
        assert built.game_backend == backend and built.ms_per_action == values["physics_steps_per_action"] * ms
        # a file that names its game is built for it, whatever user_config says
        named = build_config({**values, "game_backend": "trackmania"}, game_backend=backend, inputs=cfg.inputs_file())
        assert named.game_backend == "trackmania" and named.ms_per_action == values["physics_steps_per_action"] * 10
    # a Gymnasium env's step takes the time the config says (ALE: 4 frames at 60 Hz)
    gym = build_config({**values, "game_backend": "gymnasium", "gymnasium_env_id": "ALE/Enduro-v5"}, inputs=cfg.inputs_file())
    assert gym.ms_per_action == pytest.approx(values["physics_steps_per_action"] * 4000 / 60)
    known = r"\['carracing', 'gymnasium', 'supertuxkart', 'trackmania'\]"
    with pytest.raises(ConfigError, match=rf"unknown game backend 'pong'; expected one of {known}"):
        build_config(values, game_backend="pong", inputs=cfg.inputs_file())


def test_live_config_starts_with_the_last_good_text_when_its_file_is_broken(tmp_path):
    from trackmania_rl.config.live import last_good_path_for

    path = tmp_path / "config_live.py"
    shutil.copy(CONFIG_DIR / "config.py", path)
    last_good = last_good_path_for(path)
    assert last_good.parent == tmp_path and last_good.name == ".config_live.last_good.py"
    with pytest.raises(ConfigError):  # no fallback asked: a broken file is refused as before
        path.write_text("batch_size = (\n")
        LiveConfig(path)
    shutil.copy(CONFIG_DIR / "config.py", path)
    first = LiveConfig(path, last_good_path=last_good)
    assert last_good.read_text() == path.read_text()  # kept when it loaded
    _write_edit(path, "tau_epsilon_boltzmann = 0.01", "tau_epsilon_boltzmann = 0.02")
    assert first.reload() and "tau_epsilon_boltzmann = 0.02" in last_good.read_text()  # and at each good reload

    _write_edit(path, "tau_epsilon_boltzmann = 0.02", "tau_epsilon_boltzmann = (")  # the user's broken edit
    assert not first.reload() and "tau_epsilon_boltzmann = 0.02" in last_good.read_text()  # a broken text is never kept
    messages = []
    restarted = LiveConfig(path, log=messages.append, last_good_path=last_good)  # a collector restarted now
    assert restarted.current.tau_epsilon_boltzmann == 0.02
    assert len(messages) == 1 and "does not parse" in messages[0] and str(last_good) in messages[0]
    assert not restarted.reload() and len(messages) == 1  # the same broken file is not reported again
    _write_edit(path, "tau_epsilon_boltzmann = (", "tau_epsilon_boltzmann = 0.03")  # fixed: applied as usual
    assert restarted.reload() and restarted.current.tau_epsilon_boltzmann == 0.03

    last_good.unlink()
    path.write_text("batch_size = (\n")
    with pytest.raises(ConfigError, match="does not parse"):  # no last good text: nothing to fall back on
        LiveConfig(path, last_good_path=last_good)


def test_a_live_config_whose_folder_is_replaced_by_a_file_keeps_the_previous_config(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    path = run / "config_live.py"
    shutil.copy(CONFIG_DIR / "config.py", path)
    messages = []
    live = LiveConfig(path, log=messages.append, last_good_path=run / ".config_live.last_good.py")
    before = live.current
    shutil.rmtree(run)
    run.write_text("a file where the run folder was")  # every path below it now fails with NotADirectoryError

    assert not live.reload() and live.current is before
    assert any("refused" in m for m in messages), messages
    assert not live.reload()  # and once more: still no crash, no new line
    assert len(messages) == 1
