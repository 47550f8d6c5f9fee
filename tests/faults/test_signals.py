"""SIGTERM and SIGINT with real trainer processes (scripts/train.py, a tiny config, one collector).

- SIGTERM during start-up stops the trainer cleanly (exit 0, no traceback, the run folder unlocked).
- SIGTERM in the training loop, then more signals during shutdown: the final save still happens (exit 0),
  the checkpoint is complete, no collector outlives the run; meanwhile a second trainer on the same run is
  refused (exit 2) naming the first one's pid.
- Saves that fail (the run folder made immutable with chattr): periodic failures are logged once and the run
  goes on; the final save failing gives one error line and exit 1; the previous checkpoint is intact.
"""

import json
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.faults.helpers import Trainer, process_exists, snapshot, train_command
from tests.helpers import write_tiny_config
from trackmania_rl.learner.run_folder import RunLock

pytestmark = pytest.mark.slow

SAVED = r"checkpoint saved to (\S+): (\d+) frames"


def _complete_checkpoints(run_dir: Path) -> list[Path]:
    return [marker.parent for marker in run_dir.rglob("COMPLETE") if ".before-fresh-" not in str(marker)]


def _assert_clean_exit(trainer: Trainer, run_dir: Path) -> None:
    log = trainer.log()
    assert "Traceback" not in log, log[-4000:]
    for pid in map(int, re.findall(r"started \(pid (\d+)\)", log)):
        deadline = time.time() + 10
        while process_exists(pid) and time.time() < deadline:
            time.sleep(0.2)
        assert not process_exists(pid), f"collector pid {pid} outlived the trainer"
    RunLock.acquire(run_dir).release()  # the run folder is free again


def test_sigterm_during_start_up_stops_cleanly(tmp_path):
    write_tiny_config(tmp_path)
    trainer = Trainer(train_command(tmp_path, "startup", "--max-minutes", "5", "--collectors", "1"), tmp_path)
    try:
        trainer.wait_for(r"live config of this run: \S+config_live.py \(copied from", 60)
        trainer.signal(signal.SIGTERM)
        started = time.time()
        assert trainer.finish(60) == 0, trainer.log()[-4000:]
        assert time.time() - started < 60
    finally:
        trainer.kill()
    assert re.search(r"interrupted( during start-up)?: ", trainer.log()), trainer.log()[-4000:]
    run_dir = tmp_path / "save" / "startup"
    _assert_clean_exit(trainer, run_dir)
    assert (run_dir / "config_live.py").read_text() == (tmp_path / "config.py").read_text()
    for folder in _complete_checkpoints(run_dir):  # if the learner was built, its checkpoint is complete
        assert (folder / "stats.json").is_file()


def test_more_signals_during_shutdown_do_not_skip_the_final_save(tmp_path):
    write_tiny_config(tmp_path)
    trainer = Trainer(train_command(tmp_path, "run", "--max-minutes", "5", "--collectors", "1"), tmp_path)
    try:
        trainer.wait_for(r"\[collector 0\] ready", 120)
        # a second trainer on the same run, with or without --fresh, is refused and changes nothing
        before = snapshot(tmp_path / "save")
        for extra in ([], ["--fresh"]):
            second = subprocess.run(
                train_command(tmp_path, "run", "--max-minutes", "1", *extra), capture_output=True, text=True, cwd=tmp_path, timeout=120
            )
            assert second.returncode == 2, second.stderr
            assert f"in use by trainer pid {trainer.process.pid}" in second.stderr, second.stderr
        assert sorted(p.name for p in (tmp_path / "save").iterdir()) == ["run"]
        assert set(before) <= set(snapshot(tmp_path / "save"))
        trainer.wait_for(r"races? |\[collector 0\] ready", 5)
        time.sleep(5)
        trainer.signal(signal.SIGTERM)
        trainer.wait_for(r"interrupted: stopping collectors and saving", 30)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGINT):
            time.sleep(0.05)
            if trainer.process.poll() is None:
                trainer.signal(signum)
        assert trainer.finish(90) == 0, trainer.log()[-4000:]
    finally:
        trainer.kill()
    run_dir = tmp_path / "save" / "run"
    _assert_clean_exit(trainer, run_dir)
    saved = re.findall(SAVED, trainer.log())
    assert saved, trainer.log()[-4000:]
    folder, frames = Path(saved[-1][0]), int(saved[-1][1])
    assert folder in _complete_checkpoints(run_dir)
    assert json.loads((folder / "stats.json").read_text())["frames_played"] == frames


def _chattr(flag: str, root: Path) -> None:
    for folder in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
        subprocess.run(["chattr", flag, str(folder)], check=True, capture_output=True)


def _immutable_folders_work(tmp_path: Path) -> bool:
    probe = tmp_path / "probe"
    probe.mkdir()
    try:
        subprocess.run(["chattr", "+i", str(probe)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return False
    try:
        (probe / "x").write_text("x")
        return False
    except OSError:
        return True
    finally:
        subprocess.run(["chattr", "-i", str(probe)], capture_output=True)


def test_failed_saves_do_not_end_the_run_and_a_failed_final_save_exits_1(tmp_path):
    if shutil.which("chattr") is None or not _immutable_folders_work(tmp_path):
        pytest.skip("needs chattr +i (root on a file system with immutable folders) to make saves fail")
    write_tiny_config(tmp_path, save_frequency_s=3)
    run_dir = tmp_path / "save" / "run"
    trainer = Trainer(train_command(tmp_path, "run", "--max-minutes", "5", "--collectors", "1"), tmp_path)
    try:
        first = trainer.wait_for(SAVED, 120)
        good = Path(first.group(1))
        time.sleep(0.5)
        good_files = snapshot(good)
        _chattr("+i", run_dir)
        try:
            trainer.wait_for(r"periodic checkpoint save failed \(training goes on", 30)
            time.sleep(8)  # two more periods: the run goes on, the same failure is not logged again
            assert trainer.process.poll() is None, trainer.log()[-4000:]
            assert trainer.log().count("periodic checkpoint save failed (training goes on") == 1, trainer.log()[-4000:]
            trainer.signal(signal.SIGTERM)
            assert trainer.finish(90) == 1, trainer.log()[-4000:]
        finally:
            _chattr("-i", run_dir)
    finally:
        trainer.kill()
    log = trainer.log()
    assert "Traceback" not in log, log[-4000:]
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: the final checkpoint save failed"), log[-4000:]
    assert re.search(r"periodic checkpoint save failed \d+ time\(s\)", log), log[-4000:]
    # nothing lost: the last good checkpoint is complete and unchanged
    assert good in _complete_checkpoints(run_dir)
    assert snapshot(good) == good_files
    _assert_clean_exit(trainer, run_dir)
