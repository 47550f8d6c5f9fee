"""Set SuperTuxKart up for the trainer: `python -m trackmania_rl.games.supertuxkart.setup [--data DIR] [--no-check]`.

1. The game's data: Debian's `supertuxkart-data` (/usr/share/games/supertuxkart/data), installed with apt-get when it
   is missing and apt-get can run (as root); otherwise the message says the command to run. `--data DIR`: another copy
   of the game's data folder (one holding tracks/ and skins/).
2. The folder the game reads it from (data.py `prepare`), printed: nothing else to set by hand.
3. The game's module (pysupertuxkart2, the `supertuxkart` extra), then one short race in the game's own process as a
   check (`--no-check` skips it).
Repeatable: a second run changes nothing that is in place. Exit status 0 when the game can race, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from trackmania_rl.games.supertuxkart.data import DEBIAN_DATA, DEBIAN_PACKAGE, GameDataMissing, prepare, project_folder

CHECK_TRACK = "lighthouse"


def install_debian_data() -> str | None:
    """apt-get install the data package; None when done, else why it could not be (the message for the user)."""
    apt = shutil.which("apt-get")
    command = f"apt-get install -y {DEBIAN_PACKAGE}"
    if apt is None:
        return f"{DEBIAN_DATA} is missing and this system has no apt-get: install SuperTuxKart's data and pass its folder with --data DIR"
    if os.geteuid() != 0:
        return f"{DEBIAN_DATA} is missing and apt-get needs root: run `sudo {command}`, then this command again"
    for step in ([apt, "update"], [apt, "install", "-y", DEBIAN_PACKAGE]):
        print("running:", " ".join(step), flush=True)
        if subprocess.run(step, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}).returncode != 0:
            return f"`{' '.join(step)}` failed (its output is above): install {DEBIAN_PACKAGE} by hand, then run this command again"
    return None


def check_race() -> str:
    """One short race in the game's own process: what it saw, in words (raises if the game cannot race)."""
    from trackmania_rl.games.supertuxkart.process import GameProcess

    game = GameProcess()
    try:
        answer = game.request("start", 120.0, track=CHECK_TRACK, reverse=False, laps=1, difficulty=3, kart="tux", seed=0)
        states = game.request("step", 60.0, controls=(1.0, False, 0.0, False, False, False), steps=20)
    finally:
        game.close()
    return (
        f"{CHECK_TRACK}: {len(answer['driveline']['nodes'])} driveline nodes, {answer['driveline']['length']:.0f} m a lap; "
        f"2 s of full throttle reached {states[-1][0]:.1f} s of race time"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None, help=f"the game's data folder (default: Debian's, {DEBIAN_DATA})")
    parser.add_argument("--no-check", action="store_true", help="do not race to check")
    args = parser.parse_args(argv)
    source = args.data or DEBIAN_DATA
    if args.data is None and not (DEBIAN_DATA / "tracks").is_dir():
        why = install_debian_data()
        if why is not None:
            print(f"setup: {why}", file=sys.stderr)
            return 1
    try:
        root = prepare(source)
    except GameDataMissing as e:
        print(f"setup: {e}", file=sys.stderr)
        return 1
    print(
        f"setup: the game reads its data from {root} (links to {Path(source).resolve()}); its settings and caches are in {project_folder()}"
    )
    if importlib.util.find_spec("pystk2") is None:
        print(
            "setup: the game's module is not installed: pip install -e '.[supertuxkart]' (pysupertuxkart2), then run this again",
            file=sys.stderr,
        )
        return 1
    if not args.no_check:
        try:
            print(f"setup: a check race: {check_race()}")
        except Exception as e:  # the game could not race: say so, whatever it was
            print(f"setup: the check race failed: {e}", file=sys.stderr)
            return 1
    print("setup: SuperTuxKart is ready (config_files/supertuxkart.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
