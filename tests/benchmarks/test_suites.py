"""The benchmark suites behind `python scripts/benchmark.py SUITE` (trackmania_rl/benchmarks/): every one imports (an
optional one with its extra installed, in the test pass that installs it), and the short ones run in their --quick form
and print their figures, so that a moved function cannot silently break a command the docs give."""

import importlib
import importlib.util
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[2] / "scripts" / "benchmark.py"
_spec = importlib.util.spec_from_file_location("benchmark_script", BENCHMARK)
benchmark_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(benchmark_script)

# an optional suite's extra: the package it needs, and the test marker of the pass that installs it
EXTRAS = {"ray": ("ray", "ray"), "http": ("fastapi", "http"), "export": ("onnxruntime", "onnx"), "enduro": ("ale_py", "atari")}
ALL_SUITES = benchmark_script.SUITES + benchmark_script.OPTIONAL_SUITES + benchmark_script.SEPARATE_SUITES


def suite_params(suites):
    return [pytest.param(s, marks=getattr(pytest.mark, EXTRAS[s][1])) if s in EXTRAS else s for s in suites]


def test_every_suite_module_is_listed_by_the_script():
    modules = {p.stem for p in (Path(__file__).resolve().parents[2] / "trackmania_rl" / "benchmarks").glob("*.py")}
    helpers = {"__init__", "frame_fidelity", "recorded_races"}  # not suites: parts of them
    assert modules - helpers == set(ALL_SUITES)


@pytest.mark.parametrize("suite", suite_params(ALL_SUITES))
def test_every_suite_imports(suite):
    if suite in EXTRAS:
        pytest.importorskip(EXTRAS[suite][0])
    module = importlib.import_module(f"trackmania_rl.benchmarks.{suite}")
    assert callable(module.run)


def run_quick(suite: str) -> list[dict]:
    result = subprocess.run([sys.executable, str(BENCHMARK), suite, "--quick"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = [json.loads(line) for line in result.stdout.splitlines()]
    assert figures and all({"figure", "value"} <= set(f) for f in figures)
    assert all(f["figure"].startswith(f"{suite}.") for f in figures if suite != "export")
    return figures


@pytest.mark.slow
def test_the_game_suite_runs_quick_and_gives_the_renderers_figures():
    figures = {f["figure"]: f for f in run_quick("game")}
    for name in ("game.bare_steps_per_s", "game.bare_steps_per_s_fast", "game.bare_speedup_fast", "game.render_ms_fast"):
        assert figures[name]["value"] > 0
    assert 0 <= figures["game.fast_frame_abs_diff"]["value"] < 5  # measured ~0.2 (0-255 grey levels)
    assert 0.9 <= figures["game.fast_frame_same_action_fraction"]["value"] <= 1
    assert set(figures["game.rollout_share_fast"]["value"]) >= {"physics", "floats", "render", "exploration_policy"}
    # the regression guard is on what the collector adds beyond the game and the network, in the default (fast) game,
    # judged on the median of the paired repetitions; the efficiencies with the network are informational
    guard = figures["game.collector_efficiency_without_network_fast"]
    assert guard["target"] == ">= 0.85"
    assert guard["value"] == guard["median_of_paired_ratios"]
    assert guard["value"] == pytest.approx(statistics.median(guard["per_repetition"]), abs=1e-4)
    for name in ("game.collector_efficiency", "game.collector_efficiency_fast", "game.collector_efficiency_without_network"):
        assert "target" not in figures[name]
    for suffix in ("", "_fast"):
        decision = figures[f"game.decision_ms_per_action{suffix}"]
        assert decision["value"] > 0 and 0 < decision["share_of_action"] < 1
    for name in ("in_rollout_fast", "without_network_fast", "bare_with_network_fast"):
        slowdown = figures[f"game.game_stages_slowdown_{name}"]
        assert slowdown["value"] > 0 and set(slowdown["by_stage"]) == {"physics", "render"}


@pytest.mark.slow
def test_the_learner_suite_runs_quick():
    figures = {f["figure"]: f for f in run_quick("learner")}
    assert any(name.startswith("learner.") for name in figures)


@pytest.mark.onnx
@pytest.mark.slow
def test_the_export_suite_runs_quick():
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    figures = run_quick("export")
    assert any(f["figure"].startswith("export.") for f in figures)


@pytest.mark.slow
@pytest.mark.atari
def test_the_enduro_suite_runs_quick():
    pytest.importorskip("ale_py")
    figures = {f["figure"]: f for f in run_quick("enduro")}
    stages = figures["enduro.collector_us_per_action"]["value"]
    assert {"env_step", "frame", "exploration_policy"} <= set(stages) and all(v >= 0 for v in stages.values())
    assert figures["enduro.collector_actions_per_s"]["value"] > 0 and figures["enduro.learner_batches_per_s"]["value"] > 0
    step_ms = figures[f"enduro.train_step_ms_{figures['enduro.learner_batches_per_s']['dtype']}"]["value"]
    assert figures["enduro.learner_batches_per_s"]["value"] == pytest.approx(1000 / step_ms, rel=0.02)
