"""scripts/train.py with its collectors on a real two-node Ray cluster (head 127.0.0.2, worker 127.0.0.3, token auth
on): an actor SIGKILLed mid-race is restarted and the run goes on; the worker node stopped mid-run, the learner
keeps training; the learner SIGKILLed leaves no actor behind and the run resumes from its checkpoint; SIGTERM then
saves once and exits 0."""

import os
import re
import signal
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from tests.faults.helpers import Trainer, train_command  # noqa: E402
from tests.helpers import write_tiny_config  # noqa: E402
from tests.rollouts.ray.conftest import path_without_ray, wait_restarted  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SAVED = r"checkpoint saved to \S+: (\d+) frames"


def _collector_actors_of_other_jobs(state: str = "ALIVE") -> list[dict]:
    mine = ray.get_runtime_context().get_job_id()
    return [
        a
        for a in ray._private.state.actors().values()
        if a["ActorClassName"] == "CollectorActor" and a["State"] == state and a["JobID"] != mine
    ]


def _is_collector_actor_process(pid: int) -> bool:
    """Whether `pid` is a collector actor's worker process (Ray titles it "ray::CollectorActor[.method]"): the table
    can name another process for an actor it has just marked ALIVE, and a SIGKILL sent there restarts nothing."""
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().startswith(b"ray::CollectorActor")
    except OSError:
        return False


def _frames_saved(trainer: Trainer) -> list[int]:
    return [int(f) for f in re.findall(SAVED, trainer.log())]


def _wait_more_frames(trainer: Trainer, than: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        saved = _frames_saved(trainer)
        if saved and saved[-1] > than:
            return saved[-1]
        assert trainer.process.poll() is None, trainer.log()[-4000:]
        time.sleep(0.5)
    raise AssertionError(f"no checkpoint with more than {than} frames within {timeout_s} s:\n{trainer.log()[-4000:]}")


def _trainer_alive(trainer: Trainer) -> None:
    assert trainer.process.poll() is None, trainer.log()[-4000:]


def test_train_on_ray_survives_a_killed_actor_a_stopped_node_and_a_killed_learner(ray_head, worker_node, tmp_path):
    config = write_tiny_config(tmp_path, save_frequency_s=2)
    config.write_text(config.read_text() + "cutoff_rollout_if_race_not_finished_within_duration_ms = 1_600\n")
    command = train_command(tmp_path, "ray_run", "--collectors", "0", "--ray", ray_head.address, "--ray-actors", "2")
    trainer = Trainer(command, cwd=tmp_path)  # inherits this process's token path (RAY_AUTH_TOKEN_PATH)
    try:
        trainer.wait_for(r"Ray: 2 collector actor\(s\)", 90)
        frames = _wait_more_frames(trainer, 0, 120)

        # an actor SIGKILLed in the middle of its races: Ray restarts it, it pulls the weights, the run goes on
        deadline = time.monotonic() + 60  # races may come from one actor while the other is still being created
        while time.monotonic() < deadline:
            actors = _collector_actors_of_other_jobs()
            on_head = [a for a in actors if a["Address"]["IPAddress"] == ray_head.ip]
            if len(actors) == 2 and on_head and _is_collector_actor_process(on_head[0]["Pid"]):
                break
            time.sleep(0.5)
        assert len(actors) == 2 and on_head and _is_collector_actor_process(on_head[0]["Pid"]), actors
        victim = on_head[0]
        os.kill(victim["Pid"], signal.SIGKILL)
        # a new worker process: torch, the game, the JIT, on busy cores
        wait_restarted(victim["ActorID"], 180, check=lambda: _trainer_alive(trainer), context=lambda: trainer.log()[-4000:])
        trainer.wait_for(r"Ray actor \d was restarted \(1 time\(s\)\)", 60)
        frames = _wait_more_frames(trainer, frames, 60)

        # the worker node leaves mid-run: the learner keeps taking races and training
        worker_node.stop()
        frames = _wait_more_frames(trainer, frames, 60)
        frames = _wait_more_frames(trainer, frames, 60)

        # the learner SIGKILLed: its actors go with it, and the run resumes from its last checkpoint
        trainer.signal(signal.SIGKILL)
        trainer.finish(30)
        deadline = time.monotonic() + 60
        while _collector_actors_of_other_jobs() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _collector_actors_of_other_jobs(), "actors outlived the killed learner"
        last_saved = _frames_saved(trainer)[-1]

        trainer = Trainer(command, cwd=tmp_path)
        resumed = int(trainer.wait_for(r"resumed from \S+: (\d+) frames", 90).group(1))
        assert resumed >= last_saved  # a save may have completed just before the kill, unlogged
        _wait_more_frames(trainer, resumed, 120)
        saves_before = len(_frames_saved(trainer))
        trainer.signal(signal.SIGTERM)  # ray.init installs a SIGTERM handler of its own: the run's must stay in place
        assert trainer.finish(60) == 0, trainer.log()[-4000:]
        assert "interrupted: stopping collectors and saving" in trainer.log()
        assert len(_frames_saved(trainer)) == saves_before + 1, trainer.log()[-4000:]  # the final save, once
        assert re.search(r"Ray: \d+ race\(s\) taken, \d+ lost", trainer.log())
    finally:
        trainer.kill()


def _processes_mentioning(text: str) -> list[int]:
    """Processes whose command line holds `text` (the node's temporary folder: its raylet, store, workers)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if text.encode() in open(f"/proc/{entry}/cmdline", "rb").read():
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def _node_folders_of(pid: int) -> list[str]:
    """Temporary folders of the nodes whose watchdog (cluster.py) process `pid` started."""
    module = b"trackmania_rl.rollouts.ray.cluster"
    folders = []
    for entry in os.listdir("/proc"):
        try:
            argv = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0") if entry.isdigit() else []
        except OSError:
            continue
        if module in argv and argv[argv.index(module) + 1] == str(pid).encode():
            folders.append(argv[argv.index(module) + 2].decode())
    return folders


# Ray's own error-level log lines, as its C++ core prints them: "[2026-11-27 07:43:34,939 E 6434 6434] file.cc:..."
RAY_ERROR_LINE = re.compile(r"^\[[\d-]+ [\d:,]+ E \d+ \d+\]", re.MULTILINE)


def test_ray_auto_from_an_unactivated_venv_runs_cleanly_and_a_killed_learner_leaves_no_process_behind(tmp_path):
    config = write_tiny_config(tmp_path, save_frequency_s=2)
    config.write_text(config.read_text() + "cutoff_rollout_if_race_not_finished_within_duration_ms = 1_600\n")
    command = train_command(tmp_path, "auto_run", "--collectors", "0", "--ray", "auto", "--ray-actors", "1")
    # no `ray` command on PATH, as when a venv's python is run without activating the venv (an IDE, cron, systemd)
    trainer = Trainer(command, cwd=tmp_path, env={**os.environ, "PATH": path_without_ray()})
    try:
        trainer.wait_for(r"Ray: 1 collector actor\(s\)", 90)
        _wait_more_frames(trainer, 0, 120)  # the actor and its game played races that reached the learner
        assert not RAY_ERROR_LINE.search(trainer.log()), trainer.log()[-4000:]
        folders = _node_folders_of(trainer.process.pid)
        # the watchdog, ray start, the node's own processes and the actor's worker all name the node's folder
        assert len(folders) == 1 and len(_processes_mentioning(folders[0])) >= 4, folders
        trainer.signal(signal.SIGKILL)
        trainer.finish(30)
        deadline = time.monotonic() + 30
        while _processes_mentioning(folders[0]) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _processes_mentioning(folders[0]) == []
        assert not Path(folders[0]).exists()
    finally:
        trainer.kill()
