"""scripts/train.py --learners 2 --ray ADDRESS on a real two-node Ray cluster (head 127.0.0.2, worker 127.0.0.3, token
auth on): rank 1 is an actor placed on the other node, found and joined through Ray, listening on that node's address
only; the two ranks train with equal weights and rank 0's checkpoints hold both shards. A group the cluster cannot
place (more ranks than nodes) is refused with exit 2."""

import json
import re
import signal
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from tests.faults.helpers import Trainer, run_train, train_command  # noqa: E402
from tests.helpers import write_tiny_config  # noqa: E402
from tests.learner_group.test_group_step import listening_sockets  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SAVED = r"checkpoint saved to (\S+): (\d+) frames, (\d+) batches"


def _config(tmp_path) -> None:
    config = write_tiny_config(tmp_path, save_frequency_s=4)
    config.write_text(config.read_text() + "cutoff_rollout_if_race_not_finished_within_duration_ms = 1_600\nheld_out_eval_period_s = 0\n")


def _rank_actors_alive() -> list[dict]:
    return [a for a in ray._private.state.actors().values() if a["ActorClassName"] == "RankActor" and a["State"] == "ALIVE"]


def _rank_actor_of(pid: int, timeout_s: float) -> dict:
    """The table's entry of the rank actor running as `pid` (the table can name another process for an actor it has
    just marked ALIVE, so it is read until it names this one)."""
    deadline = time.monotonic() + timeout_s
    while True:
        entries = _rank_actors_alive()
        actor = next((a for a in entries if a["Pid"] == pid), None)
        if actor is not None:
            return actor
        assert time.monotonic() < deadline, f"no ALIVE rank actor with pid {pid} in the actor table: {entries}"
        time.sleep(0.5)


def test_ranks_placed_one_per_node_train_with_equal_weights(ray_head, worker_node, tmp_path):
    _config(tmp_path)
    command = train_command(tmp_path, "ray_group", "--learners", "2", "--collectors", "2", "--ray", ray_head.address)
    trainer = Trainer(command, cwd=tmp_path)
    try:
        store = trainer.wait_for(r"2 ranks \(Ray actors, one per node\), store on ([\d.]+):\d+", 120)
        assert store.group(1) == ray_head.ip  # rank 0's node, as Ray knows it
        pid = int(trainer.wait_for(rf"ip={re.escape(worker_node.ip)}\)\S* \[rank 1\] pid (\d+):", 180).group(1))
        actor = _rank_actor_of(pid, timeout_s=30)
        ours = {(ip, port) for ip, port in listening_sockets(pid) if port != actor["Address"]["Port"]}  # not Ray's own server
        assert ours and {ip for ip, _ in ours} == {worker_node.ip}, listening_sockets(pid)  # rank 1's gloo: its node's address
        deadline = time.monotonic() + 180
        while not [b for *_, b in re.findall(SAVED, trainer.log()) if int(b) > 0] and time.monotonic() < deadline:
            assert trainer.process.poll() is None, trainer.log()[-4000:]
            time.sleep(0.5)
        trainer.signal(signal.SIGTERM)
        assert trainer.finish(120) == 0, trainer.log()[-4000:]
    finally:
        trainer.kill()
    folder, _, batches = re.findall(SAVED, trainer.log())[-1]
    stats = json.loads((Path(folder.rstrip(":")) / "stats.json").read_text())
    assert stats["learners"] == 2 and int(batches) > 0 and len(set(stats["rank_weight_digests"])) == 1
    assert stats["ranks"][1]["buffer_size"] > 0 and (Path(folder.rstrip(":")) / "buffer.rank1").is_file()
    deadline = time.monotonic() + 30
    while _rank_actors_alive() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _rank_actors_alive()


def test_more_ranks_than_nodes_are_refused_with_the_numbers(ray_head, tmp_path):
    _config(tmp_path)
    command = train_command(tmp_path, "too_many", "--learners", "2", "--collectors", "2", "--ray", ray_head.address)
    result = run_train(tmp_path, *command[2:], timeout_s=120)
    alive = [node for node in ray.nodes() if node["Alive"]]
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"--learners 2: the Ray cluster at {ray_head.address} has {len(alive)} node(s), one rank per node" in result.stderr
    assert not (tmp_path / "save" / "too_many" / "checkpoints").exists()
