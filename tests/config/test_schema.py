"""The settings table is the one place that says which settings need a restart; the docs follow it."""

import json
import re
from pathlib import Path

import pytest

from trackmania_rl.config.loader import CONFIG_DIR, load_config, read_python_file
from trackmania_rl.config.schema import ADDED_LATER, RESTART_ONLY, RETIRED, SETTINGS, ConfigError
from trackmania_rl.config.values import config_from_values

DOCS = Path(__file__).resolve().parents[2] / "docs" / "config.md"
MODELS = Path(__file__).resolve().parents[2] / "models"


def test_docs_mark_exactly_the_restart_only_settings():
    documented = {}
    lines = DOCS.read_text().splitlines()
    for i, first in enumerate(lines):
        names = re.findall(r"\*\*`(\w+)`\*\*", first.split(":")[0])
        if first.startswith("**`") and names:
            line = first + " " + lines[i + 1]  # an entry's head may wrap once
            restart = "**restart**" in line or "**new run**" in line
            assert restart or "**live**" in line, f"docs/config.md: {line[:60]}... says neither live nor restart"
            documented.update(dict.fromkeys(names, restart))
        row = [cell.strip() for cell in first.strip("|").split("|")]
        if first.startswith("| `") and len(row) >= 4 and row[3] in ("live", "restart", "new run"):  # the network's table
            documented.update(dict.fromkeys(re.findall(r"`(\w+)`", row[0]), row[3] != "live"))
    documented.pop("inputs", None)  # the action set: config_files/inputs_list.py, not a run setting
    assert set(documented) == set(SETTINGS), (
        f"documented but unknown: {set(documented) - set(SETTINGS)}, undocumented: {set(SETTINGS) - set(documented)}"
    )
    assert {name for name, restart in documented.items() if restart} == set(RESTART_ONLY)


def test_a_config_written_before_a_setting_existed_gets_its_value(tmp_path):
    current = read_python_file(CONFIG_DIR / "config.py")
    # config.py and the schema agree, except where the new default changes behaviour: an older file keeps its own
    changed = {
        "reward_per_new_road_tile": 0.1,
        "missed_road_tile_penalty": 2.0,
        "held_out_rules": "native",
        "frame_renderer": "fast",
        "held_out_seeds": range(100, 200),
        "best_tail_penalty": 10.0,
        "held_out_keep_weights": True,
    }
    assert {name: current[name] for name in ADDED_LATER} == {**ADDED_LATER, **changed}
    older = tmp_path / "older.py"
    lines = (CONFIG_DIR / "config.py").read_text().splitlines()
    older.write_text("\n".join(line for line in lines if not any(line.startswith(f"{name} =") for name in ADDED_LATER)) + "\n")
    assert not set(ADDED_LATER) & set(read_python_file(older))
    cfg = load_config(older, game_backend="carracing")
    assert {name: getattr(cfg, name) for name in ADDED_LATER} == ADDED_LATER


def test_a_retired_setting_is_dropped_at_its_last_value_and_refused_at_any_other(tmp_path):
    """An older config copy or a shipped model's settings may still hold a removed setting at the value that kept
    today's behaviour; any other value asked for a behaviour that is gone."""
    for name, (value, _) in RETIRED.items():
        assert name not in SETTINGS and name not in read_python_file(CONFIG_DIR / "config.py")
        older = tmp_path / f"older_{name}.py"
        older.write_text((CONFIG_DIR / "config.py").read_text() + f"{name} = {value!r}\n")
        assert not hasattr(load_config(older, game_backend="carracing"), name)
        older.write_text((CONFIG_DIR / "config.py").read_text() + f"{name} = {value + 1!r}\n")
        with pytest.raises(ConfigError, match=f"setting `{name}` was removed"):
            load_config(older, game_backend="carracing")
    # the model shipped until 2026-11-28: its settings were written while ray_games_per_actor existed
    values = json.loads((MODELS / "carracing_pygame_2026-11-26" / "settings.json").read_text())
    assert values["ray_games_per_actor"] == 1
    config_from_values(values, "carracing")
