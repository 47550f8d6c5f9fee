"""Held-out evaluation during training, the best model by it, and weights kept at given minutes.

Every `held_out_eval_period_s` of the run's training time, the learner plays one greedy race on each track of
`held_out_seeds` (tracks the map cycle never stores; all below 50,000, while final test tracks are 500,000 and
up) with its online weights of that moment, in its own process: the time counts inside the run. The races end by
the training rules (HELD_OUT_RULES: the finish line, the config's overall and no-progress cut-offs; games/base.py),
not by CarRacing-v3's native episode rules that scripts/evaluate.py uses by default, so that the curve measures the
races the agent trains on and stays comparable across runs; every record says so. The summary
(mean and spread of the native score, finished share, tile coverage) goes to TensorBoard (`held_out/...`), to
`save/<run>/held_out.jsonl` (one line per evaluation, with the minute), and to the run's counters. When the mean
beats the best so far, the evaluated weights become the best model folder `save/<run>/best/` (weights, the
settings in force, best.json). At each minute of `keep_weights_at_minutes` the online weights are kept as the
model folder `save/<run>/at-minute-MMM/`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

from trackmania_rl.agents.iqn import make_network
from trackmania_rl.config.values import settings_json
from trackmania_rl.games import make_game_instance
from trackmania_rl.games.base import RULES_TRAINING, GameCrashed
from trackmania_rl.learner import checkpoint as ckpt
from trackmania_rl.learner.checkpoint import BEST, BEST_JSON, SETTINGS, WEIGHTS_ONLINE
from trackmania_rl.rollouts.greedy import GreedyPolicy, evaluate_seeds, summarise

HELD_OUT_LOG = "held_out.jsonl"
HELD_OUT_RULES = RULES_TRAINING  # how its races end (see the module docstring)


def minute_folder(minute: float) -> str:
    return f"at-minute-{minute:03g}"  # at-minute-030, at-minute-7.5


class HeldOutEvaluation:
    def __init__(self, run_dir: Path, game_backend: str, log: Callable[[str], None], logger=None):
        self.run_dir = Path(run_dir)
        self.game_backend = game_backend
        self.log = log
        self.logger = logger
        self.game = None  # created at the first evaluation (a CarRacing instance in the learner's process)

    # ------------------------------------------------------------------------------------- schedule
    def due(self, learner) -> bool:
        period = learner.cfg.held_out_eval_period_s
        return period > 0 and learner.wall_seconds() >= (learner.stats.held_out_evaluations + 1) * period

    def weights_due(self, learner) -> list[float]:
        """Minutes of `keep_weights_at_minutes` reached and not yet kept."""
        minutes = learner.wall_seconds() / 60
        return [m for m in learner.cfg.keep_weights_at_minutes if m <= minutes and m not in learner.stats.weights_kept_at_minutes]

    # ------------------------------------------------------------------------------------ evaluation
    def run(self, learner, stop_requested: Callable[[], bool] = lambda: False) -> dict | None:
        """Evaluate the online weights now. None when the game failed (logged; training goes on) or when a stop
        was requested between two races (nothing recorded: the run is ending)."""
        cfg = learner.cfg
        start = time.perf_counter()
        network = self._copy_of_online(learner)
        records = []
        try:
            if self.game is None:
                self.game = make_game_instance(cfg, self.game_backend, HELD_OUT_RULES)
            for record in evaluate_seeds(self.game, GreedyPolicy(cfg, network, learner.layout), cfg.held_out_seeds):
                records.append(record)
                if stop_requested():
                    return None
        except GameCrashed as e:
            self.log(f"held-out evaluation skipped: the game failed twice on one track ({e}); training goes on")
            self.game = None
            learner.stats.held_out_evaluations += 1  # next one a period later, not at once
            return None
        summary = summarise(records)
        minute = learner.wall_seconds() / 60
        entry = {
            "minute": round(minute, 3),
            "frames_played": learner.stats.frames_played,
            "batches_done": learner.stats.batches_done,
            "policy_version": learner.stats.policy_version,
            "eval_seconds": round(time.perf_counter() - start, 2),
            "rules": summary["rules"],
            **{k: summary[k] for k in ("races", "finished_fraction", "mean_native_score", "std_native_score", "mean_tile_coverage")},
            "seeds": summary["seeds"],
        }
        learner.stats.held_out_evaluations += 1
        learner.stats.held_out_latest_score = summary["mean_native_score"]
        self._append(entry)
        if self.logger is not None:
            shown = ("mean_native_score", "std_native_score", "finished_fraction", "mean_tile_coverage", "minute", "eval_seconds")
            self.logger.scalars("held_out", {k: entry[k] for k in shown}, learner.stats.frames_played)
        best = learner.stats.held_out_best_score
        self.log(
            f"held-out evaluation at minute {minute:.1f}: mean native score {summary['mean_native_score']:.1f} "
            f"± {summary['std_native_score']:.1f} on {summary['races']} tracks by the {summary['rules']} rules, "
            f"{100 * summary['finished_fraction']:.0f} % finished "
            f"({entry['eval_seconds']:.0f} s; best so far {'-' if best is None else f'{best:.1f}'})"
        )
        if best is None or summary["mean_native_score"] > best:
            self._save_best(learner, network, entry, best)
        return entry

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
        if self.game is not None:
            self.game.close()
            self.game = None

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

    def _save_best(self, learner, network, entry: dict, previous: float | None) -> None:
        record = {
            "score": entry["mean_native_score"],
            "metric": f"mean native score of greedy races on the held-out tracks {entry['seeds'][0]}..{entry['seeds'][-1]}, "
            f"ended by the {entry['rules']} rules",
            "rules": entry["rules"],
            "previous_score": previous,
            "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **{k: entry[k] for k in ("minute", "frames_played", "batches_done", "policy_version", "std_native_score", "finished_fraction")},
            "seeds": entry["seeds"],
        }
        writers = {
            WEIGHTS_ONLINE: ckpt.torch_writer(network.state_dict()),
            SETTINGS: ckpt.text_writer(settings_json(learner.cfg)),
            BEST_JSON: ckpt.json_writer(record),
        }
        try:
            ckpt.replace_folder(self.run_dir / BEST, writers, "best model save")
        except OSError as e:
            self.log(f"best model save failed, the previous best/ is kept: {e}")
            return
        learner.stats.held_out_best_score = entry["mean_native_score"]
        score = entry["mean_native_score"]
        previous_text = "none" if previous is None else f"{previous:.1f}"
        self.log(f"best model so far saved to {self.run_dir / BEST}: held-out mean {score:.1f} (previous best {previous_text})")
