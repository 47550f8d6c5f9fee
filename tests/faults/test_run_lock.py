"""A run folder is locked while a trainer uses it (fcntl.flock on save/<run>/.lock, pid written in it).

Real processes: a holder takes the lock through run_folder and sleeps; scripts/train.py on the same run,
with or without --fresh, is refused with exit 2 naming the holder's pid, and nothing in either run's folders
changed. Once the holder is SIGKILLed, the kernel has released the lock.
"""

import signal
import subprocess
import sys
import time

import pytest

from tests.faults.helpers import REPO_ROOT, snapshot, train_command
from tests.helpers import write_tiny_config
from trackmania_rl.learner.run_folder import LOCK_FILE, RunLock, RunLocked

HOLDER = """
import sys, time
from trackmania_rl.learner.run_folder import RunLock
lock = RunLock.acquire(sys.argv[1])
print("locked", flush=True)
time.sleep(600)
"""


def _populate(tmp_path, run_name):
    """A run that has been used: a checkpoint, its live config, TensorBoard logs."""
    run_dir = tmp_path / "save" / run_name
    (run_dir / "checkpoint").mkdir(parents=True)
    (run_dir / "checkpoint" / "stats.json").write_text('{"frames_played": 1234}')
    (run_dir / "checkpoint" / "COMPLETE").write_text("ok\n")
    (run_dir / "config_live.py").write_text("# the run's live config\n")
    (tmp_path / "tensorboard" / run_name).mkdir(parents=True)
    (tmp_path / "tensorboard" / run_name / "events.out.tfevents.1").write_bytes(b"events")


@pytest.mark.slow
def test_a_second_trainer_is_refused_while_the_first_holds_the_run(tmp_path):
    write_tiny_config(tmp_path)
    _populate(tmp_path, "busy")
    _populate(tmp_path, "other")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path / "save" / "busy")], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        before_save, before_tb = snapshot(tmp_path / "save"), snapshot(tmp_path / "tensorboard")
        for extra in ([], ["--fresh"]):
            result = subprocess.run(
                train_command(tmp_path, "busy", "--max-minutes", "0.1", *extra), capture_output=True, text=True, cwd=tmp_path, timeout=120
            )
            assert result.returncode == 2, (extra, result.stdout, result.stderr)
            assert f"in use by trainer pid {holder.pid}" in result.stderr, result.stderr
            assert "Traceback" not in result.stderr + result.stdout
            # nothing touched: no folder moved aside, no live config rewritten, the lock's pid kept
            assert snapshot(tmp_path / "save") == before_save
            assert snapshot(tmp_path / "tensorboard") == before_tb
            assert sorted(p.name for p in (tmp_path / "save").iterdir()) == ["busy", "other"]
            assert (tmp_path / "save" / "busy" / LOCK_FILE).read_text().strip() == str(holder.pid)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    # the kernel released the lock of the killed holder
    deadline = time.time() + 5
    while True:
        try:
            lock = RunLock.acquire(tmp_path / "save" / "busy")
            break
        except RunLocked:
            assert time.time() < deadline, "the lock of a SIGKILLed holder was not released"
            time.sleep(0.1)
    lock.release()
    assert snapshot(tmp_path / "save" / "other") == {k[len("other/") :]: v for k, v in before_save.items() if k.startswith("other/")}
