"""TensorBoard logging of a run: namespaced tags (listed in docs/metrics.md) and a custom-scalars layout.

Every scalar is logged against frames played (actions taken by all collectors). Three namespaces:
`race/` (one point per race), `training/` (learner, aggregated), `pipeline/` (where the time goes).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from torch.utils.tensorboard import SummaryWriter

RACE_KINDS = ("eval_trained", "eval_blind", "explo_trained", "explo_blind")
RACE_FIELDS = ("race_time_s", "finished", "native_score", "furthest_zone", "progress_fraction")
TRAINING_TAGS = (
    "loss",
    "loss_test",
    "grad_norm",
    "q_mean",
    "lr",
    "epsilon",
    "epsilon_boltzmann",
    "gamma",
    "batches_done",
    "nonfinite_steps_skipped",
    "buffer_size",
    "buffer_test_size",
    "replay_age_states",
)
PIPELINE_TAGS = (
    "learner_waiting_percent",
    "learner_training_percent",
    "transitions_learned_per_s",
    "queue_wait_ms",
    "ingest_ms",
    "policy_lag_versions",
    "policy_lag_versions_max",
    "rollouts_dropped_stale",
    "race_time_ratio",
    "collector_restarts",
)


def race_tag(kind: str, field_name: str) -> str:
    return f"race/{kind}/{field_name}"


def custom_scalars_layout() -> dict:
    """Charts that put eval/explo and trained/blind side by side."""
    race_charts = {field_name: ["Multiline", [rf"race/(eval|explo)_(trained|blind)/{field_name}$"]] for field_name in RACE_FIELDS}
    return {
        "Races": race_charts,
        "Training": {
            "loss (train vs hidden test)": ["Multiline", [r"training/loss$", r"training/loss_test$"]],
            "Q and grad norm": ["Multiline", [r"training/q_mean$", r"training/grad_norm$"]],
            "schedules": ["Multiline", [r"training/(lr|epsilon|epsilon_boltzmann|gamma)$"]],
        },
        "Pipeline": {
            "learner time split (%)": ["Multiline", [r"pipeline/learner_(waiting|training)_percent$"]],
            "collector stages (ns per action)": ["Multiline", [r"pipeline/collector_.*_ns_per_action$"]],
            "policy lag (versions)": ["Multiline", [r"pipeline/policy_lag_versions(_max)?$", r"pipeline/rollouts_dropped_stale$"]],
            "replay age (states stored since)": ["Multiline", [r"training/replay_age_states$"]],
            "throughput": ["Multiline", [r"pipeline/transitions_learned_per_s$", r"pipeline/race_time_ratio$"]],
        },
    }


class RunLogger:
    def __init__(self, log_dir: Path, resolved_config: dict | None = None):
        self.writer = SummaryWriter(log_dir=str(log_dir))
        self.writer.add_custom_scalars(custom_scalars_layout())
        if resolved_config is not None:
            text = json.dumps(resolved_config, indent=1, sort_keys=True, default=repr)
            self.writer.add_text("config/resolved", "```\n" + text + "\n```", 0)

    def scalar(self, tag: str, value: float, step: int) -> None:
        self.writer.add_scalar(tag, float(value), step)

    def scalars(self, prefix: str, values: dict, step: int) -> None:
        for name, value in values.items():
            if value is not None:
                self.writer.add_scalar(f"{prefix}/{name}", float(value), step)

    def histogram(self, tag: str, values, step: int) -> None:
        self.writer.add_histogram(tag, np.asarray(values, dtype=np.float64), step)

    def race(self, kind: str, values: dict, step: int) -> None:
        for name, value in values.items():
            self.writer.add_scalar(race_tag(kind, name), float(value), step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
