"""The counters of a run, persisted in every checkpoint as plain JSON (DESIGN §3.6)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields


@dataclass
class RunStats:
    frames_played: int = 0  # actions taken by all collectors, every race counted; drives the schedules
    races: int = 0
    races_finished: int = 0
    memories_generated: int = 0  # transitions stored (train + test)
    single_memories_used: int = 0  # transitions sampled for training batches
    single_memories_should_have_been_used: float = 0.0  # replay-ratio credit
    batches_done: int = 0
    test_batches_done: int = 0
    target_network_updates: int = 0
    next_target_network_update_at: int = 0  # in single_memories_used
    policy_version: int = 0  # of the shared network, +1 at every publication
    newest_policy_version_acted: int = 0  # newest version a collector reported acting with
    training_seconds: float = 0.0
    wall_seconds: float = 0.0  # time the learner ran, summed over resumes
    rollouts_rejected: int = 0  # envelopes that broke the contract
    rollouts_dropped_stale: dict = field(default_factory=dict)  # per source: races older than max_policy_lag
    collector_restarts: int = 0
    best_race_time_ms: dict = field(default_factory=dict)  # per map name, finished races only
    latest_eval_native_score: dict = field(default_factory=dict)  # per map status ("trained"/"blind")
    held_out_evaluations: int = 0  # periodic held-out evaluations done (learner/held_out.py)
    held_out_latest_score: float | None = None  # mean native score of the latest one
    held_out_best_score: float | None = None  # the score of save/<run>/best/
    held_out_best_rules: str = "training"  # the rules its races were played by (every run before 2026-11-28: training)
    weights_kept_at_minutes: list = field(default_factory=list)  # minutes of keep_weights_at_minutes already kept

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> RunStats:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
