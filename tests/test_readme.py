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


# ------------------------------------------------------------------------------------------------
# Each shipped model's test figure against the raw record its row links to
# ------------------------------------------------------------------------------------------------
TEST_FIGURE = re.compile(r"\*\*([\d.]+) / ([\d.]+) / ([\d.]+)\*\*, races below 800: (\d+) / (\d+) / (\d+)")
RECORD_LINK = re.compile(r"\[record\]\(([^)\s]+\.jsonl)\)")


def shipped_test_figures(readme: str) -> dict[str, tuple[list[float], list[int], str]]:
    """{model folder: (the means of its test hundreds, the races below 800 in each, the record's path)} from the shipped
    models' table: the row's test cell, then the first record link after it."""
    section = readme.split("### Shipped models", 1)[1].split("\n#", 1)[0]
    figures = {}
    for line in section.splitlines():
        folder = re.match(r"\|\s*`models/([^/`]+)/`", line)
        figure = TEST_FIGURE.search(line)
        if folder and figure:
            link = RECORD_LINK.search(line, figure.end())
            assert link, f"the test figure of models/{folder.group(1)}/ must link to its raw record ([record](docs/runs/...jsonl))"
            values = figure.groups()
            figures[folder.group(1)] = ([float(v) for v in values[:3]], [int(v) for v in values[3:]], link.group(1))
    return figures


def recomputed(record: Path, sets) -> tuple[list[float], list[int]]:
    """Each set's mean native score and races below 800, from the record's per-race lines (evaluate.py's output)."""
    races = {}
    for line in record.read_text().splitlines():
        entry = json.loads(line)
        if entry["kind"] == "race":
            races[entry["seed"]] = entry["native_score"]
    means, below = [], []
    for seeds in sets:
        assert all(seed in races for seed in seeds), f"{record} lacks races of the test set {seeds}"
        scores = [races[seed] for seed in seeds]
        means.append(sum(scores) / len(scores))
        below.append(sum(score < 800 for score in scores))
    return means, below


def check_test_figures(readme: str, sets, root: Path) -> dict:
    """AssertionError naming the first row whose test figure is not what its record gives; else the figures."""
    figures = shipped_test_figures(readme)
    for folder, (means, below, record) in figures.items():
        record_means, record_below = recomputed(root / record, sets)
        assert [round(m, 1) for m in record_means] == means, f"models/{folder}/: the README says {means}, {record} gives {record_means}"
        assert record_below == below, f"models/{folder}/: the README says {below} races below 800, {record} gives {record_below}"
    return figures


def test_each_shipped_models_test_figure_is_its_records():
    """Every CarRacing model's row gives its three test hundreds' means and races below 800, each as its raw record has
    them (recomputed from the record's race lines, rounded as printed)."""
    figures = check_test_figures((REPO_ROOT / "README.md").read_text(), default_config().test_seeds, REPO_ROOT)
    carracing = sorted(p.name for p in MODELS.iterdir() if p.name.startswith("carracing") and (p / "settings.json").is_file())
    assert sorted(figures) == carracing, "every CarRacing model's row gives its test figure"


def test_a_test_figure_not_in_its_record_is_refused(tmp_path):
    record = tmp_path / "record.jsonl"
    scores = {1: 900.0, 2: 901.0, 3: 700.0, 4: 950.0, 5: 910.0, 6: 910.0}
    record.write_text("".join(json.dumps({"kind": "race", "seed": seed, "native_score": score}) + "\n" for seed, score in scores.items()))
    sets = [[1, 2], [3, 4], [5, 6]]
    readme = f"### Shipped models\n\n| `models/x/` | **900.5 / 825.0 / 910.0**, races below 800: 0 / 1 / 0 ([record]({record.name})) |\n"
    assert check_test_figures(readme, sets, tmp_path) == {"x": ([900.5, 825.0, 910.0], [0, 1, 0], "record.jsonl")}
    with pytest.raises(AssertionError, match="the README says \\[900.5, 826.0, 910.0\\]"):
        check_test_figures(readme.replace("825.0", "826.0"), sets, tmp_path)
    with pytest.raises(AssertionError, match="races below 800"):
        check_test_figures(readme.replace("0 / 1 / 0", "0 / 0 / 0"), sets, tmp_path)
    with pytest.raises(AssertionError, match="lacks races of the test set"):
        check_test_figures(readme, [[1, 2], [3, 4], [7]], tmp_path)
    with pytest.raises(AssertionError, match="must link to its raw record"):
        shipped_test_figures(readme.replace(f"([record]({record.name}))", ""))
