"""The settings table is the one place that says which settings need a restart; the docs follow it."""

import re
from pathlib import Path

from trackmania_rl.config.loader import CONFIG_DIR, load_config, read_python_file
from trackmania_rl.config.schema import ADDED_LATER, RESTART_ONLY, SETTINGS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "config.md"


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
    changed = {"reward_per_new_road_tile": 0.1}
    assert {name: current[name] for name in ADDED_LATER} == {**ADDED_LATER, **changed}
    older = tmp_path / "older.py"
    lines = (CONFIG_DIR / "config.py").read_text().splitlines()
    older.write_text("\n".join(line for line in lines if not any(line.startswith(f"{name} =") for name in ADDED_LATER)) + "\n")
    assert not set(ADDED_LATER) & set(read_python_file(older))
    cfg = load_config(older, game_backend="carracing")
    assert {name: getattr(cfg, name) for name in ADDED_LATER} == ADDED_LATER
