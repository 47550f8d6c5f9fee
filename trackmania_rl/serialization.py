"""Saving plain data safely: atomic writes (temp file + rename) and loads that never unpickle objects."""

from __future__ import annotations

import os
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import torch


def atomic_write(path: str | Path, write: Callable[[BinaryIO], None]) -> None:
    """`write(file)` into a temporary file next to `path`, then rename it over `path` (readers never see half a
    file; a failed write leaves the previous file as it was)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_torch_save(obj, path: str | Path) -> None:
    """torch.save, atomically (`atomic_write`)."""
    atomic_write(path, lambda f: torch.save(obj, f))


def atomic_write_bytes(data: bytes, path: str | Path) -> None:
    """`data` into `path`, atomically (`atomic_write`)."""
    atomic_write(path, lambda f: f.write(data))


def safe_torch_load(path: str | Path, map_location="cpu", mmap: bool = False):
    """torch.load with weights_only=True: tensors, numbers, strings, lists, dicts only. `mmap`: the tensors stay in
    the file, mapped into memory and read when touched (a big replay is then never held twice while it is loaded);
    a file that is not a torch zip archive is read as without it, so that it fails the same way."""
    path = Path(path)
    mmap = mmap and zipfile.is_zipfile(path)
    return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)


# torch's own advice when weights_only refuses a file (load it with weights_only=False, or allow-list the
# class): never shown to a user, whose file may be damaged or hostile
_TORCH_ADVICE = re.compile(r"weights_only|Weights only load failed|Check the documentation|file an issue|allowlist", re.I)


def torch_load_failure(e: BaseException) -> str:
    """The useful part of a failed `safe_torch_load`: what was wrong with the file, without torch's advice
    to turn the safety off ("... weights_only set to False will likely succeed")."""
    if isinstance(e, EOFError):
        return "the file is empty or truncated"
    text = str(e).strip()
    refused = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\n\s*\n|$)", text, re.S)
    if refused:  # e.g. "Unsupported global: GLOBAL pathlib.PosixPath was not an allowed global by default"
        return " ".join(refused.group(1).split()).split(". ")[0].rstrip(".")
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    useful = [p for p in paragraphs if not _TORCH_ADVICE.search(p)]
    if not useful:
        return "it holds objects other than tensors and plain data" if paragraphs else type(e).__name__
    first = " ".join(useful[0].split()).split(". ")[0].rstrip(".")  # torch's first sentence says it; the rest is advice
    return first if len(first) > 12 else f"{type(e).__name__}: {first}"
