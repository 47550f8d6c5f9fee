"""A full disk (real ENOSPC) while saving: Learner.save() removes every partial file it wrote, leaves the
previous checkpoints intact, and raises CheckpointSaveError (an OSError) naming the path and the free space.

Two ways to a real ENOSPC: a small tmpfs mounted over the run folder (needs root and mount; skipped where it
cannot be mounted), and writes redirected to /dev/full through a symlink in the staging folder (always)."""

from __future__ import annotations

import errno
import os
import subprocess
import uuid

import pytest

from tests.learner.test_learner import META, _learner, _race
from trackmania_rl.learner import checkpoint as ckpt
from trackmania_rl.learner.checkpoint import CHECKPOINTS, STAGING_SUFFIX, CheckpointSaveError


def _files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _check_nothing_partial_and_previous_loads(tmp_path, previous, frames):
    run = tmp_path / "run"
    assert [p.name for p in (run / CHECKPOINTS).iterdir()] == [previous.name]  # no new folder, no staging
    assert not list(run.rglob(f"*{STAGING_SUFFIX}*")) and not list(run.rglob(".*.tmp*"))
    resumed, messages = _learner(tmp_path)
    assert resumed.stats.frames_played == frames
    assert any(m.startswith(f"resumed from {previous}") for m in messages)


def test_disk_full_through_dev_full(tmp_path, monkeypatch):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    learner, _ = _learner(tmp_path)
    learner.ingest(*_race(learner, 60), META)
    previous = learner.save()
    before = _files(previous)
    real_torch_writer = ckpt.torch_writer

    def writer_to_dev_full(obj):
        write = real_torch_writer(obj)

        def redirected(path):
            os.symlink("/dev/full", path)  # the file in the staging folder is /dev/full: every write fails, ENOSPC
            write(path)

        return redirected

    monkeypatch.setattr(ckpt, "torch_writer", writer_to_dev_full)
    learner.ingest(*_race(learner, 60, seed=1), META)
    with pytest.raises(CheckpointSaveError) as error:
        learner.save()
    assert isinstance(error.value, OSError) and error.value.errno == errno.ENOSPC
    message = str(error.value)
    assert "No space left on device" in message and "free on that file system" in message
    assert str(tmp_path / "run" / CHECKPOINTS) in message
    assert _files(previous) == before
    monkeypatch.undo()
    _check_nothing_partial_and_previous_loads(tmp_path, previous, frames=60)


@pytest.fixture
def small_disk(tmp_path):
    """tmp_path/run on an 8 MiB tmpfs (skipped where tmpfs cannot be mounted)."""
    mount_point = tmp_path / "run"
    mount_point.mkdir()
    device = f"tmpfs-{uuid.uuid4().hex[:8]}"
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", device, str(mount_point)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_disk_full_on_a_small_file_system(tmp_path, small_disk):
    learner, _ = _learner(tmp_path)
    learner.ingest(*_race(learner, 60), META)
    previous = learner.save()
    before = _files(previous)
    size = sum(p.stat().st_size for p in previous.rglob("*") if p.is_file())
    # fill the disk so that about half a checkpoint fits
    free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
    with open(small_disk / "filler.bin", "wb") as f:
        f.write(b"\0" * max(0, free - size // 2))
    with pytest.raises(CheckpointSaveError) as error:
        learner.save()
    assert error.value.errno == errno.ENOSPC and "free on that file system" in str(error.value)
    assert _files(previous) == before
    os.unlink(small_disk / "filler.bin")
    _check_nothing_partial_and_previous_loads(tmp_path, previous, frames=60)
    # with room again, the next save works
    assert ckpt.is_complete(learner.save())


def test_an_io_error_or_permission_error_is_the_same_exception(tmp_path, monkeypatch):
    learner, _ = _learner(tmp_path)
    previous = learner.save()
    for failure in (OSError(errno.EIO, "Input/output error"), PermissionError(errno.EACCES, "Permission denied")):

        def failing(obj, failure=failure):
            def write(path):
                path.write_bytes(b"partial")
                raise failure

            return write

        monkeypatch.setattr(ckpt, "torch_writer", failing)
        with pytest.raises(CheckpointSaveError, match=failure.strerror) as error:
            learner.save()
        assert error.value.errno == failure.errno
        monkeypatch.undo()
    _check_nothing_partial_and_previous_loads(tmp_path, previous, frames=0)
