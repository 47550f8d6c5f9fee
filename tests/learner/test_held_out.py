"""Held-out evaluation during training (learner/held_out.py): greedy races on tracks never trained on, the best
model by their mean, the log line per evaluation, weights kept at given minutes. Real CarRacing races, short."""

import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch

from tests.helpers import SHORT_RACES, write_config
from trackmania_rl.agents.iqn import load_network
from trackmania_rl.config.live import LiveConfig
from trackmania_rl.config.loader import ConfigError, load_config
from trackmania_rl.config.values import read_settings
from trackmania_rl.evaluation.evaluate import resolve_checkpoint
from trackmania_rl.games import float_layout_for
from trackmania_rl.learner.checkpoint import BEST, BEST_JSON, SETTINGS, WEIGHTS_ONLINE
from trackmania_rl.learner.held_out import HELD_OUT_LOG, HELD_OUT_WEIGHTS, HeldOutEvaluation, _Snapshot
from trackmania_rl.learner.learner import Learner

# the model shipped from 2026-11-28 until its one-hour run with the missed-tile penalty: its known races below
KNOWN_WEIGHTS = Path(__file__).resolve().parents[2] / "models" / "carracing_fast_2026-11-28" / "weights.torch"
HELD_OUT = SHORT_RACES + "held_out_seeds = [100, 101]\nheld_out_eval_period_s = 60\nkeep_weights_at_minutes = [1, 2]\n"
BY_TRAINING_RULES = HELD_OUT + 'held_out_rules = "training"\n'


def _learner(tmp_path, config=BY_TRAINING_RULES):
    messages = []
    live = LiveConfig(write_config(tmp_path, config), log=messages.append)
    learner = Learner(live, float_layout_for(live.current), torch.device("cpu"), tmp_path / "run", log=messages.append)
    return learner, messages


def _evaluate(held_out, learner) -> dict | None:
    """One evaluation of the online weights now, its record awaited."""
    held_out.start(learner)
    return held_out.finish(learner, timeout_s=120)


def test_evaluations_are_logged_and_the_best_weights_kept(tmp_path):
    learner, messages = _learner(tmp_path)
    held_out = HeldOutEvaluation(tmp_path / "run", "carracing", messages.append)
    try:
        assert not held_out.due(learner)  # the first one comes one period into the run
        learner.wall_seconds_at_start = 61.0
        assert held_out.due(learner)
        first = _evaluate(held_out, learner)
        assert not held_out.due(learner)  # the next one a period later
        assert first["seeds"] == [100, 101] and first["races"] == 2
        # its races end by the training rules (the config's cut-offs), and every record says so
        assert first["rules"] == "training"
        assert "by the training rules" in next(m for m in messages if "held-out evaluation at minute" in m)
        assert 0.0 <= first["mean_tile_coverage"] <= 1.0 and first["std_native_score"] >= 0.0
        best = tmp_path / "run" / BEST
        record = json.loads((best / BEST_JSON).read_text())
        # the default selection: the mean minus 10 points per percent of the races below 800 (these short races all are)
        below = sum(score < 800.0 for score in first["native_scores"])
        assert len(first["native_scores"]) == 2 and first["races_below_bar"] == below and first["score_bar"] == 800.0
        assert first["selection_score"] == pytest.approx(first["mean_native_score"] - 10.0 * 100.0 * below / 2)
        assert record["score"] == first["selection_score"] and record["previous_score"] is None
        assert record["mean_native_score"] == first["mean_native_score"] and "per percent of races below 800" in record["metric"]
        # every evaluation's weights are kept beside best/, with their record
        kept = sorted((tmp_path / "run" / HELD_OUT_WEIGHTS).iterdir())
        assert [f"{HELD_OUT_WEIGHTS}/{k.name}" for k in kept] == [first["weights_folder"]]
        assert (kept[0] / WEIGHTS_ONLINE).read_bytes() == (best / WEIGHTS_ONLINE).read_bytes()
        assert json.loads((kept[0] / "held_out.json").read_text())["native_scores"] == first["native_scores"]
        assert record["rules"] == "training" and "training rules" in record["metric"]
        assert read_settings(best / SETTINGS).settings() == learner.cfg.settings()
        assert resolve_checkpoint(run=best).config == best / SETTINGS  # a model folder evaluation can use as it is
        first_weights = (best / WEIGHTS_ONLINE).read_bytes()

        # other weights scoring lower do not replace the best; the log gets a line either way
        learner.stats.held_out_best_score = first["selection_score"] + 1_000.0
        with torch.no_grad():
            next(learner.online.parameters()).add_(1.0)
        learner.wall_seconds_at_start = 121.0
        second = _evaluate(held_out, learner)
        assert (best / WEIGHTS_ONLINE).read_bytes() == first_weights
        lines = [json.loads(line) for line in (tmp_path / "run" / HELD_OUT_LOG).read_text().splitlines()]
        assert [line["mean_native_score"] for line in lines] == [first["mean_native_score"], second["mean_native_score"]]
        assert [line["rules"] for line in lines] == ["training", "training"]
        assert lines[1]["minute"] > 2.0 and learner.stats.held_out_evaluations == 2

        # a better score replaces it, with the weights that were evaluated
        learner.stats.held_out_best_score = second["selection_score"] - 1.0
        _evaluate(held_out, learner)
        assert (best / WEIGHTS_ONLINE).read_bytes() != first_weights
        assert json.loads((best / BEST_JSON).read_text())["previous_score"] == second["selection_score"] - 1.0
        assert any("best model so far" in m for m in messages)
        assert sum("held-out evaluation at minute" in m for m in messages) == 3
    finally:
        held_out.close()


def _races(scores) -> list[dict]:
    """Race records as the evaluation process answers them (rollouts/greedy.py race_record), with these scores."""
    records = []
    for i, score in enumerate(scores):
        finished = score >= 800
        records.append(
            {
                "kind": "race",
                "seed": 100 + i,
                "rules": "native",
                "finished": finished,
                "race_time_s": 14.0 if finished else None,
                "native_score": score,
                "progress_fraction": 1.0,
                "tile_coverage": 1.0 if finished else 0.5,
                "every_tile": finished,
                "lap_time_s": 14.0 if finished else None,
                "end_reason": "finished" if finished else "time_limit",
                "n_actions": 200,
                "game_time_s": 14.0,
            }
        )
    return records


@pytest.mark.parametrize("penalty, chosen", [(10.0, "steady"), (0.0, "one crash")])
def test_best_weighs_the_races_below_the_bar_by_the_tail_penalty(tmp_path, penalty, chosen):
    """Two evaluations of 10 races: steady weights (every race 925, mean 925) and weights with the higher mean but one
    race in 10 lost (nine at 1000, one at 300: mean 930). The tail penalty keeps the steady ones (930 - 10 x 10 = 830);
    the plain mean takes the other."""
    learner, messages = _learner(tmp_path, HELD_OUT + f"best_tail_penalty = {penalty}\n")
    held_out = HeldOutEvaluation(tmp_path / "run", "carracing", messages.append)
    try:
        evaluations = {"steady": [925.0] * 10, "one crash": [1000.0] * 9 + [300.0]}  # means 925 and 930
        for minute, (name, scores) in enumerate(evaluations.items(), start=1):
            with torch.no_grad():
                next(learner.online.parameters()).add_(1.0)  # other weights each time
            snapshot = _Snapshot(held_out._copy_of_online(learner), learner.cfg, float(minute), 0, 0, 0)
            entry = held_out._record(learner, snapshot, _races(scores), 1.0)
            assert entry["races_below_bar"] == scores.count(300.0)
            if name == chosen:
                chosen_weights = torch.load(
                    tmp_path / "run" / HELD_OUT_WEIGHTS / f"minute-{minute:05.1f}" / WEIGHTS_ONLINE, weights_only=True
                )
        best = torch.load(tmp_path / "run" / BEST / WEIGHTS_ONLINE, weights_only=True)
        assert all(torch.equal(best[k], chosen_weights[k]) for k in best)
        expected = 925.0 if chosen == "steady" else 930.0
        assert json.loads((tmp_path / "run" / BEST / BEST_JSON).read_text())["score"] == pytest.approx(expected)
    finally:
        held_out.close()


def test_training_goes_on_while_the_races_play_and_the_snapshot_is_what_is_recorded(tmp_path):
    learner, messages = _learner(tmp_path)
    held_out = HeldOutEvaluation(tmp_path / "run", "carracing", messages.append)
    try:
        learner.wall_seconds_at_start = 61.0
        learner.stats.frames_played, learner.stats.batches_done = 5_000, 300
        snapshot = {k: v.clone() for k, v in learner.online.state_dict().items()}
        minute_before = learner.wall_seconds() / 60
        held_out.start(learner)
        minute_after = learner.wall_seconds() / 60
        assert held_out.in_progress and held_out.worker.pid is not None
        # the learner trains on while the process plays: these changes are not what it evaluates
        with torch.no_grad():
            for p in learner.online.parameters():
                p.add_(1.0)
        learner.stats.frames_played, learner.stats.batches_done = 9_000, 700
        learner.wall_seconds_at_start = 200.0
        assert not held_out.due(learner)  # one at a time, however late
        entry = None
        for _ in range(600):
            entry = held_out.collect(learner, wait_s=0.1)
            if entry is not None:
                break
        assert entry is not None and not held_out.in_progress, messages
        assert (entry["frames_played"], entry["batches_done"]) == (5_000, 300)
        # the minute of the snapshot (recorded to 3 decimals), not of the answer: 200 s by then
        assert round(minute_before, 3) <= entry["minute"] <= round(minute_after, 3), (minute_before, entry["minute"], minute_after)
        saved = torch.load(tmp_path / "run" / BEST / WEIGHTS_ONLINE, weights_only=True)
        assert all(torch.equal(saved[k], snapshot[k]) for k in snapshot)
        assert learner.stats.held_out_evaluations == 1 and held_out.due(learner)  # 200 s: the second one is due
    finally:
        held_out.close()
    assert held_out.worker.pid is None


def test_a_killed_evaluation_process_is_reported_and_the_next_evaluation_gets_a_new_one(tmp_path):
    learner, messages = _learner(tmp_path)
    held_out = HeldOutEvaluation(tmp_path / "run", "carracing", messages.append)
    try:
        held_out.start(learner)
        killed = held_out.worker.pid
        os.kill(killed, signal.SIGKILL)
        assert held_out.collect(learner, wait_s=30) is None and not held_out.in_progress
        assert "held-out evaluation skipped: the evaluation process ended (exit code -9); training goes on" in messages
        assert learner.stats.held_out_evaluations == 1 and not (tmp_path / "run" / HELD_OUT_LOG).exists()
        entry = _evaluate(held_out, learner)
        assert entry is not None and entry["races"] == 2 and held_out.worker.pid != killed
    finally:
        held_out.close()


def test_a_hung_evaluation_process_is_stopped_after_its_deadline_and_training_goes_on(tmp_path, monkeypatch):
    from trackmania_rl.learner import held_out as held_out_module

    monkeypatch.setattr(held_out_module, "START_SLACK_S", 2.0)  # 2 races of 1.6 s game time: a 5.2 s deadline
    learner, messages = _learner(tmp_path)
    held_out = HeldOutEvaluation(tmp_path / "run", "carracing", messages.append)
    now = [0.0]
    held_out.worker.clock = lambda: now[0]  # the evaluation's seconds, moved by the test only
    try:
        held_out.start(learner)
        deadline = held_out_module.answer_deadline_s(learner.cfg)
        assert deadline == pytest.approx(5.2)
        hung = held_out.worker.pid
        os.kill(hung, signal.SIGSTOP)  # alive, never answering
        # the run's main loop, a short look each pass: up to the deadline the evaluation is waited for
        for seconds in (0.0, deadline / 2, deadline):
            now[0] = seconds
            assert held_out.collect(learner, wait_s=0.1) is None and held_out.in_progress, (seconds, messages)
            assert held_out.worker.pid == hung and os.path.exists(f"/proc/{hung}")
        assert learner.stats.held_out_evaluations == 0 and not any("skipped" in m for m in messages)
        # past it, the next look stops it
        now[0] = deadline + 0.001
        assert held_out.collect(learner, wait_s=0.1) is None
        assert not held_out.in_progress and learner.stats.held_out_evaluations == 1
        assert "held-out evaluation skipped: no answer after 5 s (its process was stopped); training goes on" in messages
        assert held_out.worker.pid is None and not os.path.exists(f"/proc/{hung}")
    finally:
        held_out.close()


def test_the_evaluation_process_plays_at_a_lower_priority_than_the_learner(tmp_path):
    """Its races take the cycles training leaves: its niceness is the learner's plus NICENESS (at most 19)."""
    from trackmania_rl.learner.held_out_worker import NICENESS

    learner, _ = _learner(tmp_path)
    held_out = HeldOutEvaluation(tmp_path / "run", "carracing", lambda m: None)
    try:
        held_out.start(learner)
        expected = min(19, os.getpriority(os.PRIO_PROCESS, 0) + NICENESS)
        niceness = None
        for _ in range(300):  # the process sets it as it starts: up to 30 s on a loaded machine
            niceness = os.getpriority(os.PRIO_PROCESS, held_out.worker.pid)
            if niceness == expected:
                break
            time.sleep(0.1)
        assert niceness == expected
    finally:
        held_out.close()


def test_a_stop_while_the_races_play_records_nothing(tmp_path):
    learner, _ = _learner(tmp_path)
    held_out = HeldOutEvaluation(tmp_path / "run", "carracing", lambda m: None)
    try:
        held_out.start(learner)
        assert held_out.in_progress
        held_out.close()  # what a run stopped by a signal does with the evaluation playing
        assert not held_out.in_progress and held_out.collect(learner, wait_s=1.0) is None
        assert not (tmp_path / "run" / HELD_OUT_LOG).exists() and not (tmp_path / "run" / BEST).exists()
        assert learner.stats.held_out_evaluations == 0
    finally:
        held_out.close()


def test_weights_are_kept_once_at_each_minute(tmp_path):
    learner, messages = _learner(tmp_path)
    held_out = HeldOutEvaluation(tmp_path / "run", "carracing", messages.append)
    learner.wall_seconds_at_start = 130.0  # past minutes 1 and 2
    assert held_out.weights_due(learner) == [1, 2]
    for minute in held_out.weights_due(learner):
        held_out.keep_weights(learner, minute)
    assert held_out.weights_due(learner) == []
    kept = tmp_path / "run" / "at-minute-001"
    assert (kept / WEIGHTS_ONLINE).is_file() and (tmp_path / "run" / "at-minute-002" / SETTINGS).is_file()
    assert resolve_checkpoint(run=kept).weights == kept / WEIGHTS_ONLINE


def test_held_out_tracks_that_the_map_cycle_trains_on_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"`held_out_seeds` holds tracks the map_cycle trains on \(\[1500, 45000\]"):
        load_config(write_config(tmp_path, "held_out_seeds = [1_500, 45_000, 200]\n"), game_backend="carracing")
    with pytest.raises(ConfigError, match="each from 0 to 49999"):
        load_config(write_config(tmp_path, "held_out_seeds = [500_000]\n"), game_backend="carracing")
    # a blind map (not stored) may share them
    ok = "held_out_seeds = [5]\nmap_cycle = [('train', range(1_000, 40_000), True, True), ('blind', range(0, 10), False, False)]\n"
    assert load_config(write_config(tmp_path, ok), game_backend="carracing").held_out_seeds == [5]


@pytest.mark.parametrize(
    "settings, refused",
    [
        ("test_seeds = [range(600_000, 600_100), [1_234]]\n", r"`test_seeds` holds tracks the map_cycle trains on \(\[1234\]"),
        ("validation_seeds = [range(40_000, 60_000)]\n", r"`validation_seeds` holds tracks the map_cycle trains on \(\[40000, 40001"),
        ("validation_seeds = [range(600_050, 600_060)]\n", r"`validation_seeds` and `test_seeds` share tracks \(\[600050"),
        ("test_seeds = [[150, 600_000]]\n", r"`held_out_seeds` and `test_seeds` share tracks \(\[150\]"),
        ("validation_seeds = [[199]]\n", r"`held_out_seeds` and `validation_seeds` share tracks \(\[199\]"),
        ("test_seeds = [range(600_000, 600_100), range(600_099, 600_200)]\n", "two of its sets share tracks"),
        ("test_seeds = []\n", "`test_seeds` = \\[\\] is invalid"),
        ("test_seeds = range(600_000, 600_100)\n", "is invalid: expected a list of 1 to 10 sets"),
    ],
)
def test_a_seed_has_one_role_at_most(tmp_path, settings, refused):
    """Trained, held out (best/), validation (settings) and test (figures, chosen on nothing): a config mixing them is
    refused, naming the settings and the first shared tracks."""
    with pytest.raises(ConfigError, match=refused):
        load_config(write_config(tmp_path, settings), game_backend="carracing")
    ok = "validation_seeds = [range(300_000, 300_010)]\ntest_seeds = [range(600_000, 600_100), [900_000, 900_007]]\n"
    cfg = load_config(write_config(tmp_path, ok), game_backend="carracing")
    assert cfg.test_seeds == [range(600_000, 600_100), [900_000, 900_007]]


def test_by_the_native_rules_the_records_and_the_best_say_so_and_a_change_of_rules_restarts_the_best(tmp_path):
    """The default: races ended as CarRacing-v3 ends an episode (no cut-off, its 20 s time limit); every record, the log
    line and best.json name the rules, with the share of races that touched every tile and the lap time. A best chosen
    by other rules does not compare: the first evaluation by the new rules replaces it. A known model drives: on
    track 100 it touches every tile (lap 11.7 s), on 101 it crosses the line having missed one (lap 13.6 s) and drives
    on to the time limit (`python scripts/evaluate.py --weights models/carracing_fast_2026-11-28/weights.torch --seeds 100-101`)."""
    learner, messages = _learner(tmp_path, "held_out_seeds = [100, 101]\nheld_out_eval_period_s = 60\n")  # its network
    load_network(learner.online, KNOWN_WEIGHTS)
    assert learner.cfg.held_out_rules == "native"
    held_out = HeldOutEvaluation(tmp_path / "run", "carracing", messages.append)
    try:
        learner.stats.held_out_best_score, learner.stats.held_out_best_rules = 10_000.0, "training"  # unbeatable, other rules
        entry = _evaluate(held_out, learner)
        assert entry["rules"] == "native" and entry["races"] == 2
        assert entry["every_tile_fraction"] == entry["finished_fraction"] == 0.5  # by the native rules, finished is every tile
        assert 11.0 < entry["mean_lap_time_s"] < 14.0  # both laps, the one that missed a tile too
        line = next(m for m in messages if "held-out evaluation at minute" in m)
        assert "by the native rules" in line and "50 % every tile" in line and "laps " in line
        assert any("now by the native rules" in m for m in messages)
        record = json.loads((tmp_path / "run" / BEST / BEST_JSON).read_text())
        assert record["rules"] == "native" and record["score"] == entry["mean_native_score"]
        assert (learner.stats.held_out_best_score, learner.stats.held_out_best_rules) == (entry["mean_native_score"], "native")
        logged = json.loads((tmp_path / "run" / HELD_OUT_LOG).read_text().splitlines()[-1])
        assert logged["rules"] == "native" and logged["every_tile_fraction"] == entry["every_tile_fraction"]
    finally:
        held_out.close()
