"""Every command the README lists starts: each script in scripts/ answers --help (exit 0, its usage), so that a moved
function or a broken import shows here rather than in a user's shell."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
PYTHON_SCRIPTS = sorted(p.name for p in SCRIPTS.glob("*.py"))
SHELL_SCRIPTS = sorted(p.name for p in SCRIPTS.glob("*.sh"))


def test_the_scripts_are_all_here():
    assert {"train.py", "evaluate.py", "watch.py", "export.py", "benchmark.py", "play_remote.py", "soak.py"} <= set(PYTHON_SCRIPTS)
    assert {"gpu_box.sh", "evaluate_minutes.sh"} <= set(SHELL_SCRIPTS)


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
