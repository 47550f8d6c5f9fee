"""A SuperTuxKart model evaluated as a user does it: scripts/evaluate.py --tracks against the game's AI, scripts/watch.py
--track, on the real game with a tiny untrained network saved as a model folder (weights and settings.json). Races are
capped at 25 s of game time (supertuxkart_native_time_cap_ms, which caps the AI's races too): the AI finishes olivermath
(~18 s at difficulty 3) within it, and not minigolf reversed (~33 s)."""

import json
import subprocess
import sys

import pytest
import torch

from tests.games.supertuxkart.conftest import KART_CONFIG
from trackmania_rl.agents.iqn import make_network
from trackmania_rl.config.loader import REPO_ROOT, load_config
from trackmania_rl.config.values import settings_json
from trackmania_rl.evaluation.against_ai import compare_with_ai, with_ai_times
from trackmania_rl.evaluation.video import action_labels
from trackmania_rl.games import float_layout_for
from trackmania_rl.games.base import MapSpec
from trackmania_rl.learner.checkpoint import SETTINGS, WEIGHTS_ONLINE

pytestmark = pytest.mark.supertuxkart

CAP_MS = 25_000
TRACKS = "olivermath,minigolf:reverse"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A model folder: a tiny network's weights and the settings they go with (the races capped at 25 s)."""
    folder = tmp_path_factory.mktemp("kart_model")
    cfg = load_config(KART_CONFIG).replace(
        conv_layers=[(8, 4, 2), (8, 4, 2)],
        dense_hidden_dimension=32,
        float_hidden_dim=16,
        iqn_embedding_dimension=16,
        supertuxkart_native_time_cap_ms=CAP_MS,
    )
    torch.manual_seed(0)
    torch.save(make_network(cfg, float_layout_for(cfg), len(cfg.inputs), "cpu").state_dict(), folder / WEIGHTS_ONLINE)
    (folder / SETTINGS).write_text(settings_json(cfg))
    return folder


def _run(script, *args):
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / script), *map(str, args)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=900
    )


def _lines(result):
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_evaluate_races_each_track_and_the_games_ai_on_it(model, game):
    lines = _lines(_run("evaluate.py", "--weights", model / WEIGHTS_ONLINE, "--tracks", TRACKS))
    races, summary = lines[:-1], lines[-1]
    assert [(r["map"], r["track"], r["reverse"], r["difficulty"]) for r in races] == [
        ("olivermath", "olivermath", False, 3),
        ("minigolf:reverse", "minigolf", True, 3),
    ]
    for race in races:  # the untrained model drives until the cap ends its race
        assert race["rules"] == "native" and not race["finished"] and race["lap_time_s"] is None and race["lap_time_ratio"] is None
        assert race["end_reason"] == "time_cap" and race["n_actions"] == CAP_MS // 100
    # one AI race each, capped as the model's: its lap on olivermath is the game's own time of that race
    olivermath, minigolf = races
    expected = game.ai_race(MapSpec("olivermath", 0), time_cap_ms=CAP_MS)
    assert olivermath["ai_lap_times_s"] == [expected["race_time_ms"] / 1000] == [olivermath["ai_lap_time_s"]]
    assert 15 < olivermath["ai_lap_time_s"] < 25 and minigolf["ai_lap_times_s"] == [None] and minigolf["ai_lap_time_s"] is None
    assert summary["kind"] == "summary" and summary["maps"] == ["olivermath", "minigolf:reverse"] and summary["races"] == 2
    assert (summary["ai_finished"], summary["compared_with_ai"], summary["faster_than_ai"]) == (1, 0, 0)
    assert summary["difficulty"] == 3 and summary["ai_races"] == 1 and summary["game"] == "supertuxkart"


@pytest.mark.slow
def test_another_difficulty_several_ai_races_and_workers(model):
    lines = _lines(_run("evaluate.py", "--run", model, "--tracks", "olivermath", "--difficulty", "2", "--ai-races", "2", "--workers", "2"))
    (race,) = lines[:-1]
    # both the model's race and the AI's at difficulty 2, where the AI's lap varies with the race's seed
    assert race["difficulty"] == 2 and lines[-1]["difficulty"] == 2 and len(race["ai_lap_times_s"]) == 2
    assert race["ai_lap_time_s"] == min(race["ai_lap_times_s"]) and 18 < race["ai_lap_time_s"] < 25


def test_a_track_that_cannot_be_raced_and_the_wrong_options_are_refused_before_any_race(model):
    weights = model / WEIGHTS_ONLINE
    arena = _run("evaluate.py", "--weights", weights, "--tracks", "olivermath,stadium")
    assert arena.returncode == 2 and "'stadium' is a arena track" in arena.stderr and arena.stdout == ""
    seeds = _run("evaluate.py", "--weights", weights, "--seeds", "0-1")
    assert seeds.returncode == 2 and "whose maps are named tracks: use --tracks" in seeds.stderr and seeds.stdout == ""
    car = _run("evaluate.py", "--weights", REPO_ROOT / "models" / "carracing_default" / "weights.torch", "--tracks", "olivermath")
    assert car.returncode == 2 and "this model plays carracing, whose maps are track seeds: use --seeds" in car.stderr
    watched = _run("watch.py", "--weights", weights, "--seed", "3", "--out", model / "never.gif")
    assert watched.returncode == 2 and "use --track" in watched.stderr and not (model / "never.gif").exists()


def test_watch_renders_a_race_on_a_track(model, tmp_path):
    from PIL import Image

    video = tmp_path / "lap.gif"
    (record,) = _lines(_run("watch.py", "--weights", model / WEIGHTS_ONLINE, "--track", "olivermath", "--out", video, "--height", "120"))
    assert record["map"] == "olivermath" and record["frames"] == record["n_actions"] == CAP_MS // 100
    with Image.open(video) as gif:
        assert gif.n_frames == record["frames"] and gif.size == (record["width"], record["height"])


def test_the_videos_action_labels_name_the_karts_controls(kart_cfg):
    labels = action_labels(kart_cfg)
    assert labels[:5] == ["gas", "gas L", "gas R", "gas L drift", "gas R drift"] and labels[6] == "gas L nitro"
    assert action_labels(kart_cfg.replace(action_set=["rescue", "coast", "brake+right"])) == ["rescue", "coast", "brake R"]


def test_the_ratio_to_the_ais_best_lap_and_the_tracks_faster_than_it():
    def race(name, lap):
        return {"map": name, "lap_time_s": lap}

    records = [
        with_ai_times(race("a", 30.0), [31.0, 29.0, None]),  # slower than the AI's best of its three
        with_ai_times(race("b", 18.0), [20.0]),
        with_ai_times(race("c", None), [20.0]),  # the model did not finish: not compared
        with_ai_times(race("d", 40.0), [None]),  # nor when the AI did not
    ]
    assert [r["ai_lap_time_s"] for r in records] == [29.0, 20.0, 20.0, None]
    assert records[0]["lap_time_ratio"] == pytest.approx(30 / 29) and records[1]["lap_time_ratio"] == pytest.approx(0.9)
    assert records[2]["lap_time_ratio"] is None and records[3]["lap_time_ratio"] is None
    summary = compare_with_ai(records)
    counts = (summary["faster_than_ai"], summary["faster_than_ai_maps"], summary["compared_with_ai"], summary["ai_finished"])
    assert counts == (1, ["b"], 2, 3)
    assert summary["mean_lap_time_ratio"] == pytest.approx((30 / 29 + 0.9) / 2)
    assert summary["worst_lap_time_ratio"] == pytest.approx(30 / 29)
