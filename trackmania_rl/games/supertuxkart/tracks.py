"""SuperTuxKart's maps: a race track, driven in its own direction or in reverse, named "track" or "track:reverse".

A MapSpec's `name` is the map ("lighthouse", "lighthouse:reverse"); its `seed` is the race's seed (RaceConfig.seed: our
kart's time trial is deterministic whatever it is; it seeds the game's AI). Which tracks can be raced is read from each
track's own track.xml in the prepared data (no game needed): arenas, soccer fields, cut-scenes and internal tracks
(the overworld, the tutorial) cannot, and a track whose file says reverse="N" has no reverse direction. The game aborts
its process on some of them (an arena has no lap line), so every map is checked here before the game sees it.
Standard library only: the trainer's process may import it.
"""

from __future__ import annotations

import functools
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

REVERSE_SUFFIX = ":reverse"
NOT_RACE_KINDS = ("arena", "soccer", "cutscene", "internal")  # track.xml attributes that mark a track as no race track


class UnraceableMap(ValueError):
    """A map name that names no race track of the data (unknown, an arena, a reverse the track has not)."""


@dataclass(frozen=True)
class KartMap:
    track: str
    reverse: bool = False

    @property
    def name(self) -> str:
        return self.track + (REVERSE_SUFFIX if self.reverse else "")


@dataclass(frozen=True)
class TrackInfo:
    """What a track's track.xml says: why it is no race track (None: it is one) and whether it may be raced in reverse."""

    not_race: str | None
    reversible: bool


def parse_map_name(name) -> KartMap:
    """The map a name means, by its form only ("track" or "track:reverse"); UnraceableMap for another form."""
    if not isinstance(name, str) or not name.removesuffix(REVERSE_SUFFIX).isidentifier():
        raise UnraceableMap(
            f'SuperTuxKart map {name!r}: expected a track\'s name, or it with "{REVERSE_SUFFIX}" (e.g. "lighthouse:reverse")'
        )
    return KartMap(name.removesuffix(REVERSE_SUFFIX), name.endswith(REVERSE_SUFFIX))


@functools.lru_cache(maxsize=4)
def track_infos(root: Path) -> dict[str, TrackInfo]:
    """Every track of the data under game root `root` (data/tracks/*/track.xml), by folder name."""
    infos = {}
    for xml_file in sorted((Path(root) / "data" / "tracks").glob("*/track.xml")):
        attributes = ElementTree.parse(xml_file).getroot().attrib
        kinds = [kind for kind in NOT_RACE_KINDS if attributes.get(kind, "N").upper() == "Y"]
        infos[xml_file.parent.name] = TrackInfo(kinds[0] if kinds else None, attributes.get("reverse", "N").upper() == "Y")
    return infos


def race_tracks(root: Path) -> list[str]:
    """The race tracks of the data, sorted."""
    return [name for name, info in track_infos(Path(root)).items() if info.not_race is None]


def check_map(name, root: Path) -> KartMap:
    """The map `name` names, if it can be raced with the data under game root `root`; UnraceableMap naming it otherwise."""
    kart_map = parse_map_name(name)
    info = track_infos(Path(root)).get(kart_map.track)
    races = ", ".join(race_tracks(root))
    if info is None:
        raise UnraceableMap(
            f"SuperTuxKart map {name!r}: no track {kart_map.track!r} in {Path(root) / 'data' / 'tracks'}; the race tracks: {races}"
        )
    if info.not_race is not None:
        raise UnraceableMap(
            f"SuperTuxKart map {name!r}: {kart_map.track!r} is a {info.not_race} track, not a race track; the race tracks: {races}"
        )
    if kart_map.reverse and not info.reversible:
        raise UnraceableMap(f"SuperTuxKart map {name!r}: track {kart_map.track!r} has no reverse direction (its track.xml)")
    return kart_map


MIN_UNSEEN_TRACKS = 4  # held-out and test tracks together: no run trains on them, in either direction
ROLE_SETTINGS = ("supertuxkart_held_out_tracks", "supertuxkart_test_tracks")  # best/ is chosen on the first; the figure on the second


def check_maps(cfg, root: Path) -> None:
    """UnraceableMap naming the first map of the config's map_cycle, supertuxkart_held_out_tracks or
    supertuxkart_test_tracks that cannot be raced; a held-out or test track that the map cycle trains on, in either
    direction; a track in both roles (the tracks that choose best/ cannot also measure it); fewer than
    MIN_UNSEEN_TRACKS tracks in the two together."""
    for name, *_ in cfg.map_cycle:
        check_map(name, root)
    trained = {parse_map_name(name).track for name, _, _, fill_buffer in cfg.map_cycle if fill_buffer}
    roles: dict[str, str] = {}  # track -> the setting that holds it
    for setting in ROLE_SETTINGS:
        for name in getattr(cfg, setting):
            track = check_map(name, root).track
            if track in trained:
                raise UnraceableMap(
                    f"{setting} holds {name!r}, and the map_cycle trains on track {track!r} "
                    "(a held-out or test track is held out in both directions)"
                )
            other = roles.setdefault(track, setting)
            if other != setting:
                raise UnraceableMap(
                    f"{setting} holds {name!r}, and {other} holds track {track!r} too: a track has one role, in both directions "
                    "(the tracks that choose the weights cannot also measure them)"
                )
    if len(roles) < MIN_UNSEEN_TRACKS:
        held = ", ".join(sorted(roles)) or "none"
        raise UnraceableMap(
            f"supertuxkart_held_out_tracks and supertuxkart_test_tracks hold {len(roles)} track(s) ({held}): at least "
            f"{MIN_UNSEEN_TRACKS} tracks that no run trains on, in either direction, are needed"
        )
