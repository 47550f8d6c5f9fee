"""Held-out evaluation during training, the best model by it, and weights kept at given minutes.

Every `held_out_eval_period_s` of the run's training time, the learner takes a snapshot of its online weights (the
training thread paused for the copy alone) and a process of its own (learner/held_out_worker.py) plays one greedy
race with them on each held-out map while the learner goes on taking races and training (the game's backend says
which: its `held_out_maps`; CarRacing's and a Gymnasium env's are `held_out_seeds`, tracks the map cycle never stores,
all below 50,000 while final test tracks are 500,000 and up; SuperTuxKart's the maps of `supertuxkart_held_out_tracks`);
the record, when it comes, carries the minute, frames and batches of the snapshot. The races end by the config's `held_out_rules`
(games/base.py): "native", CarRacing-v3's own episode rules, those of published scores and of scripts/evaluate.py's
default (every tile touched, off the playfield, or the 20 s time limit), or "training", the collectors' (the finish
line, the config's overall and no-progress cut-offs; the only rules before 2026-11-28); every record says which. The
summary (mean and spread of the native score, finished share, share of races that touched every tile, mean lap
time, tile coverage, the worst race and how many scored below `tail_score_bar`) goes to TensorBoard
(`held_out_<rules>/...`), to `save/<run>/held_out.jsonl` (one line per evaluation, with the minute and every race's
score; on named maps also the maps and each race's lap time), and to the run's counters. An evaluation's selection
score is its mean minus `best_tail_penalty` points per percent of its races below `tail_score_bar` (a mean of 10
tracks was blind to a crash in 1 race of 30); when it beats the best so far, the evaluated weights become the best
model folder `save/<run>/best/` (weights, the settings they were taken under, best.json): the best model is the best
by the rules its races were played by. With `held_out_keep_weights` every evaluation's weights are kept too, in
`save/<run>/held-out/minute-MMM/`, so that another choice can be made and checked afterwards (scripts/select_best.py).
At each minute of `keep_weights_at_minutes` the online weights are kept as the model folder
`save/<run>/at-minute-MMM/`. An evaluation still playing when the time limit ends the run is waited for (up to
FINISH_WAIT_S); a stop by signal drops it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from trackmania_rl.agents.iqn import make_network
from trackmania_rl.config.values import config_to_values, settings_json
from trackmania_rl.games.backend import game_backend as backend_named
from trackmania_rl.games.base import RULES_NATIVE, MapSpec
from trackmania_rl.learner import checkpoint as ckpt
from trackmania_rl.learner.checkpoint import BEST, BEST_JSON, SETTINGS, WEIGHTS_ONLINE
from trackmania_rl.learner.held_out_worker import HeldOutWorker
from trackmania_rl.rollouts.greedy import summarise

HELD_OUT_LOG = "held_out.jsonl"
FINISH_WAIT_S = 120.0  # for the evaluation still playing at the time limit (10 races take 7-20 s)
START_SLACK_S = 60.0  # an evaluation's allowance beyond its races' game time (process start, a loaded machine)
HELD_OUT_WEIGHTS = "held-out"  # save/<run>/held-out/minute-MMM/: each evaluation's weights (held_out_keep_weights)
# an evaluation's figures (rollouts/greedy.py summarise), in its record and in TensorBoard
SUMMARY_FIGURES = (
    "finished_fraction",
    "mean_native_score",
    "std_native_score",
    "median_native_score",
    "worst_native_score",
    "races_below_bar",
    "every_tile_fraction",
    "mean_lap_time_s",
    "mean_tile_coverage",
)
NATIVE_RACE_LIMIT_S = 20.0  # CarRacing-v3's TimeLimit: 1000 physics steps of 20 ms (games/car_racing/env.py native_step_limit)


def held_out_maps(cfg) -> list[MapSpec]:
    """The maps an evaluation races, by the config's game (its backend's `held_out_maps`)."""
    return backend_named(cfg.game_backend).held_out_maps(cfg)


def answer_deadline_s(cfg) -> float:
    """How long an evaluation may play before it is taken for hung: every race as long as its rules let it last (the
    overall cut-off; by the native rules the game's own limit, CarRacing-v3's unless its backend says another, whichever
    is longer), in game time played no faster than real time (CarRacing plays ~10x faster), plus START_SLACK_S."""
    race_s = cfg.cutoff_rollout_if_race_not_finished_within_duration_ms / 1000
    if cfg.held_out_rules == RULES_NATIVE:
        native_limit = backend_named(cfg.game_backend).native_time_limit_s
        race_s = max(race_s, NATIVE_RACE_LIMIT_S if native_limit is None else native_limit(cfg))
    return START_SLACK_S + len(held_out_maps(cfg)) * race_s


def minute_folder(minute: float) -> str:
    return f"at-minute-{minute:03g}"  # at-minute-030, at-minute-7.5


def selection_score(summary: dict, tail_penalty: float) -> float:
    """What `best/` is chosen by: the mean native score minus `tail_penalty` points per percent of the races below the
    bar (the plain mean when the penalty is 0 or no bar was counted)."""
    mean = summary["mean_native_score"]
    below = summary.get("races_below_bar")
    if not tail_penalty or below is None:
        return mean
    return mean - tail_penalty * 100.0 * below / summary["races"]


@dataclass
class _Snapshot:
    """What an evaluation played: the weights (a CPU network) and the run's figures at the moment they were taken."""

    network: torch.nn.Module
    cfg: object
    minute: float
    frames_played: int
    batches_done: int
    policy_version: int


class HeldOutEvaluation:
    def __init__(self, run_dir: Path, game_backend: str, log: Callable[[str], None], logger=None):
        self.run_dir = Path(run_dir)
        self.game_backend = game_backend
        self.log = log
        self.logger = logger
        self.worker = HeldOutWorker(game_backend)  # its process starts at the first evaluation
        self._snapshot: _Snapshot | None = None  # of the evaluation being played

    # ------------------------------------------------------------------------------------- schedule
    def due(self, learner) -> bool:
        period = learner.cfg.held_out_eval_period_s
        return period > 0 and not self.in_progress and learner.wall_seconds() >= (learner.stats.held_out_evaluations + 1) * period

    @property
    def in_progress(self) -> bool:
        return self.worker.busy

    def weights_due(self, learner) -> list[float]:
        """Minutes of `keep_weights_at_minutes` reached and not yet kept."""
        minutes = learner.wall_seconds() / 60
        return [m for m in learner.cfg.keep_weights_at_minutes if m <= minutes and m not in learner.stats.weights_kept_at_minutes]

    # ------------------------------------------------------------------------------------ evaluation
    def start(self, learner) -> None:
        """Hand a snapshot of the online weights to the evaluation process; `collect` records its result. The
        caller keeps the weights still while this copies them (the training thread paused). A process that cannot
        be started (no memory, no process slots) skips this evaluation, logged: training goes on."""
        cfg = learner.cfg
        network = self._copy_of_online(learner)
        self._snapshot = _Snapshot(
            network, cfg, learner.wall_seconds() / 60, learner.stats.frames_played, learner.stats.batches_done, learner.stats.policy_version
        )
        weights = {name: tensor.numpy() for name, tensor in network.state_dict().items()}
        try:
            self.worker.submit(config_to_values(cfg), weights, held_out_maps(cfg))
        except OSError as e:
            self._skip(learner, f"its process could not be started ({e})")

    def collect(self, learner, wait_s: float = 0.0) -> dict | None:
        """The evaluation's record once its races are played (waiting up to `wait_s`): logged, appended to the
        run's held_out.jsonl, and its weights saved as the best model if they beat the best so far. None while
        it plays, and when it failed or hung past `answer_deadline_s` (logged, its process stopped; training goes
        on, the next evaluation starts a new process)."""
        answer = self.worker.result(wait_s)
        if answer is None:
            deadline = answer_deadline_s(self._snapshot.cfg) if self._snapshot is not None else None
            if deadline is not None and self.worker.seconds_busy > deadline:
                self.cancel()
                self._skip(learner, f"no answer after {deadline:.0f} s (its process was stopped)")
            return None
        snapshot = self._snapshot
        if answer.failure is not None:
            self._skip(learner, answer.failure)
            return None
        self._snapshot = None
        learner.stats.held_out_evaluations += 1
        return self._record(learner, snapshot, answer.records, answer.seconds)

    def finish(self, learner, timeout_s: float) -> dict | None:
        """At the end of a run (or to wait for one evaluation): the evaluation still playing, recorded if it ends
        within `timeout_s`, else dropped. Collected in short waits, so a process that died is noticed at once."""
        deadline = time.perf_counter() + timeout_s
        while self.in_progress and time.perf_counter() < deadline:
            entry = self.collect(learner, wait_s=0.1)
            if entry is not None:
                return entry
        if self.in_progress:
            self.log(f"the held-out evaluation still playing after {timeout_s:.0f} s at the end of the run was dropped")
            self.cancel()
        return None

    def cancel(self) -> None:
        self.worker.cancel()
        self._snapshot = None

    def _skip(self, learner, why: str) -> None:
        self._snapshot = None
        learner.stats.held_out_evaluations += 1  # the next one a period later, not at once
        self.log(f"held-out evaluation skipped: {why}; training goes on")

    def _record(self, learner, snapshot: _Snapshot, records: list, seconds: float) -> dict:
        summary = summarise(records, snapshot.cfg.tail_score_bar)
        score = selection_score(summary, snapshot.cfg.best_tail_penalty)
        entry = {
            "minute": round(snapshot.minute, 3),
            "frames_played": snapshot.frames_played,
            "batches_done": snapshot.batches_done,
            "policy_version": snapshot.policy_version,
            "eval_seconds": round(seconds, 2),
            "rules": summary["rules"],
            "races": summary["races"],
            **{k: summary[k] for k in SUMMARY_FIGURES},
            "score_bar": summary["score_bar"],
            "tail_penalty": snapshot.cfg.best_tail_penalty,
            "selection_score": score,
            "seeds": summary["seeds"],
            "native_scores": [record["native_score"] for record in records],
            # where its weights are kept (held_out_keep_weights), relative to the run folder
            "weights_folder": f"{HELD_OUT_WEIGHTS}/minute-{snapshot.minute:05.1f}" if snapshot.cfg.held_out_keep_weights else None,
        }
        if "maps" in summary:  # named maps (SuperTuxKart's tracks): which, and each one's lap time
            entry.update(maps=summary["maps"], lap_times_s=[record["lap_time_s"] for record in records])
        learner.stats.held_out_latest_score = summary["mean_native_score"]
        if learner.stats.held_out_best_score is not None and learner.stats.held_out_best_rules != entry["rules"]:
            # scores of other rules do not compare: the first evaluation by these rules replaces the best
            self.log(
                f"held-out evaluation now by the {entry['rules']} rules (the best so far, {learner.stats.held_out_best_score:.1f}, was by "
                f"the {learner.stats.held_out_best_rules} rules): best/ is chosen by the {entry['rules']} rules from now on"
            )
            learner.stats.held_out_best_score = None
        self._append(entry)
        if self.logger is not None:
            figures = {k: entry[k] for k in (*SUMMARY_FIGURES, "selection_score", "minute", "eval_seconds") if entry[k] is not None}
            self.logger.scalars(f"held_out_{entry['rules']}", figures, snapshot.frames_played)
        best = learner.stats.held_out_best_score  # by the same rules (reset above otherwise)
        laps = "" if summary["mean_lap_time_s"] is None else f", laps {summary['mean_lap_time_s']:.2f} s"
        every_tile = "" if summary["every_tile_fraction"] is None else f", {100 * summary['every_tile_fraction']:.0f} % every tile"
        tail = f", worst {summary['worst_native_score']:.1f}"
        if summary["races_below_bar"] is not None:
            tail += f", {summary['races_below_bar']} below {summary['score_bar']:g} (selection score {score:.1f})"
        self.log(
            f"held-out evaluation at minute {snapshot.minute:.1f}: mean native score {summary['mean_native_score']:.1f} "
            f"± {summary['std_native_score']:.1f} on {summary['races']} held-out maps ({'tracks' if 'maps' in summary else 'seeds'}) "
            f"by the {summary['rules']} rules, "
            f"{100 * summary['finished_fraction']:.0f} % finished{every_tile}{laps}{tail} "
            f"({entry['eval_seconds']:.0f} s, {learner.stats.batches_done - snapshot.batches_done} batches trained meanwhile; "
            f"best so far {'-' if best is None else f'{best:.1f}'})"
        )
        if snapshot.cfg.held_out_keep_weights:
            self._keep_evaluated(snapshot, entry)
        if best is None or score > best:
            self._save_best(learner, snapshot, entry, best)
        return entry

    def _keep_evaluated(self, snapshot: _Snapshot, entry: dict) -> None:
        """The evaluated weights as save/<run>/held-out/minute-MMM/, with their settings and the evaluation's record."""
        folder = self.run_dir / entry["weights_folder"]  # minute-005.0: in order when listed
        writers = {
            WEIGHTS_ONLINE: ckpt.torch_writer(snapshot.network.state_dict()),
            SETTINGS: ckpt.text_writer(settings_json(snapshot.cfg)),
            "held_out.json": ckpt.json_writer(entry),
        }
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            ckpt.replace_folder(folder, writers, f"weights of the held-out evaluation at minute {snapshot.minute:.1f}")
        except OSError as e:  # a full disk must not stop training
            self.log(f"could not keep the evaluated weights in {folder} (training goes on): {e}")

    def keep_weights(self, learner, minute: float) -> Path | None:
        """The online weights now, as the model folder save/<run>/at-minute-MMM/."""
        folder = self.run_dir / minute_folder(minute)
        record = {"minute": minute, "wall_minutes": learner.wall_seconds() / 60, "frames_played": learner.stats.frames_played}
        writers = {
            WEIGHTS_ONLINE: ckpt.torch_writer(self._copy_of_online(learner).state_dict()),
            SETTINGS: ckpt.text_writer(settings_json(learner.cfg)),
            "weights.json": ckpt.json_writer(record),
        }
        learner.stats.weights_kept_at_minutes.append(minute)  # tried once, whatever happens: no retry loop on a full disk
        try:
            ckpt.replace_folder(folder, writers, f"weights at minute {minute:g}")
        except OSError as e:
            self.log(f"could not keep the weights at minute {minute:g} (training goes on): {e}")
            return None
        self.log(f"weights at minute {minute:g} kept in {folder}")
        return folder

    def close(self) -> None:
        self.cancel()
        self.worker.close()

    # --------------------------------------------------------------------------------------- helpers
    def _copy_of_online(self, learner) -> torch.nn.Module:
        """A CPU copy of the online weights: what is evaluated and saved is exactly one set of weights."""
        network = make_network(learner.cfg, learner.layout, learner.n_actions, "cpu")
        network.load_state_dict({k: v.detach().to("cpu") for k, v in learner.online.state_dict().items()})
        return network

    def _append(self, entry: dict) -> None:
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            with open(self.run_dir / HELD_OUT_LOG, "a") as f:
                f.write(json.dumps(entry, allow_nan=False) + "\n")
        except (OSError, ValueError) as e:  # a full disk must not stop training: the figures are also in TensorBoard
            self.log(f"could not append to {self.run_dir / HELD_OUT_LOG}: {e}")

    def _save_best(self, learner, snapshot: _Snapshot, entry: dict, previous: float | None) -> None:
        penalty = entry["tail_penalty"]
        tail = ""
        if penalty and entry["score_bar"] is not None:
            tail = f" minus {penalty:g} points per percent of races below {entry['score_bar']:g}"
        maps = f"(tracks) {', '.join(entry['maps'])}" if "maps" in entry else f"(seeds) {entry['seeds'][0]}..{entry['seeds'][-1]}"
        record = {
            "score": entry["selection_score"],
            "metric": f"mean native score{tail} of greedy races on the held-out maps {maps}, ended by the {entry['rules']} rules",
            "mean_native_score": entry["mean_native_score"],
            "races_below_bar": entry["races_below_bar"],
            "worst_native_score": entry["worst_native_score"],
            "rules": entry["rules"],
            "previous_score": previous,
            "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **{k: entry[k] for k in ("minute", "frames_played", "batches_done", "policy_version", "std_native_score", "finished_fraction")},
            "seeds": entry["seeds"],
            **({"maps": entry["maps"], "lap_times_s": entry["lap_times_s"]} if "maps" in entry else {}),
        }
        writers = {
            WEIGHTS_ONLINE: ckpt.torch_writer(snapshot.network.state_dict()),
            SETTINGS: ckpt.text_writer(settings_json(snapshot.cfg)),  # the settings the weights were taken under
            BEST_JSON: ckpt.json_writer(record),
        }
        try:
            ckpt.replace_folder(self.run_dir / BEST, writers, "best model save")
        except OSError as e:
            self.log(f"best model save failed, the previous best/ is kept: {e}")
            return
        learner.stats.held_out_best_score = entry["selection_score"]
        learner.stats.held_out_best_rules = entry["rules"]
        previous_text = "none" if previous is None else f"{previous:.1f}"
        self.log(
            f"best model so far saved to {self.run_dir / BEST}: held-out selection score {entry['selection_score']:.1f} "
            f"(mean {entry['mean_native_score']:.1f}; previous best {previous_text})"
        )
