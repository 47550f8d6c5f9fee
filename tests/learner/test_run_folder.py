"""The run folder module: run names, the lock, --fresh, the live config, stop signals (in process)."""

import os
import signal
import subprocess
import sys

import pytest

from trackmania_rl.learner import train_loop
from trackmania_rl.learner.run_folder import (
    LIVE_CONFIG,
    LOCK_FILE,
    InvalidRunName,
    RunFolderError,
    RunLock,
    RunLocked,
    StopSignals,
    install_live_config,
    move_run_aside,
    validate_run_name,
)


@pytest.mark.parametrize("name", ["carracing_default", "run-1", "a.b_c-d", "A9", "x" * 100, "_x", "-x"])
def test_plain_names_are_accepted(name):
    assert validate_run_name(name) == name


@pytest.mark.parametrize("name", ["", "/abs", "..", ".", ".hidden", "a/b", "a\\b", "x" * 101, "é", "a b", "a\nb", None])
def test_paths_and_odd_names_are_refused(name):
    with pytest.raises(InvalidRunName, match="--run-name"):
        validate_run_name(name)


def test_the_lock_is_exclusive_and_names_its_holder(tmp_path):
    run_dir = tmp_path / "save" / "r"
    lock = RunLock.acquire(run_dir)
    assert (run_dir / LOCK_FILE).read_text().strip() == str(os.getpid())
    with pytest.raises(RunLocked, match=f"in use by trainer pid {os.getpid()}") as refused:
        RunLock.acquire(run_dir)  # another open file description: refused even in the same process
    assert refused.value.holder_pid == os.getpid()
    assert (run_dir / LOCK_FILE).read_text().strip() == str(os.getpid())  # the refused one erased nothing
    lock.release()
    again = RunLock.acquire(run_dir)
    again.release()


def test_fresh_moves_the_run_aside_and_keeps_the_lock(tmp_path):
    run_dir, tb_dir = tmp_path / "save" / "r", tmp_path / "tensorboard" / "r"
    (run_dir / "checkpoint").mkdir(parents=True)
    (run_dir / "checkpoint" / "stats.json").write_text("{}")
    (run_dir / LIVE_CONFIG).write_text("old")
    tb_dir.mkdir(parents=True)
    (tb_dir / "events").write_text("e")
    (tmp_path / "save" / "other").mkdir()
    with RunLock.acquire(run_dir) as lock:
        made = move_run_aside(run_dir, tb_dir, log=lambda m: None)
        assert lock.held
        assert [p.name for p in run_dir.iterdir()] == [LOCK_FILE]
        with pytest.raises(RunLocked):
            RunLock.acquire(run_dir)
    backup_save, backup_tb = made
    assert backup_save.name.startswith("r.before-fresh-") and (backup_save / "checkpoint" / "stats.json").read_text() == "{}"
    assert (backup_save / LIVE_CONFIG).read_text() == "old"
    assert (backup_tb / "events").read_text() == "e" and not tb_dir.exists()
    assert (tmp_path / "save" / "other").is_dir()
    # a second --fresh in the same second gets its own folder
    (run_dir / "x").write_text("x")
    (again,) = move_run_aside(run_dir, tb_dir, log=lambda m: None)
    assert again != backup_save and (again / "x").read_text() == "x"


def test_live_config_is_copied_once_then_kept(tmp_path):
    path, created = install_live_config(tmp_path, "a = 1\n")
    assert created and path == tmp_path / LIVE_CONFIG and path.read_text() == "a = 1\n"
    path.write_text("a = 2\n")  # an edit made during the run
    path2, created2 = install_live_config(tmp_path, "a = 1\n")
    assert (path2, created2) == (path, False) and path.read_text() == "a = 2\n"
    assert [p.name for p in tmp_path.iterdir()] == [LIVE_CONFIG]  # no temp file left


def test_stop_signals_raise_then_note_then_ignore():
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN when pytest itself runs in the background (nohup, &)
    signals = StopSignals().install()
    try:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0) if hasattr(signal, "sigtimedwait") else None
        assert signals.requested == "SIGTERM"
        os.kill(os.getpid(), signal.SIGINT)  # a second signal while stopping: ignored
        signals2 = StopSignals().install()
        signals2.start_loop()
        os.kill(os.getpid(), signal.SIGINT)  # in the loop: only noted
        assert signals2.requested == "SIGINT"
        signals2.begin_shutdown()
        os.kill(os.getpid(), signal.SIGTERM)
        signals2.restore()
    finally:
        signals.restore()
    assert signal.getsignal(signal.SIGINT) is before


def test_stop_signals_deferred_are_taken_when_the_loop_starts_or_ignored_once_shutdown_began():
    before = signal.getsignal(signal.SIGINT)
    signals = StopSignals().install()
    try:
        signals.defer()  # while children spawn: a signal is only noted
        signal.raise_signal(signal.SIGTERM)
        assert signals.requested is None
        with pytest.raises(KeyboardInterrupt):
            signals.start_loop()  # then taken as start-up takes it
        assert signals.requested == "SIGTERM" and signals.mode == "shutdown"
        assert signal.getsignal(signal.SIGTERM) == signals._handle  # its handler is back
        signals.restore()
        signals = StopSignals().install()
        signals.defer()
        signal.raise_signal(signal.SIGINT)
        signals.begin_shutdown()  # a signal deferred until shutdown is ignored: no KeyboardInterrupt
        assert signals.requested is None and signal.getsignal(signal.SIGINT) == signals._handle
    finally:
        signals.restore()
    assert signal.getsignal(signal.SIGINT) is before


class FakeLearner:
    def __init__(self, failures):
        self.failures = list(failures)
        self.saves = 0

    def save_due(self):
        return True

    def save(self):
        if self.failures:
            raise self.failures.pop(0)
        self.saves += 1


def test_periodic_save_failures_are_logged_once_per_message_and_retried_next_period():
    lines = []
    saves = train_loop.PeriodicSaves(log=lines.append)
    learner = FakeLearner([OSError(28, "No space left on device"), OSError(28, "No space left on device"), RuntimeError("other")])
    assert saves.due(learner)
    assert not saves.save(learner, period_s=1000)
    assert not saves.due(learner)  # next try a period later, not at the next pass of the loop
    saves.next_try = 0
    assert not saves.save(learner, period_s=1000)
    saves.next_try = 0
    assert not saves.save(learner, period_s=1000)
    assert len(lines) == 2 and "No space left on device" in lines[0] and "RuntimeError: other" in lines[1]
    assert saves.summary() == [
        "periodic checkpoint save failed 2 time(s): OSError: [Errno 28] No space left on device",
        "periodic checkpoint save failed 1 time(s): RuntimeError: other",
    ]
    saves.next_try = 0
    assert saves.save(learner, period_s=1000) and learner.saves == 1
    assert lines[-1] == "checkpoint saved again after 3 failed periodic save(s)" and saves.summary() == []


def test_a_failed_final_save_is_one_line_and_exit_1(capsys):
    assert train_loop.final_save(FakeLearner([PermissionError(13, "Permission denied")])) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: the final checkpoint save failed") and "Permission denied" in err
    assert train_loop.final_save(FakeLearner([])) == 0


def test_seed_is_written_into_a_new_runs_live_config_and_a_resume_must_match_it(tmp_path):
    from tests.faults.helpers import TRAIN
    from trackmania_rl.config.loader import load_config, load_user_config

    options = train_loop.TrainOptions(run_name="seeded", save_dir=tmp_path / "save", tensorboard_dir=tmp_path / "tb", seed=5)
    lock, run_dir, _, live_path = train_loop.open_run(options, load_user_config())
    lock.release()
    assert load_config(live_path).seed == 5
    # resuming it with another seed is refused before anything starts, naming both seeds; nothing is changed
    before = live_path.read_text()
    args = ["--run-name", "seeded", "--save-dir", str(tmp_path / "save"), "--tensorboard-dir", str(tmp_path / "tb"), "--seed", "6"]
    result = subprocess.run([sys.executable, str(TRAIN), *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "was started with seed 5" in result.stderr and "--seed 6 cannot change it" in result.stderr
    assert live_path.read_text() == before and not (run_dir / "checkpoints").exists()


def test_a_run_started_from_a_file_with_a_base_gets_a_whole_live_config_kept_on_resume(tmp_path, monkeypatch):
    import re

    from trackmania_rl.config.live import LiveConfig
    from trackmania_rl.config.loader import CONFIG_DIR, load_config, load_user_config

    config = tmp_path / "variant.py"
    config.write_text(f"base = {str(CONFIG_DIR / 'carracing_pixels.py')!r}\nbatch_size = 64  # the variant's\n")
    messages = []
    monkeypatch.setattr(train_loop, "log", messages.append)
    options = train_loop.TrainOptions(run_name="v", save_dir=tmp_path / "save", tensorboard_dir=tmp_path / "tb", config=config)
    lock, _, _, live_path = train_loop.open_run(options, load_user_config())
    lock.release()
    text = live_path.read_text()
    # every setting in force, no base: the run does not change when a base file is edited
    assert not re.search(r"^base\s*=", text, re.M) and "batch_size = 64  # the variant's" in text
    assert "frame_stack = 4  # [restart] pixels:" in text and "# Optimisation" in text
    live = LiveConfig(live_path, game_backend="carracing")
    assert vars(live.current) == vars(load_config(config, game_backend="carracing"))
    assert any("copied from" in m and "written whole over" in m for m in messages), messages
    # a resumed run keeps its live file as it is, edits included, whatever --config says now
    live_path.write_text(text.replace("batch_size = 64", "batch_size = 32"))
    config.write_text("this file is not read on resume (\n")
    lock, _, _, live_path = train_loop.open_run(options, load_user_config())
    lock.release()
    assert live_path.read_text() == text.replace("batch_size = 64", "batch_size = 32")


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ('collectors_count = "many"', "collectors_count"),
        (f"collectors_count = {4 * (os.cpu_count() or 1) + 1}", "collectors_count"),
        ('training_cuda_graphs = "yes"', "training_cuda_graphs"),
        pytest.param(
            'training_cuda_graphs = "on"',
            "training_cuda_graphs = 'on' needs a CUDA device",
            marks=pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA"),
        ),
    ],
)
def test_bad_machine_settings_are_refused_before_anything_starts(tmp_path, setting, named):
    from tests.faults.helpers import TRAIN
    from tests.helpers import write_config

    config = write_config(tmp_path, f"\n{setting}\n")
    args = ["--config", str(config), "--save-dir", str(tmp_path / "save"), "--tensorboard-dir", str(tmp_path / "tb"), "--max-minutes", "1"]
    result = subprocess.run([sys.executable, str(TRAIN), *args], capture_output=True, text=True, timeout=180)
    assert result.returncode == 2, result.stderr
    assert named in result.stderr and "Traceback" not in result.stderr
    # nothing of a run is left: a start with a good --config is a new run, not a resume of this refused one
    assert not (tmp_path / "save" / "carracing_default" / "config_live.py").exists()
    assert not (tmp_path / "save" / "carracing_default" / "checkpoints").exists()


def test_a_refused_fresh_start_leaves_the_previous_run_where_it_was(tmp_path):
    from tests.faults.helpers import TRAIN
    from tests.helpers import write_config
    from trackmania_rl.config.loader import load_user_config

    folders = ["--save-dir", str(tmp_path / "save"), "--tensorboard-dir", str(tmp_path / "tb")]
    options = train_loop.TrainOptions(run_name="kept", save_dir=tmp_path / "save", tensorboard_dir=tmp_path / "tb")
    lock, run_dir, _, live_path = train_loop.open_run(options, load_user_config())
    lock.release()
    before = live_path.read_text()
    bad = write_config(tmp_path, "\ncollectors_count = 0\n")  # no rollout source: refused after the config loads
    args = ["--run-name", "kept", "--fresh", "--config", str(bad), *folders]
    result = subprocess.run([sys.executable, str(TRAIN), *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "no rollout source" in result.stderr, result.stderr
    assert live_path.read_text() == before and list((tmp_path / "save").iterdir()) == [run_dir]  # not moved aside


@pytest.mark.parametrize("option", ["save_dir", "tensorboard_dir"])
def test_a_file_given_as_a_folder_is_refused_naming_the_option(tmp_path, option):
    from trackmania_rl.config.loader import load_user_config

    (tmp_path / "file").write_text("not a folder")
    folders = {"save_dir": tmp_path / "save", "tensorboard_dir": tmp_path / "tb", option: tmp_path / "file" / "below"}
    with pytest.raises(RunFolderError, match=f"--{option.replace('_', '-')} .*file is a file, not a folder"):
        train_loop.run_folders(train_loop.TrainOptions(run_name="r", **folders), load_user_config())
    assert not (tmp_path / "save").exists() and not (tmp_path / "tb").exists()
