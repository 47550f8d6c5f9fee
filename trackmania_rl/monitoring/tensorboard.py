"""TensorBoard logging of a run: namespaced tags (listed in docs/metrics.md) and a custom-scalars layout.

Every scalar is logged against frames played (actions taken by all collectors). Three namespaces:
`race/` (one point per race), `training/` (learner, aggregated), `pipeline/` (where the time goes).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from torch.utils.tensorboard import SummaryWriter

from trackmania_rl.monitoring.status_line import print_line

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
    """The run's TensorBoard writer. A write that fails (disk full, the folder removed, the permission lost) pauses the
    logging with one log line, and a new event file is tried every RETRY_S: a run never stops for its logs (the
    points of the pause are lost). The first event file must open: a run that cannot log at all is refused at start."""

    RETRY_S = 60.0

    def __init__(self, log_dir: Path, resolved_config: dict | None = None, log: Callable[[str], None] | None = None):
        self.log_dir = Path(log_dir)
        self._resolved_config = resolved_config
        self._log = log if log is not None else (lambda message: print_line(f"[tensorboard] {message}"))
        self._retry_at = 0.0
        self.writer: SummaryWriter | None = self._open()

    def _open(self) -> SummaryWriter:
        writer = SummaryWriter(log_dir=str(self.log_dir))
        writer.add_custom_scalars(custom_scalars_layout())
        if self._resolved_config is not None:
            text = json.dumps(self._resolved_config, indent=1, sort_keys=True, default=repr)
            writer.add_text("config/resolved", "```\n" + text + "\n```", 0)
        return writer

    def _write(self, method: str, *args) -> None:
        if self.writer is None:
            if time.monotonic() < self._retry_at:
                return
            try:
                self.writer = self._open()
            except Exception:  # noqa: BLE001 - still unwritable: try again later
                self._retry_at = time.monotonic() + self.RETRY_S
                return
            self._log(f"TensorBoard logging resumed in a new event file in {self.log_dir}")
        try:
            getattr(self.writer, method)(*args)
        except Exception as e:  # noqa: BLE001 - the writer's thread keeps its error and raises it at every later write
            writer, self.writer = self.writer, None
            self._retry_at = time.monotonic() + self.RETRY_S
            self._log(
                f"TensorBoard logging paused ({type(e).__name__}: {e}); the run goes on, "
                f"a new event file in {self.log_dir} is tried every {self.RETRY_S:g} s"
            )
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - it raises the same error again
                pass

    def scalar(self, tag: str, value: float, step: int) -> None:
        self._write("add_scalar", tag, float(value), step)

    def scalars(self, prefix: str, values: dict, step: int) -> None:
        for name, value in values.items():
            if value is not None:
                self._write("add_scalar", f"{prefix}/{name}", float(value), step)

    def histogram(self, tag: str, values, step: int) -> None:
        self._write("add_histogram", tag, np.asarray(values, dtype=np.float64), step)

    def race(self, kind: str, values: dict, step: int) -> None:
        for name, value in values.items():
            self._write("add_scalar", race_tag(kind, name), float(value), step)

    def flush(self) -> None:
        if self.writer is not None:
            self._write("flush")

    def close(self) -> None:
        writer, self.writer = self.writer, None
        if writer is not None:
            writer.close()
