"""Atomic checkpoints of a run (DESIGN §3.6, §6).

A checkpoint is a folder `save/<run>/checkpoint/` written as a whole: every file goes into a staging
folder which then replaces the previous checkpoint by renames, so a run killed at any moment leaves
either the old or the new checkpoint complete, never a mix. Loading uses `weights_only=True` and JSON.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from trackmania_rl.serialization import safe_torch_load

CHECKPOINT = "checkpoint"
STAGING = "checkpoint.partial"
PREVIOUS = "checkpoint.previous"
COMPLETE_MARKER = "COMPLETE"

# the files of a checkpoint folder (the one place that names them: the learner writes them, evaluation reads them)
WEIGHTS_ONLINE = "weights_online.torch"
WEIGHTS_TARGET = "weights_target.torch"
OPTIMIZER = "optimizer.torch"
SCALER = "scaler.torch"
STATS = "stats.json"
CONFIG_COPY = "config_copy.py"
BUFFER = "buffer"
BUFFER_TEST = "buffer_test"


class CheckpointError(RuntimeError):
    """A checkpoint exists but cannot be used; the message names the file."""


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_checkpoint(run_dir: Path, writers: dict[str, Callable[[Path], None]]) -> Path:
    """Write one file per entry of `writers` (name -> function writing that path) as one checkpoint."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    staging, final, previous = run_dir / STAGING, run_dir / CHECKPOINT, run_dir / PREVIOUS
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for name, write in writers.items():
        write(staging / name)
    (staging / COMPLETE_MARKER).write_text("ok\n")
    for file in staging.iterdir():
        if file.is_file():
            with open(file, "rb") as f:
                os.fsync(f.fileno())
    _fsync_dir(staging)
    shutil.rmtree(previous, ignore_errors=True)
    if final.exists():
        os.replace(final, previous)
    os.replace(staging, final)
    _fsync_dir(run_dir)
    shutil.rmtree(previous, ignore_errors=True)
    return final


def find_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint folder of a run, or None."""
    for name in (CHECKPOINT, PREVIOUS):
        folder = Path(run_dir) / name
        if (folder / COMPLETE_MARKER).exists():
            return folder
    return None


def torch_writer(obj) -> Callable[[Path], None]:
    return lambda path: torch.save(obj, path)


def json_writer(obj) -> Callable[[Path], None]:
    return lambda path: path.write_text(json.dumps(obj, indent=1, sort_keys=True))


def load_torch(folder: Path, name: str, map_location="cpu"):
    path = Path(folder) / name
    try:
        return safe_torch_load(path, map_location=map_location)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint file {path} is missing") from None
    except Exception as e:
        raise CheckpointError(f"checkpoint file {path} cannot be loaded safely: {e}") from None


def load_json(folder: Path, name: str):
    path = Path(folder) / name
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint file {path} is missing") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"checkpoint file {path} is not valid JSON: {e}") from None
