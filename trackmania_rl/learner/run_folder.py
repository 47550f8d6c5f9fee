"""A run's own folder: its name, its lock, its live config, `--fresh`, and how a trainer stops (DESIGN §2, §6).

- `validate_run_name(name)`: letters, digits, `.`, `_`, `-`, not starting with a dot, at most 100 characters.
- `RunLock.acquire(run_dir)`: an OS lock (`fcntl.flock`) on `save/<run>/.lock`, held while a trainer uses the
  run; the kernel releases it when the holder dies, however it dies. The holder's pid is written in the file
  so that a refused trainer can name it.
- `move_run_aside(run_dir, tb_run_dir)`: `--fresh`, under the lock: the run's folders are moved aside
  (`<run>.before-fresh-<time>`), never deleted.
- `install_live_config(run_dir, config_text)`: `save/<run>/config_live.py`, the file every process of the run
  reloads. The whole text of `--config` at a fresh start (config/whole_copy.py: every setting in force, also when
  that file names a base); on resume the run's own live file is kept as it is.
- `StopSignals`: SIGINT and SIGTERM stop a trainer the same way at every stage; once shutdown has begun,
  further signals are ignored so that nothing skips the final save.

Only the standard library is imported here: scripts/train.py checks its arguments with it before torch loads.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

from trackmania_rl.deferred_signals import STOP_SIGNALS, DeferredSignals
from trackmania_rl.serialization import atomic_write

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

LIVE_CONFIG = "config_live.py"
LOCK_FILE = ".lock"
RUN_NAME_MAX_LENGTH = 100
_RUN_NAME = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9._\-]*")


class RunFolderError(Exception):
    """The run folder cannot be used as asked; the message says why (scripts/train.py exits 2)."""


class InvalidRunName(RunFolderError):
    pass


class RunLocked(RunFolderError):
    def __init__(self, run_dir: Path, holder_pid: int | None):
        self.run_dir = run_dir
        self.holder_pid = holder_pid
        holder = f"trainer pid {holder_pid}" if holder_pid is not None else "another trainer (pid not written yet)"
        super().__init__(
            f"run folder {run_dir} is in use by {holder} (lock {run_dir / LOCK_FILE}); "
            "stop that trainer first, or pick another --run-name. Nothing was changed."
        )


def validate_run_name(name) -> str:
    """The run name if it is a plain folder name; InvalidRunName otherwise (paths, `..`, empty, too long...)."""
    if not isinstance(name, str) or not name:
        raise InvalidRunName("--run-name is empty: give a folder name such as 'carracing_default'")
    if len(name) > RUN_NAME_MAX_LENGTH:
        raise InvalidRunName(f"--run-name is {len(name)} characters long: at most {RUN_NAME_MAX_LENGTH}")
    if _RUN_NAME.fullmatch(name) is None:
        raise InvalidRunName(
            f"--run-name {name!r}: use only letters, digits, '.', '_' and '-', not starting with a dot "
            "(a run name is one folder under save/ and tensorboard/, never a path)"
        )
    return name


def check_folder_can_be_used(folder: Path, named_by: str) -> None:
    """RunFolderError naming the option or setting (`named_by`) when `folder` is not a folder this process can write
    in, nor can become one: a file on its path, or no write permission where it would be made."""
    existing = next(path for path in (folder, *folder.parents) if path.exists())
    if not existing.is_dir():
        raise RunFolderError(f"{named_by} {folder}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        action = "write in it" if existing == folder else f"make it ({existing} is not writable)"
        raise RunFolderError(f"{named_by} {folder}: this user cannot {action}")


# -------------------------------------------------------------------------------------------------- lock
class RunLock:
    """An exclusive lock on `run_dir/.lock`, released by `release()` or by the kernel when the process dies.

    The lock file is never deleted (deleting a lock file lets two holders lock two different files)."""

    def __init__(self, run_dir: Path, fd: int):
        self.run_dir = run_dir
        self.path = run_dir / LOCK_FILE
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, run_dir: str | Path) -> RunLock:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / LOCK_FILE
        # no O_TRUNC: a trainer that is refused must not erase the holder's pid
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            if not _try_lock(fd):
                raise RunLocked(run_dir, _read_pid(fd))
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, f"{os.getpid()}\n".encode())
        except BaseException:
            os.close(fd)
            raise
        return cls(run_dir, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            _unlock(fd)
        finally:
            os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


_WINDOWS_LOCK_OFFSET = 1 << 20  # msvcrt locks byte ranges: lock one far past the pid, so others can still read it


def _try_lock(fd: int) -> bool:
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True
    import msvcrt  # pragma: no cover - Windows

    os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
    try:
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except OSError:
        return False
    return True


def _unlock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return
    import msvcrt  # pragma: no cover - Windows

    os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
    msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)


def _read_pid(fd: int) -> int | None:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 64).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else None
    except (OSError, ValueError):
        return None


# -------------------------------------------------------------------------------------------------- --fresh
def _aside_name(folder: Path, stamp: str) -> Path:
    candidate = folder.with_name(f"{folder.name}.before-fresh-{stamp}")
    n = 1
    while candidate.exists():
        candidate = folder.with_name(f"{folder.name}.before-fresh-{stamp}-{n}")
        n += 1
    return candidate


def move_run_aside(run_dir: Path, tb_run_dir: Path, log: Callable[[str], None] = print) -> list[Path]:
    """`--fresh`, with the run's lock held: everything in `run_dir` but the lock file goes to
    `<run>.before-fresh-<time>/` (the lock stays where it is, held), and `tb_run_dir` is renamed the same way.
    Nothing is deleted. Returns the folders made."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    made = []
    entries = sorted(p for p in run_dir.iterdir() if p.name != LOCK_FILE) if run_dir.is_dir() else []
    if entries:
        backup = _aside_name(run_dir, stamp)
        backup.mkdir(parents=True)
        for entry in entries:
            os.replace(entry, backup / entry.name)
        made.append(backup)
        log(f"--fresh: previous {run_dir} moved to {backup}")
    if tb_run_dir.exists():
        backup = _aside_name(tb_run_dir, stamp)
        os.replace(tb_run_dir, backup)
        made.append(backup)
        log(f"--fresh: previous {tb_run_dir} moved to {backup}")
    return made


# -------------------------------------------------------------------------------------------------- live config
def install_live_config(run_dir: Path, config_text: str | None) -> tuple[Path, bool]:
    """The run's live config `run_dir/config_live.py`. If it exists (a resumed run) it is kept as it is;
    otherwise `config_text` (the --config file's whole text) is written there atomically. Returns (path, created)."""
    path = Path(run_dir) / LIVE_CONFIG
    if path.exists():
        return path, False
    if config_text is None:
        raise RunFolderError(f"{path} does not exist and no config was given to start the run from")
    atomic_write(path, lambda f: f.write(config_text.encode()))
    return path, True


# -------------------------------------------------------------------------------------------------- signals
class StopSignals:
    """SIGINT (Ctrl-C) and SIGTERM (`kill`) handled the same way.

    Modes: "raise" (start-up: the first signal raises KeyboardInterrupt wherever the trainer is),
    "flag" (the training loop: the first signal sets `requested`, the loop ends at its next pass) and
    "shutdown" (stopping and final save: every signal is ignored, with a line on stderr). `defer()` holds signals
    back (deferred_signals.py) until the loop starts or shutdown begins, then hands them to the mode of that moment.
    """

    SIGNALS = STOP_SIGNALS

    def __init__(self):
        self.requested: str | None = None  # the name of the first signal received
        self.mode = "raise"
        self._previous: dict = {}
        self._deferred: DeferredSignals | None = None

    def install(self) -> StopSignals:
        for signum in self.SIGNALS:
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._handle)
        return self

    def restore(self) -> None:
        self._end_deferral()
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._previous.clear()

    def defer(self) -> None:
        """Until start_loop (or begin_shutdown) a signal is only noted, then handled as it would have been (e.g. while
        child processes are spawned: an exception in the middle of handing a child its start-up data would leave it
        with half of it)."""
        if self.mode == "raise" and self._deferred is None:
            self._deferred = DeferredSignals(self.SIGNALS).start()

    def start_loop(self) -> None:
        """From now on a signal is only noted; raises KeyboardInterrupt if one came during start-up already (a
        deferred one is handled here, in "raise" mode)."""
        self._end_deferral()
        self.mode = "flag"
        if self.requested:
            raise KeyboardInterrupt

    def begin_shutdown(self) -> None:
        self.mode = "shutdown"
        self._end_deferral()  # a signal deferred until now is ignored, with its line

    def _end_deferral(self) -> None:
        deferred, self._deferred = self._deferred, None
        if deferred is not None:
            deferred.end()

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.mode == "shutdown" or self.requested:
            _write_stderr(f"[learner] {name} received while stopping: ignored, the final save goes on\n")
            return
        self.requested = name
        if self.mode == "raise":
            self.mode = "shutdown"  # a second signal while start-up unwinds is ignored
            raise KeyboardInterrupt
        _write_stderr(f"[learner] {name} received: stopping after this pass of the loop\n")


def _write_stderr(text: str) -> None:
    # os.write, not print: a handler that prints while the main thread is inside print() would fail
    # with "reentrant call"
    try:
        os.write(2, text.encode())
    except OSError:
        pass
