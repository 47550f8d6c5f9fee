"""Every command the README lists starts: each script in scripts/ answers --help (exit 0, its usage), so that a moved
function or a broken import shows here rather than in a user's shell."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
PYTHON_SCRIPTS = sorted(p.name for p in SCRIPTS.glob("*.py"))
SHELL_SCRIPTS = sorted(p.name for p in SCRIPTS.glob("*.sh"))


def test_the_scripts_are_all_here():
    assert {"train.py", "evaluate.py", "watch.py", "export.py", "benchmark.py", "play_remote.py", "soak.py"} <= set(PYTHON_SCRIPTS)
    assert {"gpu_box.sh", "evaluate_minutes.sh", "device_wheels.sh"} <= set(SHELL_SCRIPTS)


@pytest.mark.parametrize("script", PYTHON_SCRIPTS)
def test_a_python_script_answers_help(script):
    result = subprocess.run([sys.executable, str(SCRIPTS / script), "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage:") and script in result.stdout.splitlines()[0], result.stdout[:200]


@pytest.mark.parametrize("script", SHELL_SCRIPTS)
def test_a_shell_script_answers_help_and_runs_nothing(script, tmp_path):
    result = subprocess.run(["bash", str(SCRIPTS / script), "--help"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"bash scripts/{script}" in result.stdout  # its usage line
    assert list(tmp_path.iterdir()) == []  # it wrote nothing


def test_gpu_box_refuses_a_config_file_that_is_not_there(tmp_path):
    """CONFIG names the run's config file (Enduro's, say): a wrong path stops the script at once, saying which,
    before it installs, tests or trains anything, and writes nothing."""
    env = {**os.environ, "CONFIG": str(tmp_path / "enduro_typo.py"), "GPU_BOX_WORK": str(tmp_path / "work")}
    command = ["bash", str(SCRIPTS / "gpu_box.sh"), str(tmp_path / "out"), "1"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 2, result.stderr
    assert "enduro_typo.py" in result.stderr and "no such config file" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_device_wheels_are_the_versions_the_project_pins():
    """scripts/device_wheels.sh names its versions itself (the GPU box has no registry to resolve them): each package
    the project depends on that it carries is at a version pyproject.toml allows (Box2D: the one gymnasium's box2d
    extra pins), so that a moved pin cannot leave the box training on the old one."""
    import re
    import tomllib
    from importlib.metadata import requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    carried = {canonicalize_name(n): v for n, v in re.findall(r"([A-Za-z0-9_.-]+)==(\d[\w.]*)", (SCRIPTS / "device_wheels.sh").read_text())}
    assert {"torchrl", "tensordict", "gymnasium", "box2d", "pygame-ce", "ale-py"} <= set(carried), carried
    project = tomllib.loads((SCRIPTS.parent / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["atari"]]
    box2d = [Requirement(r) for r in requires("gymnasium") if r.startswith("box2d==")]
    checked = 0
    for requirement in wanted + box2d:
        version = carried.get(canonicalize_name(requirement.name))
        if version is not None:
            assert requirement.specifier.contains(version), (requirement, version)
            checked += 1
    assert checked == 6


def test_the_test_command_without_the_project_installed_says_to_install_it(tmp_path):
    """pytest run by a Python the project is not installed in (its virtual environment not activated, say): one line
    that names that Python and the README's install command, exit 4, not an internal error. The missing install is
    played by a `torch` that cannot be imported, first on the path."""
    (tmp_path / "torch.py").write_text("raise ImportError(\"No module named 'torch'\")\n")
    root = SCRIPTS.parent
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", str(root / "tests" / "test_scripts.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    output = result.stdout + result.stderr
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, output
    assert "INTERNALERROR" not in output and "not installed in the Python running the tests" in output
    assert sys.executable in output and "pip install -r requirements.txt" in output


def test_select_best_shows_what_each_rule_picks_from_a_runs_held_out_records(tmp_path):
    """scripts/select_best.py: the mean of the first 10 tracks (the rule before 2026-12-02) is blind to a crash in the
    11th; the mean of all with the tail penalty is not. Its picks name the kept weights' folders."""
    from trackmania_rl.learner.held_out import HELD_OUT_LOG

    run = tmp_path / "run"
    evaluations = {
        5.0: [930.0] * 10 + [300.0] + [930.0] * 9,  # the best first ten, a crash after them
        10.0: [925.0] * 20,
        15.0: [900.0] * 20,
    }
    lines = []
    for minute, scores in evaluations.items():
        folder = f"held-out/minute-{minute:05.1f}"
        (run / folder).mkdir(parents=True)
        mean = sum(scores) / len(scores)
        lines.append({"minute": minute, "mean_native_score": mean, "races": len(scores), "native_scores": scores, "weights_folder": folder})
    (run / HELD_OUT_LOG).write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = subprocess.run([sys.executable, str(SCRIPTS / "select_best.py"), str(run)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    picks = {o["rule"]: o for o in map(json.loads, result.stdout.splitlines()) if o["kind"] == "pick"}
    assert {rule: pick["minute"] for rule, pick in picks.items()} == {
        "mean of the first 10": 5.0,
        "mean of 20 - 0 per % below 800": 10.0,  # 898.5 against 925
        "mean of 20 - 10 per % below 800": 10.0,
    }
    assert picks["mean of the first 10"]["weights"] == str(run / "held-out" / "minute-005.0")
    assert picks["mean of 20 - 10 per % below 800"]["score"] == 925.0
    missing = subprocess.run(
        [sys.executable, str(SCRIPTS / "select_best.py"), str(tmp_path / "nothing")], capture_output=True, text=True, timeout=60
    )
    assert missing.returncode == 2 and "no such file" in missing.stderr
