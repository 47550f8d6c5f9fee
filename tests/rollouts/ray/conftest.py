"""A real Ray cluster of loopback nodes for the Ray source's tests (skipped without the ray extra).

One head node (127.0.0.2, 2 CPUs, token auth on) for the whole session, this process its driver; tests that
need a second node add one on 127.0.0.3 (`worker_node`) and may stop it. Every node is started with a PATH that
holds no `ray` command (`path_without_ray`), as from an unactivated venv: the cluster helpers must not need one.
"""

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

import ray  # noqa: E402

from tests.helpers import SHORT_RACES, write_config  # noqa: E402
from trackmania_rl.config.live import LiveConfig  # noqa: E402
from trackmania_rl.rollouts.ray import cluster  # noqa: E402

MB = 2**20
HEAD_CPUS = 2
WORKER_CPUS = 2


def path_without_ray() -> str:
    """This process's PATH less the interpreter's own folder and every folder with a `ray` command in it (pyenv's
    shims, an activated venv's bin): what a process run by a venv's python without activating the venv sees."""
    here = Path(sys.executable).parent
    folders = [f for f in os.environ.get("PATH", "").split(os.pathsep) if f and Path(f) != here and not (Path(f) / "ray").exists()]
    path = os.pathsep.join(folders)
    assert shutil.which("ray", path=path) is None, path
    return path


def wait_restarted(actor_id: str, timeout_s: float, check=lambda: None, context=lambda: "") -> dict:
    """Until the cluster's actor table shows the actor alive again after one restart: its entry. `check()` runs
    between readings (to fail early: a process it depends on gone); on failure, says what the table shows and
    `context()`."""
    deadline = time.monotonic() + timeout_s
    entry = None
    while time.monotonic() < deadline:
        entry = ray._private.state.actors().get(actor_id)
        if entry and entry["NumRestarts"] >= 1 and entry["State"] == "ALIVE":
            return entry
        check()
        time.sleep(0.5)
    raise AssertionError(f"Ray did not restart the actor within {timeout_s} s: {entry}\n{context()}")


@pytest.fixture(scope="session")
def ray_head():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", path_without_ray())
        head = cluster.LocalNode.head(num_cpus=HEAD_CPUS, object_store_bytes=200 * MB)
    cluster.use_token_file(head.token_path)
    cluster.connect(head.address)
    yield head
    ray.shutdown()
    head.stop()


@pytest.fixture
def worker_node(ray_head):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", path_without_ray())
        node = cluster.LocalNode.worker(ray_head.address, ray_head.token_path, num_cpus=WORKER_CPUS, object_store_bytes=200 * MB)
    node.node_id = node.wait_joined()
    yield node
    node.stop()


@pytest.fixture
def short_races_live(tmp_path):
    """The live config of a run with 1.6 s races and a small network."""
    path = write_config(tmp_path, SHORT_RACES)
    return LiveConfig(path, game_backend="carracing", log=lambda m: None)
