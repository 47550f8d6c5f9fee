"""The game's process, from the side of the process that drives it (a collector, an evaluation): `GameProcess`.

The game runs in a process of its own (child.py says why and what it answers). It is started with subprocess, not
multiprocessing: collectors are daemonic processes, and those may not start multiprocessing children. The two talk
over a socket pair through multiprocessing's Connection (the answers are pickled by our own child, never by anyone
else). Its output goes to an unnamed temporary file, whose end is quoted when it dies (the game says why there).
Standard library only: the game's module is imported by the child alone.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

from trackmania_rl.games.supertuxkart.data import game_environment

CHILD_MODULE = "trackmania_rl.games.supertuxkart.child"
START_TIMEOUT_S = 120.0  # pystk2.init takes ~1 s; a loaded machine, much more
CLOSE_TIMEOUT_S = 10.0
OUTPUT_QUOTED = 1_500  # characters of the game's last output in a death's message
_TERMINAL_CODES = re.compile(r"\x1b\[[0-9;]*m")  # the game colours its log lines


class GameProcessDied(RuntimeError):
    """The game's process is gone (it exited, was killed, or did not answer in time and was killed)."""


class GameProcessError(RuntimeError):
    """A request failed in the game's process (it raised); the process lives on."""


class GameProcess:
    """The game's process, started at construction (its answer to the start: `info`, the game's karts and tracks)."""

    def __init__(self, folder: Path | None = None):
        environment = game_environment(folder)
        parent_end, child_end = socket.socketpair()
        self._output = tempfile.TemporaryFile()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", CHILD_MODULE, str(child_end.fileno())],
                pass_fds=(child_end.fileno(),),
                env={**os.environ, **environment},
                stdin=subprocess.DEVNULL,
                stdout=self._output,
                stderr=subprocess.STDOUT,
            )
        finally:
            child_end.close()
        self._connection = Connection(parent_end.detach())
        self.closed = False
        self.info = self._answer(START_TIMEOUT_S, "start")

    @property
    def pid(self) -> int:
        return self.process.pid

    def request(self, kind: str, timeout_s: float, **arguments):
        """The answer to one request. GameProcessDied if the process is gone or gave no answer within `timeout_s` (it
        is killed then); GameProcessError if the request raised there."""
        if self.closed:
            raise GameProcessDied("the game's process was closed")
        try:
            self._connection.send((kind, arguments))
        except OSError:  # a broken pipe: it is gone
            raise self._died(f"request {kind!r}") from None
        return self._answer(timeout_s, kind)

    def _answer(self, timeout_s: float, kind: str):
        deadline = time.monotonic() + timeout_s
        while not self._connection.poll(min(1.0, max(0.0, deadline - time.monotonic()))):
            if self.process.poll() is not None:
                break  # the connection's end is read below
            if time.monotonic() >= deadline:
                self.process.kill()
                raise self._died(f"request {kind!r}: no answer within {timeout_s:.0f} s, killed")
        try:
            status, value = self._connection.recv()
        except (EOFError, OSError):
            raise self._died(f"request {kind!r}") from None
        if status == "error":
            raise GameProcessError(f"the game's process could not do {kind!r}: {value}")
        return value

    def _died(self, what: str) -> GameProcessDied:
        try:
            code = self.process.wait(timeout=CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        output = self._last_output()
        self._close_files()
        return GameProcessDied(f"the game's process (pid {self.pid}) died during {what}, exit status {code}; its last output: {output}")

    def _last_output(self) -> str:
        try:
            self._output.seek(0, 2)
            size = self._output.tell()
            self._output.seek(max(0, size - OUTPUT_QUOTED))
            text = self._output.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return "(unreadable)"
        lines = [line for line in _TERMINAL_CODES.sub("", text).splitlines() if line.strip() and not line.startswith("[info")]
        return " | ".join(lines[-6:]) or "(none)"

    def close(self) -> None:
        """End the process: asked to, then killed if it does not within CLOSE_TIMEOUT_S."""
        if self.closed:
            return
        try:
            self._connection.send(("close", {}))
        except OSError:
            pass
        try:
            self.process.wait(timeout=CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._close_files()

    def _close_files(self) -> None:
        self.closed = True
        for file in (self._connection, self._output):
            try:
                file.close()
            except OSError:
                pass
