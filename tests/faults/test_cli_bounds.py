"""Every number on the command line has a range; run names are plain folder names.

scripts/train.py refuses bad values with exit 2 and a message naming the option, before anything starts:
nothing is created under the save and TensorBoard folders. scripts/evaluate.py refuses out-of-range
--threads, --max-race-seconds and --seeds lists of more than 100,000 seeds (counted before any range is
expanded: `0-999999999` is refused at once).
"""

import importlib.util
import os
import subprocess
import sys
import tracemalloc

import pytest

from tests.faults.helpers import REPO_ROOT, TRAIN
from trackmania_rl.evaluation import evaluate as evaluation

CORES = os.cpu_count() or 1


def _train(tmp_path, *args):
    command = [sys.executable, str(TRAIN), "--save-dir", str(tmp_path / "save"), "--tensorboard-dir", str(tmp_path / "tb"), *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=60)


@pytest.mark.parametrize(
    "args, named",
    [
        (["--collectors", "0"], "--collectors 0: no local collector needs another rollout source (--ray or --listen)"),
        (["--collectors", "-1"], "--collectors -1: must be 0 or more"),
        (["--listen", "localhost"], "--listen localhost: give HOST:PORT with a port from 1 to 65535"),
        (["--listen", "127.0.0.1:70000"], "--listen 127.0.0.1:70000: give HOST:PORT"),
        (["--ray-actors", "-2"], "--ray-actors -2: must be 0 or more"),
        (["--seed", "-1"], "--seed -1: must be from 0 to"),
        (["--seed", str(2**31)], f"--seed {2**31}: must be from 0 to"),
        (["--collectors", str(4 * CORES + 1)], f"--collectors {4 * CORES + 1}: at most {4 * CORES}"),
        (["--collectors", "1e9"], "--collectors"),
        (["--max-minutes", "nan"], "--max-minutes nan"),
        (["--max-minutes", "inf"], "--max-minutes inf"),
        (["--max-minutes=-inf"], "--max-minutes -inf"),
        (["--max-minutes", "0"], "--max-minutes 0.0"),
        (["--max-minutes", "-5"], "--max-minutes -5.0"),
        (["--run-name", "/abs"], "--run-name '/abs'"),
        (["--run-name", ".."], "--run-name '..'"),
        (["--run-name", ""], "--run-name is empty"),
        (["--run-name", "a/b"], "--run-name 'a/b'"),
        (["--run-name", "x" * 101], "--run-name is 101 characters long"),
        (["--run-name", "..", "--fresh"], "--run-name '..'"),
        (["--learners", "0"], "--learners 0: must be 1 or more"),
        (["--learners", str(CORES + 1)], f"--learners {CORES + 1}: at most {CORES} local ranks on this machine"),
    ],
)
def test_train_refuses_out_of_range_options_before_anything_starts(tmp_path, args, named):
    (tmp_path / "save" / "carracing_default").mkdir(parents=True)
    (tmp_path / "save" / "carracing_default" / "keep.txt").write_text("keep")
    result = _train(tmp_path, *args)
    assert result.returncode == 2, (args, result.stdout, result.stderr)
    assert named in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    # nothing touched: no folder made, moved or deleted anywhere
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "save",
        "save/carracing_default",
        "save/carracing_default/keep.txt",
    ]


def test_train_has_no_config_copy_option(tmp_path):
    result = _train(tmp_path, "--config-copy", "x.py")
    assert result.returncode == 2 and "--config-copy" in result.stderr


def _evaluate_main():
    spec = importlib.util.spec_from_file_location("evaluate_script", REPO_ROOT / "scripts" / "evaluate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


@pytest.mark.parametrize(
    "args, named",
    [
        (["--threads", "0"], "--threads: 0: must be between 1 and"),
        (["--threads", str(CORES + 1)], f"--threads: {CORES + 1}: must be between 1 and {CORES}"),
        (["--threads", "two"], "--threads: 'two' is not a whole number"),
        (["--max-race-seconds", "nan"], "--max-race-seconds: nan: must be a finite number of seconds greater than 0"),
        (["--max-race-seconds", "inf"], "--max-race-seconds: inf"),
        (["--max-race-seconds", "0"], "--max-race-seconds: 0"),
        (["--max-race-seconds", "-1"], "--max-race-seconds: -1"),
    ],
)
def test_evaluate_refuses_out_of_range_numbers(tmp_path, capsys, args, named):
    main = _evaluate_main()
    with pytest.raises(SystemExit) as exit_:
        main(["--weights", str(tmp_path / "w.torch"), "--seeds", "0", *args])
    assert exit_.value.code == 2
    assert named in capsys.readouterr().err


def _peak_bytes(call) -> int:
    """The most memory Python allocated while `call()` ran (tracemalloc)."""
    tracemalloc.start()
    try:
        call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def test_evaluate_counts_seeds_before_expanding_ranges(tmp_path, capsys):
    main = _evaluate_main()
    assert main(["--weights", str(tmp_path / "w.torch"), "--seeds", "0-999999999"]) == 2
    assert "--seeds lists more than 100,000 seeds (at least 1,000,000,000)" in capsys.readouterr().err

    def refuse(text):
        with pytest.raises(evaluation.EvaluationError, match="more than 100,000 seeds"):
            evaluation.parse_seeds(text)

    # counted, not expanded: refusing a billion seeds allocates almost nothing, where the 10,000 seeds of an accepted
    # list already take ~1 MB (a list of ints and the set that finds repeats)
    expanded_10k = _peak_bytes(lambda: evaluation.parse_seeds("0-9999"))
    assert expanded_10k > 500_000
    assert _peak_bytes(lambda: refuse("0-999999999")) < expanded_10k / 50
    assert _peak_bytes(lambda: refuse("0-99999,100000-999999999")) < expanded_10k / 50
    for text in ("0-99999,100000", "0-50000,60000-110000", ",".join(str(i) for i in range(100_001)), "5-" + "9" * 5000):
        with pytest.raises(evaluation.EvaluationError, match="--seeds"):
            evaluation.parse_seeds(text)
    assert len(evaluation.parse_seeds("0-99999")) == evaluation.MAX_SEEDS == 100_000
