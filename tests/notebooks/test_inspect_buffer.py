"""docs/notebooks/inspect_buffer.ipynb runs end to end on a real (small) checkpoint.

The checkpoint is built without training: two real CarRacing races played by the scripted driver (one
finished lap, one cut off for lack of progress, with some exploratory actions), turned into transitions by
`fill_buffers` and saved with `save_buffer`, beside the config that produced them. The notebook is then
executed with nbclient (python3 kernel, cwd = repository root, BUFFER_RUN_DIR pointing at the run folder).
"""

import ast
import os
import re
import sys
from pathlib import Path

import nbclient
import nbformat
import numpy as np
import pytest

from trackmania_rl.config.loader import load_config
from trackmania_rl.config.values import settings_json
from trackmania_rl.games.base import MapSpec
from trackmania_rl.games.car_racing.actions import find_action
from trackmania_rl.games.car_racing.driver import centerline_follower
from trackmania_rl.games.car_racing.instance import CarRacingGameInstance
from trackmania_rl.learner.checkpoint import CHECKPOINTS, COMPLETE_MARKER, SETTINGS
from trackmania_rl.replay.buffers import make_buffers, save_buffer
from trackmania_rl.replay.experience import fill_buffers

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO_ROOT / "docs" / "notebooks" / "inspect_buffer.ipynb"
CELL_TIMEOUT_S = 120
CAPACITY = 2_000  # = memory_size_schedule below
# Appended to the repository config in the checkpoint's config_copy.py (the config of this "run").
OVERRIDES = """
# --- tests/test_notebook.py overrides ---
memory_size_schedule = [(0, (2_000, 100))]
buffer_test_ratio = 0.2
cutoff_rollout_if_race_not_finished_within_duration_ms = 45_000
"""
FINISHED_SEED = 8  # a 31.5 s lap (395 actions) that the scripted driver finishes: the shortest of seeds 0-29
CUT_OFF_SEED = 7


def stopping_driver(cfg, layout, drive_actions: int, seed: int):
    """The scripted driver with ~20 % random (non-greedy) actions, then full brakes until the no-progress cut-off."""
    follow = centerline_follower(cfg, layout)
    brake = find_action(cfg, brake=True)
    rng = np.random.default_rng(seed)
    n_actions = len(cfg.inputs)
    played = [0]

    def policy(frame, state_float):
        played[0] += 1
        if played[0] > drive_actions:
            action, greedy = brake, True
        elif rng.random() < 0.2:
            action, greedy = int(rng.integers(n_actions)), False
        else:
            action, greedy = follow(frame, state_float)[:2]
        q = np.zeros(n_actions, dtype=np.float32)
        q[action] = 1.0
        return action, greedy, 1.0, q

    return policy


@pytest.fixture(scope="module")
def python3_kernel(tmp_path_factory):
    """Make sure a kernel named python3 runs this interpreter (ipykernel's own spec normally provides it)."""
    from jupyter_client.kernelspec import KernelSpecManager

    if "python3" in KernelSpecManager().find_kernel_specs():
        yield "python3"
        return
    from ipykernel.kernelspec import write_kernel_spec

    jupyter_path = tmp_path_factory.mktemp("jupyter")
    write_kernel_spec(
        jupyter_path / "kernels" / "python3", overrides={"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]}
    )
    mp = pytest.MonkeyPatch()
    mp.setenv("JUPYTER_PATH", str(jupyter_path))
    yield "python3"
    mp.undo()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """save/<run>/checkpoints/000001/{buffer, buffer_test, settings.json, COMPLETE}; returns (run folder, facts to check)."""
    run = tmp_path_factory.mktemp("save") / "notebook_run"
    checkpoint = run / CHECKPOINTS / "000001"
    checkpoint.mkdir(parents=True)
    config_file = run / "config.py"
    config_file.write_text((REPO_ROOT / "config_files" / "config.py").read_text() + OVERRIDES)
    cfg = load_config(config_file, game_backend="carracing")
    (checkpoint / SETTINGS).write_text(settings_json(cfg))
    assert cfg.memory_size_schedule[0][1][0] == CAPACITY
    game = CarRacingGameInstance(cfg)
    try:
        layout = game.float_layout
        races = []
        for seed, policy in ((FINISHED_SEED, centerline_follower(cfg, layout)), (CUT_OFF_SEED, stopping_driver(cfg, layout, 25, seed=0))):
            spec = MapSpec(f"seed{seed}", seed)
            races.append(game.rollout(policy, spec, game.zone_centers_for(spec), lambda: None))
    finally:
        game.close()
    assert [stats["race_finished"] for _, stats in races] == [True, False]

    buffer, buffer_test = make_buffers(cfg, layout, CAPACITY, rng=np.random.default_rng(0))
    gamma = cfg.gamma_schedule[0][1]
    rng = np.random.default_rng(1)
    counts = [fill_buffers(rollout, buffer, buffer_test, cfg, layout, gamma, rng) for rollout, _ in races]
    save_buffer(buffer, checkpoint / "buffer")
    save_buffer(buffer_test, checkpoint / "buffer_test")
    (checkpoint / COMPLETE_MARKER).write_text("ok\n")
    facts = {
        "train": len(buffer),
        "train_states": buffer.storage.to_experience().n_states,
        "test": len(buffer_test),
        "train_finished": counts[0][0],
        "train_cut_off": counts[1][0],
    }
    assert facts["train"] == facts["train_finished"] + facts["train_cut_off"] > 0 and facts["test"] > 0
    return run, facts


def execute(env_run_dir, kernel_name, monkeypatch):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    monkeypatch.setenv("BUFFER_RUN_DIR", str(env_run_dir))
    monkeypatch.delenv("BUFFER_NAME", raising=False)
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name=kernel_name, resources={"metadata": {"path": str(REPO_ROOT)}})
    client.execute()
    return nb


def cell(nb, cell_id):
    found = [c for c in nb.cells if c.get("id") == cell_id]
    assert len(found) == 1, cell_id
    return found[0]


def text_of(c) -> str:
    return "".join(o.get("text", "") for o in c.outputs if o.output_type == "stream")


def has_png(c) -> bool:
    return any(o.output_type == "display_data" and "image/png" in o.get("data", {}) for o in c.outputs)


def test_committed_notebook_has_no_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    for c in nb.cells:
        if c.cell_type == "code":
            assert c.outputs == [] and c.execution_count is None, c.id


@pytest.mark.slow
def test_notebook_inspects_a_real_checkpoint(run_dir, python3_kernel, monkeypatch):
    run, facts = run_dir
    nb = execute(run, python3_kernel, monkeypatch)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors

    summary = text_of(cell(nb, "summary"))
    assert f"buffer_test: {facts['test']} transitions," in summary
    assert f"capacity {CAPACITY} " in summary
    assert f"buffer: {facts['train']} transitions, {facts['train_states']} states," in summary

    for cell_id in ("frames", "float-hist", "rewards", "nsteps-terminal", "minirace-stats"):
        assert has_png(cell(nb, cell_id)), cell_id

    table = text_of(cell(nb, "float-table"))
    for name in ("mini_race_clock", "velocity_car_frame", "zone_centers_ahead", "distance_to_finish"):
        assert re.search(rf"^\s*{name}\s", table, re.M), name

    terminal = text_of(cell(nb, "nsteps-terminal"))
    assert f"finished-race transitions: {facts['train_finished']}, cut-off-race transitions: {facts['train_cut_off']}" in terminal
    n_counts = ast.literal_eval(re.search(r"n_steps counts: (\{.*\})", terminal).group(1))
    assert sum(n_counts.values()) == facts["train"] and set(n_counts) <= {1, 2, 3} and len(n_counts) > 1

    samples = text_of(cell(nb, "minirace")).strip().splitlines()
    assert len(samples) == 2 + 8  # header, rule, 8 samples
    for line in samples[2:]:
        slot, t, clocks, n = line.split()[:4]
        assert clocks == f"{t}->{int(t) + int(n)}"  # float 0 of state / next state = t / t + n


def locate(monkeypatch, buffer_run_dir=None, repo=None):
    """Run the notebook's `setup` and `locate` cells in this process; returns the checkpoint folder they pick."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.delenv("BUFFER_NAME", raising=False)
    if buffer_run_dir is None:
        monkeypatch.delenv("BUFFER_RUN_DIR", raising=False)
    else:
        monkeypatch.setenv("BUFFER_RUN_DIR", str(buffer_run_dir))
    namespace = {}
    exec(cell(nb, "setup").source, namespace)
    assert namespace["REPO"] == REPO_ROOT
    if repo is not None:
        namespace["REPO"] = repo
    exec(cell(nb, "locate").source, namespace)
    return namespace["CKPT"]


def fake_repo(root: Path, runs: dict) -> Path:
    """A repository root with config_files/user_config.py and, per run, a complete checkpoint with a buffer, of
    given mtimes."""
    (root / "config_files").mkdir(parents=True)
    (root / "config_files" / "user_config.py").write_text((REPO_ROOT / "config_files" / "user_config.py").read_text())
    for name, mtime in runs.items():
        folder = root / "save" / name / CHECKPOINTS / "000003"
        folder.mkdir(parents=True)
        (folder / "buffer").write_bytes(b"")
        (folder / COMPLETE_MARKER).write_text("ok\n")
        os.utime(folder, (mtime, mtime))
    return root


def test_notebook_picks_its_input(tmp_path, monkeypatch):
    # BUFFER_RUN_DIR: a run folder or the checkpoint folder itself
    repo = fake_repo(tmp_path / "repo", {"older": 1_000_000, "newest": 2_000_000, "old": 1_500_000})
    run = repo / "save" / "old"
    assert locate(monkeypatch, run) == run / CHECKPOINTS / "000003"
    assert locate(monkeypatch, run / CHECKPOINTS / "000003") == run / CHECKPOINTS / "000003"
    # otherwise the most recently modified complete checkpoint of the runs under save/
    assert locate(monkeypatch, repo=repo) == repo / "save" / "newest" / CHECKPOINTS / "000003"


def test_notebook_without_a_checkpoint_says_to_train_first(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="holds no complete checkpoint with buffer: train first"):
        locate(monkeypatch, tmp_path)
    repo = fake_repo(tmp_path / "repo", {})
    with pytest.raises(FileNotFoundError, match="no saved replay buffer under .*/: train first"):
        locate(monkeypatch, repo=repo)
