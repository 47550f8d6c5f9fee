"""Atomic checkpoints of a run (DESIGN §3.6, §6), kept K deep, and the run's best model folder.

Layout of a run folder `save/<run>/`:
- `checkpoints/000012/`: one complete checkpoint per save, numbered in save order. Each is written as a
  whole in a staging folder `checkpoints/000012.partial/` (the COMPLETE marker last, files fsynced) which is
  then renamed, so a run killed at any moment leaves only complete numbered folders. After a save, only the
  newest `checkpoints_kept` complete ones are kept.
- `checkpoints.bad/<name>-<time>/`: checkpoints that could not be used at resume (unreadable or without
  their COMPLETE marker), moved aside, never deleted.
- `best/`: a model folder (weights_online.torch, settings.json, best.json), see learner.py `save`.
- `checkpoint/` and `checkpoint.previous/`: the single-folder layout of older runs, still read (as the
  oldest candidates) and removed once `checkpoints_kept` newer checkpoints exist.

Loading uses `weights_only=True` and JSON: nothing is unpickled or executed. A save that fails (full disk,
I/O error, permission) removes everything it wrote and raises `CheckpointSaveError`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import torch

from trackmania_rl.serialization import safe_torch_load, torch_load_failure

CHECKPOINTS = "checkpoints"  # the numbered checkpoints of a run
BAD_CHECKPOINTS = "checkpoints.bad"  # those moved aside at resume
BEST = "best"  # the best model folder of a run
STAGING_SUFFIX = ".partial"
NUMBER_DIGITS = 6
COMPLETE_MARKER = "COMPLETE"
# the single-folder layout of older runs (read, never written)
CHECKPOINT = "checkpoint"
PREVIOUS = "checkpoint.previous"
STAGING = "checkpoint.partial"

# the files of a checkpoint folder (the one place that names them: the learner writes them, evaluation reads them)
WEIGHTS_ONLINE = "weights_online.torch"
WEIGHTS_TARGET = "weights_target.torch"
OPTIMIZER = "optimizer.torch"
STATS = "stats.json"
SETTINGS = "settings.json"  # the config values in force (config/values.py), never code
BEST_JSON = "best.json"  # in best/: the score and when
CONFIG_COPY = "config_copy.py"  # older runs and models: a Python file, never executed when found beside weights
BUFFER = "buffer"
BUFFER_TEST = "buffer_test"
SHARD_SUFFIX = ".rank"  # a learner group's rank k > 0 saves its buffers as buffer.rank<k>, buffer_test.rank<k>

_NUMBERED = re.compile(rf"^\d{{{NUMBER_DIGITS}}}$")


def shard_name(name: str, rank: int) -> str:
    """The file of buffer `name` (BUFFER, BUFFER_TEST) of a learner group's rank: rank 0's is the plain name, so that
    a single learner's checkpoint is a group's of one."""
    return name if rank == 0 else f"{name}{SHARD_SUFFIX}{rank}"


def shard_files(folder: Path, name: str) -> list[tuple[int, Path]]:
    """(rank, path) of every shard of buffer `name` in a checkpoint folder, by rank."""
    folder = Path(folder)
    found = [(0, folder / name)] if (folder / name).is_file() else []
    pattern = re.compile(rf"^{re.escape(name)}{re.escape(SHARD_SUFFIX)}([1-9]\d{{0,5}})$")
    if folder.is_dir():
        found += [(int(m.group(1)), folder / m.group(0)) for m in map(pattern.match, os.listdir(folder)) if m]
    return sorted(found)


def weights_digest(state_dict: dict) -> str:
    """16 hex digits of the SHA-256 of a state dict's tensors (names, dtypes, shapes and bytes, in order): equal
    weights give equal digests, on any machine."""
    digest = hashlib.sha256()
    for name, tensor in state_dict.items():
        tensor = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


class CheckpointError(RuntimeError):
    """A checkpoint exists but cannot be used; the message names the file."""


class CheckpointCorrupt(CheckpointError):
    """A checkpoint file cannot be read (missing, truncated, not a torch/JSON file, invalid content), or the
    folder has no COMPLETE marker. As opposed to a checkpoint that reads fine but does not fit the config."""

    def __init__(self, message: str, path: Path | None = None):
        super().__init__(message)
        self.path = path


class CheckpointSaveError(OSError):
    """A save failed on an I/O error (full disk, I/O error, permission). Everything the save wrote was
    removed and the previous checkpoints are intact; the message names the path and the free space."""

    def __init__(self, message: str, path: Path, errno: int | None = None):
        super().__init__(errno, message)
        self.path = Path(path)
        self.message = message

    def __str__(self) -> str:
        return self.message


# --------------------------------------------------------------------------------------------------
# Saving
# --------------------------------------------------------------------------------------------------
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


def _fsync_files(folder: Path) -> None:
    for file in folder.iterdir():
        if file.is_file():
            with open(file, "rb") as f:
                os.fsync(f.fileno())
    _fsync_dir(folder)


def free_space(path: Path) -> str:
    """'1.2 GiB free' on the file system holding `path` (or its nearest existing parent)."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        free = shutil.disk_usage(path).free
    except OSError as e:
        return f"free space unknown ({e.strerror or e})"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if free < 1024 or unit == "TiB":
            return f"{free:.0f} {unit} free" if unit == "B" else f"{free:.1f} {unit} free"
        free /= 1024
    return ""  # not reached


def _is_io_failure(e: BaseException) -> bool:
    # torch.save to a path reports a failed write as a RuntimeError from its zip writer; to a file object, as OSError
    return isinstance(e, OSError) or (isinstance(e, RuntimeError) and bool(re.search(r"PytorchStreamWriter|file write failed", str(e))))


def _save_error(e: BaseException, path: Path, what: str) -> CheckpointSaveError:
    reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e).splitlines()[0] if str(e) else type(e).__name__
    return CheckpointSaveError(
        f"{what} failed writing {path}: {reason} ({free_space(path)} on that file system); "
        "everything this save wrote was removed and the previous checkpoints are kept",
        path,
        getattr(e, "errno", None),
    )


def _write_folder(staging: Path, writers: dict[str, Callable[[Path], None]], what: str) -> None:
    """Write every file of `writers` into `staging` (created), the COMPLETE marker last, all fsynced. On any
    failure the staging folder is removed; an I/O failure raises CheckpointSaveError."""
    current = staging
    try:
        staging.mkdir(parents=True)
        for name, write in writers.items():
            current = staging / name
            write(current)
        current = staging / COMPLETE_MARKER
        current.write_text("ok\n")
        current = staging
        _fsync_files(staging)
    except BaseException as e:
        shutil.rmtree(staging, ignore_errors=True)
        if _is_io_failure(e):
            raise _save_error(e, current, what) from e
        raise


def checkpoint_number(folder: Path) -> int | None:
    name = Path(folder).name
    return int(name) if _NUMBERED.match(name) else None


def numbered_checkpoints(run_dir: Path) -> list[Path]:
    """The numbered folders of `run_dir/checkpoints/` (complete or not), newest first."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    folders = [p for p in root.iterdir() if p.is_dir() and checkpoint_number(p) is not None]
    return sorted(folders, key=checkpoint_number, reverse=True)


def is_complete(folder: Path) -> bool:
    return (Path(folder) / COMPLETE_MARKER).is_file()


def save_checkpoint(run_dir: Path, writers: dict[str, Callable[[Path], None]], keep: int = 2) -> Path:
    """Write one file per entry of `writers` (name -> function writing that path) as the run's next numbered
    checkpoint, then keep only the newest `keep` complete ones. Returns the new folder.

    On an I/O error nothing written remains and CheckpointSaveError is raised; other checkpoints are untouched."""
    run_dir = Path(run_dir)
    root = run_dir / CHECKPOINTS
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _save_error(e, root, "checkpoint save") from e
    for leftover in root.glob(f"*{STAGING_SUFFIX}"):  # a save killed half-way: our own partial files
        shutil.rmtree(leftover, ignore_errors=True)
    existing = numbered_checkpoints(run_dir)
    number = (checkpoint_number(existing[0]) + 1) if existing else 1
    final = root / f"{number:0{NUMBER_DIGITS}d}"
    staging = root / f"{final.name}{STAGING_SUFFIX}"
    _write_folder(staging, writers, "checkpoint save")
    try:
        os.replace(staging, final)
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise _save_error(e, final, "checkpoint save") from e
    _fsync_dir(root)
    prune_checkpoints(run_dir, keep)
    return final


def prune_checkpoints(run_dir: Path, keep: int) -> list[Path]:
    """Delete the complete checkpoints beyond the newest `keep` (older-layout folders count as the oldest).
    Incomplete folders are left for the next resume to move aside. Returns what was deleted."""
    complete = [p for p in numbered_checkpoints(run_dir) if is_complete(p)]
    complete += [p for p in (Path(run_dir) / CHECKPOINT, Path(run_dir) / PREVIOUS) if is_complete(p)]
    deleted = []
    for folder in complete[max(1, int(keep)) :]:
        shutil.rmtree(folder, ignore_errors=True)
        deleted.append(folder)
    return deleted


def replace_folder(final: Path, writers: dict[str, Callable[[Path], None]], what: str = "save") -> Path:
    """Write `writers` as the folder `final` (e.g. save/<run>/best/), replacing it as a whole: a staging folder,
    then renames. A kill leaves the old or the new folder (or the old one as `<final>.previous`)."""
    final = Path(final)
    staging = final.with_name(final.name + STAGING_SUFFIX)
    previous = final.with_name(final.name + ".previous")
    shutil.rmtree(staging, ignore_errors=True)
    _write_folder(staging, writers, what)
    try:
        shutil.rmtree(previous, ignore_errors=True)
        if final.exists():
            os.replace(final, previous)
        os.replace(staging, final)
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        if previous.exists() and not final.exists():
            os.replace(previous, final)
        raise _save_error(e, final, what) from e
    _fsync_dir(final.parent)
    shutil.rmtree(previous, ignore_errors=True)
    return final


# --------------------------------------------------------------------------------------------------
# Finding and moving aside
# --------------------------------------------------------------------------------------------------
def checkpoint_candidates(run_dir: Path) -> list[Path]:
    """Every checkpoint folder of a run, newest first: the numbered ones (complete or not), then the older
    layout's checkpoint/ and checkpoint.previous/ when they exist."""
    run_dir = Path(run_dir)
    legacy = [run_dir / name for name in (CHECKPOINT, PREVIOUS) if (run_dir / name).is_dir()]
    return numbered_checkpoints(run_dir) + legacy


def find_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint folder of a run (new layout, then the older one), or None."""
    for folder in checkpoint_candidates(run_dir):
        if is_complete(folder):
            return folder
    return None


def move_aside(run_dir: Path, folder: Path) -> Path:
    """Move an unusable checkpoint folder to run_dir/checkpoints.bad/<name>-<time>/ (never deleted)."""
    bad = Path(run_dir) / BAD_CHECKPOINTS
    bad.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = bad / f"{Path(folder).name}-{stamp}"
    n = 1
    while target.exists():
        n += 1
        target = bad / f"{Path(folder).name}-{stamp}-{n}"
    os.replace(folder, target)
    return target


# --------------------------------------------------------------------------------------------------
# Writers and readers
# --------------------------------------------------------------------------------------------------
def torch_writer(obj) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        with open(path, "wb") as f:  # a file object: a failed write is an OSError naming its cause (ENOSPC...)
            torch.save(obj, f)

    return write


def json_writer(obj) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        with open(path, "w") as f:
            f.write(json.dumps(obj, indent=1, sort_keys=True))

    return write


def text_writer(text: str) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        with open(path, "w") as f:
            f.write(text)

    return write


def load_torch(folder: Path, name: str, map_location="cpu"):
    path = Path(folder) / name
    try:
        return safe_torch_load(path, map_location=map_location)
    except FileNotFoundError:
        raise CheckpointCorrupt(f"checkpoint file {path} is missing", path) from None
    except Exception as e:
        raise CheckpointCorrupt(
            f"checkpoint file {path} is corrupt or not a plain-data torch file ({torch_load_failure(e)})", path
        ) from None


def load_json(folder: Path, name: str):
    path = Path(folder) / name
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointCorrupt(f"checkpoint file {path} is missing", path) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointCorrupt(f"checkpoint file {path} is corrupt (not valid JSON: {e})", path) from None
    except OSError as e:
        raise CheckpointCorrupt(f"checkpoint file {path} cannot be read: {e.strerror or e}", path) from None
