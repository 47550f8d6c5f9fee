"""Hot reload: the config of a running process, re-read from its file when it changes.

An edit that does not parse or fails validation is refused and the previous config kept; edits to
settings that need a restart are reported once and not applied.

A process that (re)starts while its config file is broken would die on it, and a restarted collector would
die again and again. Given `last_good_path`, a LiveConfig keeps there a copy of the last file text that
loaded (written atomically whenever the file loads), and starts from that copy when the file itself is
refused. A file of text rather than values passed by the learner: it needs nothing from the learner,
survives any number of restarts, and is what the user can read and diff against their edit.

A live config holds every setting in force: one that names a `base` (loader.py) is refused, as its base's edits
would change the run unseen.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from trackmania_rl.config.loader import build_config, load_config, read_config_file
from trackmania_rl.config.schema import RESTART_ONLY, SETTINGS, ConfigError


class LiveConfig:
    """The config of a running process, re-read from its file on `reload()`.

    An edit that does not parse or fails validation is refused and the previous config kept; edits to
    settings that need a restart are reported once and not applied. With `last_good_path`, a file refused
    at start is replaced by the last text that loaded (see the module's docstring).
    """

    def __init__(
        self,
        path: str | Path,
        game_backend: str = "carracing",
        log: Callable[[str], None] = print,
        last_good_path: str | Path | None = None,
    ):
        self.path = Path(path)
        self.game_backend = game_backend
        self.log = log
        self.last_good_path = Path(last_good_path) if last_good_path is not None else None
        self._last_error: str | None = None
        self._held_back: dict = {}
        self._mtime = self._read_mtime()
        text = self._read_text()
        try:
            self.current = load_config(self.path, game_backend=game_backend, bases=False)
        except ConfigError as e:
            if self.last_good_path is None or not self.last_good_path.is_file():
                raise
            self.current = load_config(self.last_good_path, game_backend=game_backend, bases=False)  # raises if broken too
            self._last_error = f"config edit refused, keeping the previous config: {e}"
            self.log(f"config file refused ({e}): starting with the last config that loaded, kept in {self.last_good_path}")
        else:
            self._keep_as_last_good(text)

    def _read_text(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except OSError:
            return None

    def _keep_as_last_good(self, text_before: bytes | None) -> None:
        """Store the file's text as the last good one, if it is still the text that just loaded."""
        if self.last_good_path is None or text_before is None or self._read_text() != text_before:
            return  # edited while loading: the next reload sees the change
        tmp = self.last_good_path.with_name(f".{self.last_good_path.name}.tmp{os.getpid()}")
        try:
            if self.last_good_path.is_file() and self.last_good_path.read_bytes() == text_before:
                return
            tmp.write_bytes(text_before)
            os.replace(tmp, self.last_good_path)  # readers see the old copy or the new one, never half
        except OSError as e:
            self.log(f"could not keep a copy of the config in {self.last_good_path}: {e}")
        finally:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:  # its folder gone or unwritable: there is no copy to remove
                pass

    def _read_mtime(self):
        try:
            return self.path.stat().st_mtime_ns
        except OSError:  # gone, its folder replaced by a file or no longer searchable: the reload refuses it
            return None

    def reload(self) -> bool:
        """Re-read the file if it changed. Returns True when new values were applied."""
        mtime = self._read_mtime()
        if mtime == self._mtime:
            return False
        self._mtime = mtime
        text = self._read_text()
        try:
            fresh = build_config(
                read_config_file(self.path, bases=False),
                game_backend=self.game_backend,
                inputs=self.current.inputs_file(),
                source=str(self.path),
            )
        except ConfigError as e:
            message = f"config edit refused, keeping the previous config: {e}"
            if message != self._last_error:
                self.log(message)
            self._last_error = message
            return False
        self._last_error = None
        self._keep_as_last_good(text)
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


def last_good_path_for(config_path: str | Path) -> Path:
    """Where the processes reading `config_path` keep its last good text: beside it, a hidden file."""
    config_path = Path(config_path)
    return config_path.with_name(f".{config_path.stem}.last_good{config_path.suffix}")
