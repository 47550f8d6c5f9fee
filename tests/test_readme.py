"""The README's table of shipped models against the model folders: each command names the seed its folder was
trained with, and every folder has its row (a reader reproducing a model starts from that command)."""

import json
import re
import shlex
from pathlib import Path

import pytest

from trackmania_rl.config.loader import default_config

REPO_ROOT = Path(__file__).resolve().parent.parent
MODELS = REPO_ROOT / "models"


def shipped_model_rows(readme: str) -> dict[str, str]:
    """{model folder name: its train.py command} from the table under the README's "### Shipped models"."""
    section = readme.split("### Shipped models", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        folder = re.match(r"\|\s*`models/([^/`]+)/`", line)
        if folder:
            commands = re.findall(r"`(python scripts/train\.py[^`]*)`", line)
            assert len(commands) == 1, f"the row of models/{folder.group(1)}/ must give one train.py command: {line}"
            rows[folder.group(1)] = commands[0]
    return rows


def seed_of(command: str) -> int:
    """The seed a train.py command runs with: its --seed, else the one of the config a new run starts from."""
    words = shlex.split(command)
    if "--seed" in words:
        return int(words[words.index("--seed") + 1])
    return default_config().seed


def test_each_shipped_models_command_names_the_seed_of_its_settings():
    rows = shipped_model_rows((REPO_ROOT / "README.md").read_text())
    folders = sorted(p.name for p in MODELS.iterdir() if (p / "settings.json").is_file())
    assert sorted(rows) == folders, "every model folder, and only those, has a row in the README's shipped models"
    for folder, command in rows.items():
        settings = json.loads((MODELS / folder / "settings.json").read_text())
        seed = settings["seed"]
        assert seed_of(command) == seed, f"README: models/{folder}/ by `{command}`, but its settings say seed {seed}"


@pytest.mark.parametrize(
    ("command", "seed"),
    [("python scripts/train.py --run-name a --seed 7", 7), ("python scripts/train.py --run-name a --fresh", default_config().seed)],
)
def test_a_commands_seed_is_its_flag_or_the_configs_default(command, seed):
    assert seed_of(command) == seed


def test_a_row_without_its_command_is_refused():
    readme = "### Shipped models\n\n| folder | command |\n| --- | --- |\n| `models/x/` | trained somehow |\n"
    with pytest.raises(AssertionError, match="must give one train.py command"):
        shipped_model_rows(readme)
