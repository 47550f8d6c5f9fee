"""Hot reload: the config of a running process, re-read from its file when it changes.

An edit that does not parse or fails validation is refused and the previous config kept; edits to
settings that need a restart are reported once and not applied.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trackmania_rl.config.loader import build_config, load_config, read_python_file
from trackmania_rl.config.schema import RESTART_ONLY, SETTINGS, ConfigError


class LiveConfig:
    """The config of a running process, re-read from its file on `reload()`.

    An edit that does not parse or fails validation is refused and the previous config kept; edits to
    settings that need a restart are reported once and not applied.
    """

    def __init__(self, path: str | Path, game_backend: str = "carracing", log: Callable[[str], None] = print):
        self.path = Path(path)
        self.game_backend = game_backend
        self.log = log
        self.current = load_config(self.path, game_backend=game_backend)
        self._mtime = self._read_mtime()
        self._last_error: str | None = None
        self._held_back: dict = {}

    def _read_mtime(self):
        try:
            return self.path.stat().st_mtime_ns
        except FileNotFoundError:
            return None

    def reload(self) -> bool:
        """Re-read the file if it changed. Returns True when new values were applied."""
        mtime = self._read_mtime()
        if mtime == self._mtime:
            return False
        self._mtime = mtime
        try:
            fresh = build_config(
                read_python_file(self.path), game_backend=self.game_backend, inputs=self.current.inputs_file(), source=str(self.path)
            )
        except ConfigError as e:
            message = f"config edit refused, keeping the previous config: {e}"
            if message != self._last_error:
                self.log(message)
            self._last_error = message
            return False
        self._last_error = None
        values = fresh.settings()
        held_back = {}
        for name in RESTART_ONLY:
            if values[name] != getattr(self.current, name):
                held_back[name] = values[name]
                values[name] = getattr(self.current, name)
        for name, value in held_back.items():
            if self._held_back.get(name, object()) != value:
                self.log(f"config setting `{name}` = {value!r} needs a restart: not applied to this run")
        self._held_back = held_back
        changed = [n for n in SETTINGS if values[n] != getattr(self.current, n)]
        if not changed:
            return False
        self.current = build_config(values, game_backend=self.game_backend, inputs=self.current.inputs_file(), source=str(self.path))
        self.log(f"config reloaded: {', '.join(changed)} changed")
        return True
