"""Shared by the fault tests: real trainer processes on a tiny config, and snapshots of folders."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAIN = REPO_ROOT / "scripts" / "train.py"


def train_command(tmp_path: Path, run_name: str, *extra: str) -> list[str]:
    return [
        sys.executable, str(TRAIN),
        "--config", str(tmp_path / "config.py"),
        "--save-dir", str(tmp_path / "save"),
        "--tensorboard-dir", str(tmp_path / "tensorboard"),
        "--run-name", run_name,
        "--no-status-line",
        *extra,
    ]  # fmt: skip


def run_train(tmp_path: Path, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TRAIN), *args], capture_output=True, text=True, cwd=tmp_path, timeout=timeout_s)


class Trainer:
    """scripts/train.py in its own process; stdout and stderr collected through a pipe by a thread."""

    def __init__(self, command: list[str], cwd: Path, env: dict | None = None):
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd, text=True, env=env)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)

    def log(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: str, timeout_s: float) -> re.Match:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            match = re.search(pattern, self.log())
            if match:
                return match
            if self.process.poll() is not None:
                self._reader.join(5)
                match = re.search(pattern, self.log())
                if match:
                    return match
                break
            time.sleep(0.2)
        raise AssertionError(f"`{pattern}` did not appear in the training log:\n{self.log()[-4000:]}")

    def signal(self, signum: int) -> None:
        os.kill(self.process.pid, signum)

    def finish(self, timeout_s: float) -> int:
        try:
            code = self.process.wait(timeout_s)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(10)
        self._reader.join(10)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._reader.join(10)


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under `folder` (relative path -> sha256), to show nothing changed."""
    result = {}
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file():
            result[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return result


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
