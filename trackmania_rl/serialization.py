"""Saving plain data safely: atomic writes (temp file + rename) and loads that never unpickle objects."""

from __future__ import annotations

import os
from pathlib import Path

import torch


def atomic_torch_save(obj, path: str | Path) -> None:
    """torch.save to a temporary file next to `path`, then rename it over `path` (readers never see half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def safe_torch_load(path: str | Path, map_location="cpu"):
    """torch.load with weights_only=True: tensors, numbers, strings, lists, dicts only."""
    return torch.load(Path(path), map_location=map_location, weights_only=True)
