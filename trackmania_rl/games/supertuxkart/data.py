"""SuperTuxKart's data: where Debian puts it, and the folder the project prepares for the game to read.

pysupertuxkart2 0.7.4 (module `pystk2`, the game's 1.5 code) reads its data from `$SUPERTUXKART_DATADIR/data/`; without
that variable it downloads the game's sources into ~/.cache/PySuperTuxKart2/, which cannot work offline and is never
wanted here. Debian's `supertuxkart-data` (1.4) has every track, but the 1.5 code refuses a data folder without the
marker file `supertuxkart.1.5` and the skin `skins/classic`. So the project prepares its own folder (`prepare`): `data/`
holds a symbolic link to each entry of Debian's folder, the marker, and `skins/` of links with `classic` standing in as
`peach`. The game's process (games/supertuxkart/process.py) is started with SUPERTUXKART_DATADIR set to it, and the
game's own settings and caches kept beside it (`game_environment`): the user sets nothing by hand.

The folder: `$XDG_CACHE_HOME/trackmania_rl/supertuxkart` (~/.cache/trackmania_rl/supertuxkart by default), made by
`python -m trackmania_rl.games.supertuxkart.setup`. Standard library only: the trainer's process may import it.
"""

from __future__ import annotations

import os
from pathlib import Path

DEBIAN_DATA = Path("/usr/share/games/supertuxkart/data")  # Debian's supertuxkart-data
DEBIAN_PACKAGE = "supertuxkart-data"
VERSION_MARKER = "supertuxkart.1.5"  # the data folder the 1.5 code accepts has this file
CLASSIC_SKIN = "classic"  # the skin the 1.5 code loads; Debian's 1.4 data has none of that name
CLASSIC_STAND_IN = "peach"
SETUP_COMMAND = "python -m trackmania_rl.games.supertuxkart.setup"


class GameDataMissing(RuntimeError):
    """The prepared data folder is missing or broken; the message says the command that makes it."""


def project_folder() -> Path:
    """Everything the project keeps for the game: the prepared data (root/), the game's settings and caches."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "trackmania_rl" / "supertuxkart"


def game_root(folder: Path | None = None) -> Path:
    """The folder SUPERTUXKART_DATADIR names: the one above the prepared `data/`."""
    return (folder or project_folder()) / "root"


def prepare(source: Path = DEBIAN_DATA, folder: Path | None = None) -> Path:
    """Make (or bring up to date) the prepared data folder from the game's data in `source`; returns the game root.

    Repeatable: links are replaced, links to entries `source` no longer has are removed, nothing else is touched."""
    source = Path(source).resolve()
    if not (source / "tracks").is_dir() or not (source / "skins" / CLASSIC_STAND_IN).is_dir():
        raise GameDataMissing(f"{source} does not hold SuperTuxKart's data (tracks/ and skins/{CLASSIC_STAND_IN}/)")
    root = game_root(folder)
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    entries = {entry.name for entry in source.iterdir()}
    for name in entries - {"skins"}:
        _link(data / name, source / name)
    skins = data / "skins"
    if skins.is_symlink():  # an older layout: a link to the whole folder
        skins.unlink()
    skins.mkdir(exist_ok=True)
    skin_names = {entry.name for entry in (source / "skins").iterdir()}
    for name in skin_names:
        _link(skins / name, source / "skins" / name)
    _link(skins / CLASSIC_SKIN, source / "skins" / CLASSIC_STAND_IN)
    for folder_, keep in ((data, entries | {VERSION_MARKER}), (skins, skin_names | {CLASSIC_SKIN})):
        for entry in folder_.iterdir():
            if entry.is_symlink() and entry.name not in keep:
                entry.unlink()
    (data / VERSION_MARKER).write_text(f"The data folder pysupertuxkart2 (SuperTuxKart 1.5's code) accepts: links to {source}\n")
    return root


def _link(path: Path, target: Path) -> None:
    if path.is_symlink() or path.is_file():
        if path.is_symlink() and Path(os.readlink(path)) == target:
            return
        path.unlink()
    path.symlink_to(target)


def prepared_root(folder: Path | None = None) -> Path:
    """The game root, checked: GameDataMissing (naming the setup command) if it is not prepared or its links are broken."""
    root = game_root(folder)
    data = root / "data"
    needed = (data / VERSION_MARKER, data / "tracks", data / "skins" / CLASSIC_SKIN, data / "karts")
    missing = [str(path) for path in needed if not path.exists()]  # exists() follows the links: a dangling one is missing
    if missing:
        raise GameDataMissing(
            f"SuperTuxKart's data is not prepared ({', '.join(missing)} missing): run `{SETUP_COMMAND}` "
            f"(it installs Debian's {DEBIAN_PACKAGE} where needed and prepares {root})"
        )
    return root


def game_environment(folder: Path | None = None) -> dict[str, str]:
    """The environment variables of the game's process: the prepared data, and the game's own settings, caches and
    runtime folder kept in the project's folder (a player's own SuperTuxKart settings cannot change its races)."""
    folder = folder or project_folder()
    runtime = folder / "runtime"
    runtime.mkdir(parents=True, exist_ok=True)
    runtime.chmod(0o700)  # the runtime folder must be private, or SDL complains
    return {
        "SUPERTUXKART_DATADIR": str(prepared_root(folder)),
        "XDG_CONFIG_HOME": str(folder / "config"),
        "XDG_CACHE_HOME": str(folder / "cache"),
        "XDG_DATA_HOME": str(folder / "share"),
        "XDG_RUNTIME_DIR": str(runtime),
    }
