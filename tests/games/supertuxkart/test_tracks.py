"""SuperTuxKart's maps (games/supertuxkart/tracks.py) and the backend's check of a config: which tracks can be raced,
read from the data's track.xml files, and the refusals before any race, each naming the map."""

import pytest

from trackmania_rl.config.schema import ConfigError
from trackmania_rl.games.backend import game_backend
from trackmania_rl.games.supertuxkart.tracks import KartMap, UnraceableMap, check_map, parse_map_name, race_tracks

pytestmark = pytest.mark.supertuxkart

RACE_TRACKS = (
    "abyss black_forest candela_city cocoa_temple cornfield_crossing fortmagma gran_paradiso_island hacienda lighthouse mines "
    "minigolf olivermath ravenbridge_mansion sandtrack scotland snowmountain snowtuxpeak stk_enterprise volcano_island xr591 zengarden"
).split()


def test_the_race_tracks_of_debians_data_are_the_21(kart_root):
    assert race_tracks(kart_root) == RACE_TRACKS


def test_a_map_is_a_track_in_a_direction(kart_root):
    assert parse_map_name("lighthouse") == KartMap("lighthouse", False)
    assert check_map("lighthouse:reverse", kart_root) == KartMap("lighthouse", True)
    assert KartMap("zengarden", True).name == "zengarden:reverse"
    for bad in ("lighthouse:backwards", "", "two words", 3):
        with pytest.raises(UnraceableMap, match="expected a track's name"):
            parse_map_name(bad)


@pytest.mark.parametrize(
    "name, why",
    [
        ("stadium", "'stadium' is a arena track, not a race track"),
        ("icy_soccer_field", "'icy_soccer_field' is a soccer track"),
        ("introcutscene", "'introcutscene' is a cutscene track"),
        ("overworld", "'overworld' is a internal track"),
        ("tutorial:reverse", "'tutorial' is a internal track"),
        ("moon_base", "no track 'moon_base' in"),
    ],
)
def test_a_map_that_is_no_race_is_refused_naming_it(kart_root, name, why):
    with pytest.raises(UnraceableMap, match=why) as error:
        check_map(name, kart_root)
    assert f"SuperTuxKart map {name!r}" in str(error.value) and "the race tracks: abyss, black_forest" in str(error.value)


def test_the_config_check_refuses_an_arena_and_a_held_out_track_that_is_trained(kart_cfg):
    check = game_backend("supertuxkart").check_config
    check(kart_cfg)  # the shipped config: every map races, no held-out track is trained
    arena = kart_cfg.replace(map_cycle=[*kart_cfg.map_cycle, ("stadium", 0, True, True)])
    with pytest.raises(ConfigError, match="'stadium' is a arena track"):
        check(arena)
    trained = kart_cfg.replace(map_cycle=[*kart_cfg.map_cycle, ("xr591:reverse", 0, True, False), ("hacienda:reverse", 0, True, True)])
    with pytest.raises(ConfigError, match="supertuxkart_held_out_tracks holds 'hacienda', and the map_cycle trains on track 'hacienda'"):
        check(trained)  # xr591 raced blind (fill_buffer False) is no training; hacienda reversed is
    with pytest.raises(ConfigError, match="frame_colour"):
        check(kart_cfg.replace(frame_colour=True))


def test_the_config_names_its_held_out_and_test_tracks_and_trains_on_the_others(kart_cfg):
    held_out = {parse_map_name(name).track for name in kart_cfg.supertuxkart_held_out_tracks}
    test = {parse_map_name(name).track for name in kart_cfg.supertuxkart_test_tracks}
    trained = {parse_map_name(name).track for name, _, _, fill_buffer in kart_cfg.map_cycle if fill_buffer}
    assert len(held_out) >= 2 and len(test) >= 3 and not held_out & test and not (held_out | test) & trained
    assert held_out | test | trained == set(RACE_TRACKS)
    assert {name for name, *_ in kart_cfg.map_cycle} == {track + d for track in trained for d in ("", ":reverse")}


def test_a_track_has_one_role_and_at_least_4_are_never_trained(kart_cfg):
    check = game_backend("supertuxkart").check_config
    # a held-out track raced as a test map the other way round: the tracks that chose best/ would measure it
    both = kart_cfg.replace(supertuxkart_test_tracks=[*kart_cfg.supertuxkart_test_tracks, "minigolf:reverse"])
    with pytest.raises(ConfigError, match="supertuxkart_test_tracks holds 'minigolf:reverse', and supertuxkart_held_out_tracks holds"):
        check(both)
    trained = kart_cfg.replace(map_cycle=[*kart_cfg.map_cycle, ("xr591:reverse", 0, True, True)])  # held out both ways
    with pytest.raises(ConfigError, match="supertuxkart_test_tracks holds 'xr591', and the map_cycle trains on track 'xr591'"):
        check(trained)
    three = kart_cfg.replace(supertuxkart_test_tracks=["xr591"])  # hacienda, minigolf and xr591
    with pytest.raises(ConfigError, match=r"hold 3 track\(s\) \(hacienda, minigolf, xr591\): at least 4 tracks"):
        check(three)
    check(three.replace(supertuxkart_test_tracks=["xr591", "snowtuxpeak:reverse"]))  # 4 tracks, one way each: enough
    with pytest.raises(ConfigError, match="`supertuxkart_held_out_tracks` is empty: the held-out evaluation"):
        check(kart_cfg.replace(supertuxkart_held_out_tracks=[], supertuxkart_test_tracks=kart_cfg.supertuxkart_test_tracks + ["hacienda"]))


def test_named_maps_are_the_configs_sets_or_a_list_each_checked(kart_cfg):
    named = game_backend("supertuxkart").named_maps
    assert [m.name for m in named(kart_cfg, "held_out")] == kart_cfg.supertuxkart_held_out_tracks
    tests = named(kart_cfg, "test")
    assert [m.name for m in tests] == kart_cfg.supertuxkart_test_tracks and not any(m.is_explo or m.fill_buffer for m in tests)
    assert [(m.name, m.seed) for m in named(kart_cfg, "lighthouse, zengarden:reverse")] == [("lighthouse", 0), ("zengarden:reverse", 0)]
    for text, message in (("lighthouse,stadium", "'stadium' is a arena track"), ("lighthouse,lighthouse", "named twice"), ("", "''")):
        with pytest.raises(UnraceableMap, match=message):
            named(kart_cfg, text)
    with pytest.raises(UnraceableMap, match="supertuxkart_test_tracks is empty"):
        named(kart_cfg.replace(supertuxkart_test_tracks=[]), "test")
