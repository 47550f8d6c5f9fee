"""The learner (DESIGN §2, §3.6): rollouts in, transitions stored, batches trained, weights published.

It runs in the main process. `Learner` holds the networks, buffers, counters and logs; train_loop.py drives
it from two threads: the main thread takes envelopes from the rollout source and `ingest`s them (validated
once; races played with weights more than `max_policy_lag` versions old are not stored), publishes, logs and
saves; the training thread (learner/training_thread.py) runs `train_step` while the replay-ratio credit lasts,
leaving a copy of the online weights every `send_shared_network_every_n_batches` batches for the main thread
to publish (`publish_pending`). The batches come from learner/batches.py (prefetched on CUDA), the step is
agents/training.py's, as CUDA graphs where they are faster (agents/graphed_step.py).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from trackmania_rl.agents import schedules
from trackmania_rl.agents.graphed_step import GraphedTrainStep, choose_cuda_graphs, set_capturable
from trackmania_rl.agents.iqn import load_state_dict_into, make_network
from trackmania_rl.agents.packed_tensors import HostCopy
from trackmania_rl.agents.precision import choose_precision
from trackmania_rl.agents.step_results import StepsInFlight
from trackmania_rl.agents.training import Trainer, make_optimizer, set_optimizer_hyperparameters
from trackmania_rl.config.loader import ConfigError, frame_shape
from trackmania_rl.config.values import settings_json
from trackmania_rl.learner import checkpoint as ckpt
from trackmania_rl.learner.batches import make_batch_feed
from trackmania_rl.learner.checkpoint import (
    BUFFER,
    BUFFER_TEST,
    OPTIMIZER,
    SETTINGS,
    STATS,
    WEIGHTS_ONLINE,
    WEIGHTS_TARGET,
)
from trackmania_rl.learner.run_stats import RunStats
from trackmania_rl.replay.buffers import append_saved_buffer, make_buffers, read_buffer_file, resize_buffers, save_buffer
from trackmania_rl.replay.experience import fill_buffers
from trackmania_rl.replay.memory_check import machine_memory_bytes, replay_memory_warning
from trackmania_rl.replay.storage import InvalidBufferFile
from trackmania_rl.rollouts.contract import InvalidRollout, RolloutShape, policy_lag, require_reward_keys, validated_race

LEARNER_SEED_BASE = 444
TRAINING_WINDOW_KEYS = ("loss", "loss_test", "grad_norm", "q_mean")


EPISODES_FILE = "episodes.jsonl"  # one line per episode ended (games whose episodes span races)


class Learner:
    def __init__(self, live_config, layout, device, run_dir: Path, source=None, logger=None, log=print, resume=True, threads=None):
        self.live = live_config
        self.cfg = live_config.current
        self.layout = layout
        self.device = device
        self.run_dir = Path(run_dir)
        self.source = source  # a RolloutSource: where the published weights go (None: nowhere, for tests and tools)
        self.logger = logger
        self.log = log
        seed = self.random_seed()  # replay sampling, quantile fractions and the initial weights
        self.rng = np.random.default_rng(seed)
        torch.manual_seed(seed)
        self.n_actions = len(self.cfg.inputs)
        self._capacity_announced_full = 0
        self.rollout_shape = RolloutShape(frame_shape(self.cfg), layout.dim, self.n_actions)

        self.stats = RunStats()
        self.online = make_network(self.cfg, layout, self.n_actions, device)
        self.target = make_network(self.cfg, layout, self.n_actions, device)
        self.target.load_state_dict(self.online.state_dict())
        self.optimizer = make_optimizer(self.online, self.cfg, self.schedules()["lr"])
        # the probe times the step on the training thread's threads (`threads`), not on this (main) thread's one
        self.precision = choose_precision(self.cfg.training_precision, self.cfg, layout, self.n_actions, device, log, threads)
        try:
            self.cuda_graphs = choose_cuda_graphs(
                self.cfg.training_cuda_graphs, self.cfg, layout, self.n_actions, device, self.precision.dtype, log
            )
        except ValueError as e:
            raise ConfigError(str(e)) from None
        self.trainer = Trainer(self.online, self.target, self.optimizer, self.cfg, device, precision=self.precision.dtype)
        capacity, self.memory_start_learn = self._memory_size()
        # the buffers give host tensors; the batch feed moves them to the device (prefetched on CUDA)
        self.buffer, self.buffer_test = make_buffers(self.cfg, layout, capacity, device="cpu", rng=self.rng)
        largest = max(int(c) for _, (c, _) in self.cfg.memory_size_schedule)
        warning = replay_memory_warning(self.buffer.nbytes() + self.buffer_test.nbytes(), capacity, largest, machine_memory_bytes())
        if warning:
            log(f"WARNING: {warning}")
        self.resumed_from: Path | None = None  # the checkpoint folder this learner resumed from
        if resume:
            self._resume()
        set_capturable(self.optimizer, self.cuda_graphs.enabled)  # the step counts (a resumed run's too) where the step runs
        if self.cuda_graphs.enabled:
            self.trainer.graphed = GraphedTrainStep(self.trainer, log=log)
        feed_rng = self.rng.spawn(1)[0]
        test_seed = self.test_draws_seed()
        test_draws = feed_rng if test_seed is None else np.random.default_rng(test_seed)
        self.batches = make_batch_feed(self.buffer, self.buffer_test, self.trainer, device, feed_rng, lambda: self.cfg, test_draws)
        self._steps_in_flight = StepsInFlight()  # launched steps whose results are not read yet
        self._pending_weights: HostCopy | None = None  # a copy of the online weights left by train_step, to publish
        self._pending_lock = threading.Lock()
        self._settings_applied: tuple | None = None
        self.publish()  # a resumed run continues its version count

        # windows for the periodic aggregate logs
        self.window = defaultdict(list)
        self.window_start = time.perf_counter()
        self.window_time = defaultdict(float)
        self.last_save_time = time.perf_counter()
        self.start_time = time.perf_counter()
        self.wall_seconds_at_start = self.stats.wall_seconds

    # ----------------------------------------------------------------------------------------- state
    def random_seed(self) -> int:
        """The run's seed for this learner (a learner group's ranks draw their batches and quantile fractions each
        from a seed of their own: learner_group/)."""
        return LEARNER_SEED_BASE + self.cfg.seed

    def test_draws_seed(self) -> int | None:
        """The seed of the draws that make a batch a hidden-test one, when they are not the batch feed's own (a learner
        group's ranks share one: learner_group/rank_learner.py)."""
        return None

    def _memory_size(self) -> tuple[int, int]:
        capacity, start_learn = schedules.staircase(self.cfg.memory_size_schedule, self.stats.frames_played)
        return int(capacity), int(start_learn)

    def schedules(self) -> dict:
        return schedules.values_at(self.cfg, self.stats.frames_played)

    def _resume(self) -> None:
        """Continue from the newest checkpoint of the run folder that loads (learner/checkpoint.py layout).

        Candidates are tried newest first (numbered checkpoints, then an older run's checkpoint/). One without
        its COMPLETE marker or with an unreadable or damaged file is skipped; once a candidate loads, the
        skipped ones are moved to checkpoints.bad/ (never deleted) and named in the log. When none loads, the
        start is refused (CheckpointError) and nothing is moved. A checkpoint that reads fine but does not fit
        the current config also refuses the start: silently continuing from a fresh network with late-stage
        schedules would waste the run (Linesight's bare-except weakness)."""
        candidates = ckpt.checkpoint_candidates(self.run_dir)
        if not candidates:
            return
        skipped: list[tuple[Path, str]] = []
        for folder in candidates:
            if not ckpt.is_complete(folder):
                skipped.append((folder, f"checkpoint {folder} is incomplete (no {ckpt.COMPLETE_MARKER} marker)"))
                continue
            try:
                state = self._read_checkpoint(folder)
            except ckpt.CheckpointCorrupt as e:
                skipped.append((folder, str(e)))
                continue
            self._apply_checkpoint(folder, state, skipped)
            self.resumed_from = folder
            break
        else:
            reasons = "; ".join(why for _, why in skipped)
            raise ckpt.CheckpointError(
                f"no usable checkpoint in {self.run_dir} ({reasons}). Nothing was moved or deleted. To go on, move the "
                f"damaged files or folders out of {self.run_dir} (a checkpoint whose only damaged files are {BUFFER} and "
                f"{BUFFER_TEST} resumes with empty buffers once they are moved away), or start over with --fresh"
            )
        for unusable, why in skipped:
            moved = ckpt.move_aside(self.run_dir, unusable)
            self.log(f"checkpoint {unusable} cannot be used, moved to {moved}: {why}")
        buffers = "" if state["buffers_found"] else " (no buffer files in it: the buffers start empty)"
        self.log(
            f"resumed from {folder}: {self.stats.frames_played} frames, {self.stats.batches_done} batches, "
            f"buffer {len(self.buffer)} + test {len(self.buffer_test)} transitions, policy version {self.stats.policy_version}{buffers}"
        )

    def _read_checkpoint(self, folder: Path) -> dict:
        """Every file of a checkpoint, read and checked without changing the learner. CheckpointCorrupt
        naming the file when one is missing, unreadable or damaged (buffer files may be absent)."""
        stats_data = ckpt.load_json(folder, STATS)
        try:
            stats = RunStats.from_json(stats_data)
        except (AttributeError, TypeError) as e:
            path = folder / STATS
            raise ckpt.CheckpointCorrupt(f"checkpoint file {path} is corrupt (not the run's counters: {e})", path) from None
        state = {"stats": stats}
        for name in (WEIGHTS_ONLINE, WEIGHTS_TARGET, OPTIMIZER):  # an older checkpoint's scaler.torch is not needed
            value = ckpt.load_torch(folder, name, self.device)
            if not isinstance(value, dict) or (
                name in (WEIGHTS_ONLINE, WEIGHTS_TARGET) and not all(isinstance(v, torch.Tensor) for v in value.values())
            ):
                path = folder / name
                raise ckpt.CheckpointCorrupt(f"checkpoint file {path} is corrupt (not the saved state it should hold)", path)
            state[name] = value
        found = 0
        for name in (BUFFER, BUFFER_TEST):
            state[name] = []  # one saved buffer per rank shard this learner takes (a single learner: every shard)
            for path in self._buffer_shards(folder, name):
                try:
                    state[name].append(read_buffer_file(path, self.n_actions))
                    found += 1
                except FileNotFoundError:
                    pass
                except InvalidBufferFile as e:
                    raise ckpt.CheckpointCorrupt(str(e), path) from None
        state["buffers_found"] = found > 0
        return state

    def _buffer_shards(self, folder: Path, name: str) -> list[Path]:
        """The files of buffer `name` this learner loads at resume: every rank's shard of a learner group's checkpoint
        (learner_group/ takes its own share), oldest rank first."""
        return [path for _, path in ckpt.shard_files(folder, name)]

    def _apply_checkpoint(self, folder: Path, state: dict, skipped: list) -> None:
        """Load what `_read_checkpoint` read. CheckpointError if it does not fit the current config."""
        try:
            self.stats = state["stats"]
            for network, name in ((self.online, WEIGHTS_ONLINE), (self.target, WEIGHTS_TARGET)):
                load_state_dict_into(network, state[name], f"checkpoint file {folder / name}")
            self.optimizer.load_state_dict(state[OPTIMIZER])
            capacity, self.memory_start_learn = self._memory_size()
            resize_buffers(self.buffer, self.buffer_test, self.cfg, capacity)
            for buffer, name in ((self.buffer, BUFFER), (self.buffer_test, BUFFER_TEST)):
                for k, saved in enumerate(state[name]):  # shards after the first are added behind it
                    if k == 0:
                        buffer.load_state_dict(saved, self.n_actions)
                    else:
                        append_saved_buffer(buffer, saved, self.n_actions)
        except (RuntimeError, KeyError, ValueError, TypeError) as e:  # shapes or entries that do not match this config
            unused = "".join(f"; also unusable: {why}" for _, why in skipped)
            raise ckpt.CheckpointError(
                f"checkpoint {folder} does not fit the current config ({e}); start with --fresh or restore the run's config "
                f"(the values it trained with are in {folder / SETTINGS}){unused}. Nothing was moved or deleted"
            ) from None

    def save(self) -> Path:
        """Write a checkpoint (learner/checkpoint.py: numbered folder, the newest `checkpoints_kept` kept) with the
        config values in force as settings.json. (The best model folder is written by the held-out evaluation.)

        On an I/O error (full disk, I/O error, permission) every partial file is removed, the previous
        checkpoints are intact and CheckpointSaveError (an OSError) names the path and the free space; the
        next periodic save is then tried `save_frequency_s` later."""
        self.stats.wall_seconds = self.wall_seconds()
        settings = settings_json(self.cfg)
        writers = {
            **self.checkpoint_extra_files(),  # first: what they gather goes into stats.json
            WEIGHTS_ONLINE: ckpt.torch_writer(self.online.state_dict()),
            WEIGHTS_TARGET: ckpt.torch_writer(self.target.state_dict()),
            OPTIMIZER: ckpt.torch_writer(self.optimizer.state_dict()),
            STATS: lambda path: ckpt.json_writer(self.checkpoint_stats())(path),
            SETTINGS: ckpt.text_writer(settings),
            BUFFER: lambda path: save_buffer(self.buffer, path),
            BUFFER_TEST: lambda path: save_buffer(self.buffer_test, path),
        }
        try:
            folder = ckpt.save_checkpoint(self.run_dir, writers, keep=self.cfg.checkpoints_kept)
        finally:
            self.last_save_time = time.perf_counter()
        self.log(
            f"checkpoint saved to {folder}: {self.stats.frames_played} frames, {self.stats.batches_done} batches, "
            f"buffer {len(self.buffer)} + test {len(self.buffer_test)} transitions"
        )
        return folder

    def checkpoint_extra_files(self) -> dict:
        """More files for a checkpoint (name -> writer), written before the learner's own: none (a learner group adds
        its other ranks' buffer shards, learner_group/)."""
        return {}

    def checkpoint_stats(self) -> dict:
        """The checkpoint's stats.json: the run's counters, how many learners trained and one digest of the online
        weights per learner (a learner group gives the group's totals and every rank's digest)."""
        return {**self.stats.to_json(), "learners": 1, "rank_weight_digests": [ckpt.weights_digest(self.online.state_dict())]}

    def publish(self, weights: dict | None = None) -> None:
        """The online weights (or a copy of them, `weights`) become policy version + 1 at the source. Called from the
        main thread: the rollout sources are only ever called from it."""
        if self.source is None:
            return
        self.stats.policy_version += 1
        if weights is None:
            weights = {k: v.detach() for k, v in self.online.state_dict().items()}
        self.source.publish(self.stats.policy_version, weights)

    def publish_pending(self) -> bool:
        """Publish the weights `train_step` left, if any. True when it published."""
        with self._pending_lock:
            weights, self._pending_weights = self._pending_weights, None
        if weights is None:
            return False
        self.publish(weights.wait())
        return True

    def _leave_weights_to_publish(self) -> None:
        # on a GPU: one copy to pinned host memory that the training thread does not wait for (publish_pending does)
        copy = HostCopy(self.online.state_dict())
        with self._pending_lock:
            self._pending_weights = copy

    def wall_seconds(self) -> float:
        """How long this run has been training, resumes included."""
        return self.wall_seconds_at_start + (time.perf_counter() - self.start_time)

    def save_due(self) -> bool:
        return time.perf_counter() - self.last_save_time >= self.cfg.save_frequency_s

    # ---------------------------------------------------------------------------------------- config
    def apply_config(self) -> bool:
        """Pick up a reloaded config (the training settings follow at the next `train_step`). True when the memory
        schedule asks for bigger buffers: then `grow_buffers`, with the training thread paused."""
        self.cfg = self.live.current
        capacity, self.memory_start_learn = self._memory_size()
        return capacity > self.buffer.capacity

    def grow_buffers(self) -> None:
        capacity, self.memory_start_learn = self._memory_size()
        if capacity > self.buffer.capacity:
            self.log(f"replay buffer grows to {capacity} transitions")
            resize_buffers(self.buffer, self.buffer_test, self.cfg, capacity)

    def step_settings(self) -> tuple:
        """(config, learning rate) of the next train step: the live config and the lr of its schedule at the frames
        played (a learner group pins both between its agreements, so that every rank steps alike: learner_group/)."""
        return self.cfg, self.schedules()["lr"]

    def _apply_training_settings(self):
        """The step's settings (`step_settings`) where the step reads them, redone only when they moved; returns the
        config in force."""
        cfg, lr = self.step_settings()
        key = (id(cfg), lr)
        if key == self._settings_applied:
            return cfg
        self.trainer.cfg = cfg
        set_optimizer_hyperparameters(self.optimizer, cfg, lr)
        self.buffer.update_config(cfg)
        self.buffer_test.update_config(cfg)
        self._settings_applied = key
        return cfg

    # ------------------------------------------------------------------------------------ rollouts in
    def ingest_envelope(self, envelope) -> dict:
        """`ingest` for an envelope as a source delivers it (anything: it is checked)."""
        if isinstance(envelope, (tuple, list)) and len(envelope) == 3:
            return self.ingest(*envelope)
        self.stats.rollouts_rejected += 1
        self.log(f"rollout refused: an envelope must be (rollout_results, end_race_stats, meta), got {type(envelope).__name__}")
        return {"rejected": "not an envelope"}

    def ingest(self, rollout_results: dict, end_race_stats: dict, meta: dict) -> dict:
        """Validate, account, log and (if the map fills the buffer) store one race. Returns what was done.

        An envelope that breaks the contract is refused with a log line, and a race played with weights more
        than `max_policy_lag` versions old is dropped and counted by source: nothing of either is stored.
        """
        start = time.perf_counter()
        try:
            _, steps = validated_race((rollout_results, end_race_stats, meta), self.rollout_shape)
            lag = policy_lag(rollout_results, self.stats.policy_version)
            if lag < 0:
                raise InvalidRollout(
                    f"`policy_version` {self.stats.policy_version - lag} is newer than the learner's {self.stats.policy_version}"
                )
            require_reward_keys(rollout_results, self.cfg)
        except InvalidRollout as e:
            self.stats.rollouts_rejected += 1
            where = "an unnamed source"
            if isinstance(meta, dict):
                where = f"{meta.get('source')!r} {meta.get('collector')} on {meta.get('map_name')} seed {meta.get('seed')}"
            self.log(f"rollout from {where} refused: {e}")
            return {"rejected": str(e)}
        self.window["policy_lag_versions"].append(lag)
        if lag > self.cfg.max_policy_lag:
            source = meta["source"]
            dropped = self.stats.rollouts_dropped_stale
            dropped[source] = dropped.get(source, 0) + 1
            return {"dropped": "stale", "policy_lag": lag}
        stored = (0, 0)
        if meta.get("fill_buffer", True):
            gamma = self.schedules()["gamma"]
            stored = fill_buffers(rollout_results, self.buffer, self.buffer_test, self.cfg, self.layout, gamma, self.rng, steps=steps)
            if len(self.buffer) >= self.buffer.capacity > self._capacity_announced_full:
                self._capacity_announced_full = self.buffer.capacity  # from here on memory should stay flat
                self.log(f"replay buffer is full: {len(self.buffer)} transitions; the oldest are replaced from now on")
        n_train, n_test = stored
        n_frames = len(rollout_results["actions"])
        self.stats.frames_played += n_frames
        self.stats.races += 1
        self.stats.races_finished += int(bool(end_race_stats.get("race_finished")))
        self.stats.memories_generated += n_train + n_test
        self.stats.single_memories_should_have_been_used += self.cfg.number_times_single_memory_is_used_before_discard * n_train
        ingest_s = time.perf_counter() - start
        self._log_race(rollout_results, end_race_stats, meta, steps, ingest_s)
        return {"n_train": n_train, "n_test": n_test, "ingest_s": ingest_s, "frames": n_frames, "policy_lag": lag}

    def _log_race(self, rollout_results, end_race_stats, meta, steps, ingest_s) -> None:
        kind = f"{'explo' if meta.get('is_explo') else 'eval'}_{meta.get('map_status', 'trained')}"
        finished = bool(end_race_stats.get("race_finished"))
        race_time_ms = end_race_stats.get("race_time", 0)
        map_name = meta.get("map_name", "?")
        if finished:
            best = self.stats.best_race_time_ms.get(map_name)
            if best is None or race_time_ms < best:
                self.stats.best_race_time_ms[map_name] = int(race_time_ms)
        if not meta.get("is_explo"):
            self.stats.latest_eval_native_score[meta.get("map_status", "trained")] = float(end_race_stats.get("native_score", 0.0))
        if len(steps.q_values):
            self.window["q_mean"].append(float(np.mean(np.max(steps.q_values, axis=1))))
        versions = rollout_results["policy_version"]
        if versions:
            self.stats.newest_policy_version_acted = max(self.stats.newest_policy_version_acted, int(max(versions)))
        self.window["ingest_ms"].append(1000 * ingest_s)
        self.window["race_time_ratio"].append(
            end_race_stats.get("race_time_for_ratio", 0) / 1000 / max(1e-9, meta.get("rollout_duration_s", 1e-9))
        )
        if "put_time" in meta:
            self.window["queue_wait_ms"].append(1000 * max(0.0, time.time() - meta["put_time"]))
        for key, value in end_race_stats.items():
            if key.startswith("instrumentation__"):
                self.window[f"collector_{key[len('instrumentation__') :]}_ns_per_action"].append(value)
        if "episode_return" in end_race_stats:  # a game whose episodes span races (games/gymnasium): the episode's whole
            self._log_episode(kind, end_race_stats, meta)
        if self.logger is None:
            return
        self.logger.race(
            kind,
            {
                "race_time_s": race_time_ms / 1000,
                "finished": float(finished),
                "native_score": end_race_stats.get("native_score", 0.0),
                "furthest_zone": rollout_results.get("furthest_zone_idx", 0),
                "progress_fraction": end_race_stats.get("progress_fraction", 0.0),
            },
            self.stats.frames_played,
        )

    def _log_episode(self, kind: str, end_race_stats: dict, meta: dict) -> None:
        """An episode that ended: its return (the game's own score, unclipped) against the actions stored so far, in
        TensorBoard and as a line of the run's episodes.jsonl (the training-return curve; scripts/plot_enduro.py)."""
        record = {
            "frames_played": self.stats.frames_played,
            "training_seconds": round(self.stats.training_seconds, 3),
            "wall_time": round(time.time(), 3),
            "episode_return": float(end_race_stats["episode_return"]),
            "episode_actions": int(end_race_stats.get("episode_actions", 0)),
            "end_reason": str(end_race_stats.get("end_reason")),
            "kind": kind,
            "source": meta.get("source"),
        }
        try:
            with open(self.run_dir / EPISODES_FILE, "a") as f:
                f.write(json.dumps(record) + "\n")
        except OSError as e:  # the record is a convenience: training goes on without it
            self.log(f"could not append to {self.run_dir / EPISODES_FILE}: {e}")
        if self.logger is not None:
            self.logger.race(kind, {"episode_return": record["episode_return"]}, self.stats.frames_played)

    # -------------------------------------------------------------------------------------- training
    def can_train(self) -> bool:
        credit = self.stats.single_memories_should_have_been_used - self.stats.single_memories_used
        return len(self.buffer) >= max(1, self.memory_start_learn) and credit >= self.cfg.batch_size

    def train(self, max_seconds: float) -> int:
        """Train batches while the replay-ratio credit lasts, for at most `max_seconds`, in this thread, publishing as
        they are due. Returns the learning batches done (hidden-test batches not counted)."""
        deadline = time.perf_counter() + max_seconds
        before = self.stats.batches_done
        while time.perf_counter() < deadline and self.train_step():
            self.publish_pending()
        return self.stats.batches_done - before

    def train_step(self) -> bool:
        """One batch if the replay-ratio credit allows it: a learning step, or now and then (buffer_test_ratio) a
        hidden-test batch, which uses no credit. False when there was nothing to do. The training thread's work.
        A captured step's results (loss, gradient norm, per-sample losses for priorities) are read one step later
        (agents/step_results.py: the GPU has the next step queued meanwhile); all of them when credit runs out."""
        if not self.can_train():
            self._account_steps(self._steps_in_flight.drain())
            return False
        cfg = self._apply_training_settings()
        start = time.perf_counter()
        is_test, batch = self.batches.next()
        self.trainer.phases.sampling += time.perf_counter() - start
        result = self.trainer.launch_on_tensors(batch, do_learn=not is_test)
        context = (is_test, self.stats.batches_done + 1, batch.get("index"), batch.get("state_gid"))
        self._account_steps(self._steps_in_flight.add(result, context))
        if is_test:
            self.stats.test_batches_done += 1
            self.window_time["testing"] += time.perf_counter() - start
            return True
        self.stats.single_memories_used += cfg.batch_size
        self.stats.batches_done += 1
        if self.stats.single_memories_used >= self.stats.next_target_network_update_at:
            self.stats.next_target_network_update_at += cfg.number_memories_trained_on_between_target_network_updates
            self.trainer.soft_update_target(cfg.soft_update_tau)
            self.stats.target_network_updates += 1
        if self.stats.batches_done % cfg.send_shared_network_every_n_batches == 0:
            self._leave_weights_to_publish()
        elapsed = time.perf_counter() - start
        self.window_time["training"] += elapsed
        self.stats.training_seconds += elapsed
        return True

    def _account_steps(self, read: list) -> None:
        """The results of steps read (StepsInFlight): priorities, the loss window, a skipped step's message."""
        for (is_test, batch_number, index, state_gid), (loss, grad_norm, per_sample) in read:
            buffer = self.buffer_test if is_test else self.buffer
            if buffer.prioritized:
                buffer.update_priority(index, per_sample.float().cpu(), state_gid)
            if is_test:
                self.window["loss_test"].append(loss)
            elif math.isfinite(grad_norm):  # a skipped step's NaN would blank the window's means
                self.window["loss"].append(loss)
                self.window["grad_norm"].append(grad_norm)
            elif self.trainer.nonfinite_steps_skipped == 1:
                self.log(
                    f"batch {batch_number}: non-finite gradient (loss {loss}), optimizer step skipped and "
                    "the weights kept (logged once; see training/nonfinite_steps_skipped)"
                )

    def training_backlog_batches(self) -> float:
        """Batches the learner owes to its replay ratio (0 until the buffer holds enough to start learning:
        pausing the sources then would stop the buffer from ever filling)."""
        if len(self.buffer) < max(1, self.memory_start_learn):
            return 0.0
        credit = self.stats.single_memories_should_have_been_used - self.stats.single_memories_used
        return max(0.0, credit / self.cfg.batch_size)

    def note_waiting(self, seconds: float) -> None:
        self.window_time["waiting"] += seconds

    def note_sources_paused(self, seconds: float) -> None:
        self.window_time["sources_paused"] += seconds

    def note_threads(self, mean_threads: float) -> None:
        self.window["learner_threads"] = [mean_threads]  # time-weighted mean of the window (learner/cores.py)

    # --------------------------------------------------------------------------------------- logging
    def log_aggregates(self) -> None:
        """Write the windowed training and pipeline scalars, then start a new window."""
        elapsed = max(1e-9, time.perf_counter() - self.window_start)
        step = self.stats.frames_played
        if self.logger is not None:
            training = {k: float(np.mean(v)) for k, v in self.window.items() if v and k in TRAINING_WINDOW_KEYS}
            training.update(self.schedules())
            training["replay_age_states"] = self.buffer.take_replay_age()
            training["batches_done"] = self.stats.batches_done
            training["nonfinite_steps_skipped"] = self.trainer.nonfinite_steps_skipped
            training["buffer_size"] = len(self.buffer)
            training["buffer_test_size"] = len(self.buffer_test)
            self.logger.scalars("training", training, step)
            pipeline = {k: float(np.mean(v)) for k, v in self.window.items() if v and k not in TRAINING_WINDOW_KEYS}
            if self.window["policy_lag_versions"]:
                pipeline["policy_lag_versions_max"] = float(np.max(self.window["policy_lag_versions"]))
                self.logger.histogram("pipeline/policy_lag_versions", self.window["policy_lag_versions"], step)
            pipeline["rollouts_dropped_stale"] = sum(self.stats.rollouts_dropped_stale.values())
            pipeline["learner_waiting_percent"] = 100 * self.window_time["waiting"] / elapsed
            pipeline["sources_paused_percent"] = 100 * min(elapsed, self.window_time["sources_paused"]) / elapsed
            pipeline["training_backlog_batches"] = self.training_backlog_batches()
            pipeline["learner_training_percent"] = 100 * (self.window_time["training"] + self.window_time["testing"]) / elapsed
            pipeline["transitions_learned_per_s"] = len(self.window["loss"]) * self.cfg.batch_size / elapsed
            pipeline["collector_restarts"] = self.stats.collector_restarts
            self.logger.scalars("pipeline", pipeline, step)
            self.logger.flush()
        self.window = defaultdict(list)
        self.window_time = defaultdict(float)
        self.window_start = time.perf_counter()
