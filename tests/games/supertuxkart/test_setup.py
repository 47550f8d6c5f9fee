"""The set-up of SuperTuxKart (games/supertuxkart/data.py, setup.py): the folder the game reads Debian's data from,
made and made again, and the messages where it cannot be."""

import os
import subprocess
import sys

import pytest

from trackmania_rl.games.supertuxkart.data import (
    DEBIAN_DATA,
    SETUP_COMMAND,
    VERSION_MARKER,
    GameDataMissing,
    game_environment,
    prepare,
    prepared_root,
)

pytestmark = pytest.mark.supertuxkart


def test_the_prepared_folder_links_debians_data_with_the_marker_and_the_classic_skin(tmp_path):
    with pytest.raises(GameDataMissing, match=SETUP_COMMAND):
        prepared_root(tmp_path)  # nothing prepared yet
    root = prepare(DEBIAN_DATA, tmp_path)
    data = root / "data"
    assert (data / VERSION_MARKER).is_file() and prepared_root(tmp_path) == root
    assert os.readlink(data / "tracks") == str(DEBIAN_DATA.resolve() / "tracks")
    assert os.readlink(data / "skins" / "classic") == str(DEBIAN_DATA.resolve() / "skins" / "peach")
    assert {p.name for p in DEBIAN_DATA.iterdir()} | {VERSION_MARKER} == {p.name for p in data.iterdir()}
    # again: the same links; a link to an entry the data no longer has goes, a file of another kind stays
    (data / "gone").symlink_to(DEBIAN_DATA / "no-such-entry")
    (data / "notes.txt").write_text("mine")
    before = {p.name: os.readlink(p) for p in data.iterdir() if p.is_symlink()}
    prepare(DEBIAN_DATA, tmp_path)
    after = {p.name: os.readlink(p) for p in data.iterdir() if p.is_symlink()}
    assert after == {k: v for k, v in before.items() if k != "gone"} and (data / "notes.txt").read_text() == "mine"
    environment = game_environment(tmp_path)
    assert environment["SUPERTUXKART_DATADIR"] == str(root) and environment["XDG_CONFIG_HOME"] == str(tmp_path / "config")
    (data / "tracks").unlink()
    with pytest.raises(GameDataMissing, match="tracks missing"):
        prepared_root(tmp_path)


def test_a_folder_without_the_games_data_is_refused(tmp_path):
    with pytest.raises(GameDataMissing, match="does not hold SuperTuxKart's data"):
        prepare(tmp_path, tmp_path / "prepared")


def _setup(tmp_path, *args):
    environment = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run(
        [sys.executable, "-m", "trackmania_rl.games.supertuxkart.setup", *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_setup_command_prepares_races_and_can_run_again(tmp_path):
    first = _setup(tmp_path)
    assert first.returncode == 0, first.stderr
    root = tmp_path / "cache" / "trackmania_rl" / "supertuxkart" / "root"
    assert f"the game reads its data from {root}" in first.stdout and "a check race: lighthouse: 115 driveline nodes" in first.stdout
    # the game never fetched its own assets: pystk2's download goes to the cache folder the game was given
    assert not list((tmp_path / "cache").rglob("PySuperTuxKart2"))
    again = _setup(tmp_path, "--no-check")
    assert again.returncode == 0 and "ready" in again.stdout
    refused = _setup(tmp_path, "--data", str(tmp_path), "--no-check")
    assert refused.returncode == 1 and "does not hold SuperTuxKart's data" in refused.stderr
