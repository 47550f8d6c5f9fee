"""Rank 0's side of a learner group: the hooks run_training calls (learner/group_hooks.py), for `--learners N`.

Rank 0 is the process of scripts/train.py. At the start it splits the run's local collectors between the ranks
(ranks above 0 learn from their own local collectors only; Ray actors and HTTP clients feed rank 0), refuses what
cannot work (exit 2, nothing started: a rank with nothing to learn from, more ranks than cores or GPUs or nodes,
`training_cuda_graphs = "on"`), builds its learner, opens the group's store, launches the other ranks (local
processes, launch.py, or Ray actors one per node, ray_ranks.py) and hands each its start state. Then, every loop of
the training loop, it adds the other ranks' frames to the run's count and watches the ranks: a rank whose process
ended, that reported a failure, that gave no sign of life for `learner_group_timeout_s`, or a collective that failed
stops the run: the rank is named, killed, rank 0 writes its final checkpoint (the other ranks' shards of the previous
checkpoint) and exits 1. Every checkpoint holds every rank's shard (shards.py). CUDA graphs are off in a group:
they would not capture the step's all_reduce.
"""

from __future__ import annotations

import dataclasses
import json
import time

from trackmania_rl.config.loader import ConfigError
from trackmania_rl.config.values import config_to_values
from trackmania_rl.learner import checkpoint as ckpt
from trackmania_rl.learner.checkpoint import BUFFER, BUFFER_TEST
from trackmania_rl.learner.cores import LearnerThreads
from trackmania_rl.learner.group_hooks import GroupHooks
from trackmania_rl.learner.sources import remote_source_names
from trackmania_rl.learner_group.gradients import make_gradient_exchange
from trackmania_rl.learner_group.rank import CLOSE_KEY, alive_key, failed_key, figures_key, joined_key, ready_key
from trackmania_rl.learner_group.rank_learner import RankLearner, lr_scale
from trackmania_rl.learner_group.rendezvous import GroupConnection, LearnerGroupError, StoreServer
from trackmania_rl.learner_group.shards import ShardTransfer
from trackmania_rl.learner_group.start_state import send_start_state
from trackmania_rl.learner_group.training_thread import GroupTrainingThread
from trackmania_rl.monitoring.status_line import print_line

START_TIMEOUT_S = 300.0  # ranks import torch, build their learner and start their collectors: slow on a busy machine
CHECK_PERIOD_S = 1.0  # how often the store's signs of life and failure reports are read
UNWATCHED_S = 10.0  # a gap this long between two looks: the clocks of the signs of life start again
NAMING_WAIT_S = 3.0  # after a failed collective: how long to look for the rank that caused it (> 2 signs of life)


def split_collectors(total: int, ranks: int, rank0_has_remote: bool) -> list[int]:
    """Local collectors per rank, in turn; ranks above 0 first when rank 0 has a remote source (they have nothing else)."""
    order = list(range(1, ranks)) + [0] if rank0_has_remote else list(range(ranks))
    shares = [0] * ranks
    for k in range(total):
        shares[order[k % ranks]] += 1
    return shares


class GroupConfigView:
    """Rank 0's config as the group learns with it: CUDA graphs off, the training precision rank 0 chose."""

    def __init__(self, live):
        self.live = live
        self.precision: str | None = None
        self._source = None
        self._current = None

    def set_precision(self, name: str) -> None:
        self.precision, self._source = name, None

    @property
    def current(self):
        source = self.live.current
        if source is not self._source:
            changes = {"training_cuda_graphs": "off"}
            if self.precision is not None:
                changes["training_precision"] = self.precision
            self._source = source
            self._current = source.replace(**changes)
        return self._current


class LearnerGroup(GroupHooks):
    def __init__(self, ranks: int, placement, log=print):
        self.learners = ranks
        self.placement = placement
        self.log = log
        self.failure: str | None = None
        self.server = None
        self.connection = None
        self.thread: GroupTrainingThread | None = None
        self.learner: RankLearner | None = None
        self.shares: list[int] = []
        self.cores: list[int | None] = []
        self._seen: dict[int, tuple[str, float]] = {}
        self._figures_at: tuple[float | None, int] = (None, 0)
        self._checked_at = 0.0

    # ------------------------------------------------------------------------------ start-up
    def collectors_here(self, collectors_count: int, context, device) -> int:
        cfg, options, n = context.live.current, context.options, self.learners
        if cfg.training_cuda_graphs == "on":
            raise ConfigError(
                f'training_cuda_graphs = "on" needs --learners 1: a learner group\'s step holds an all_reduce that the '
                f'graphs do not capture (set it to "auto" or "off"; {context.live_path})'
            )
        remote = bool(remote_source_names(options, cfg))
        self.shares = split_collectors(collectors_count, n, remote)
        idle = [k for k in range(n) if self.shares[k] == 0 and (k > 0 or not remote)]
        if idle:
            raise ConfigError(
                f"--learners {n} with {collectors_count} local collector(s) leaves rank(s) {', '.join(map(str, idle))} with "
                "nothing to learn from: every rank above 0 learns from local collectors of its own (Ray actors and HTTP "
                f"clients feed rank 0); give --collectors {n - 1 if remote else n} or more"
            )
        self.placement.check(n, device, cfg, self.shares)
        self.context, self.device, self.total_collectors = context, device, collectors_count
        self.timeout_s = float(cfg.learner_group_timeout_s)
        return self.shares[0]

    def learner_threads(self, cores: int, games_here: int) -> LearnerThreads:
        mine = games_here - (self.total_collectors - self.shares[0])  # rank 0's collectors, Ray auto actors, a loopback client
        if self.placement.shares_this_machine:
            spare = max(1, (cores - games_here) // self.learners)  # the cores the games leave, split between the ranks
            self.cores = [spare + mine] + [spare + self.shares[k] for k in range(1, self.learners)]
            return LearnerThreads(spare + mine, mine)
        self.cores = [cores] + [None] * (self.learners - 1)  # each rank on a node of its own: its node's cores
        return LearnerThreads(cores, mine)

    def make_learner(self, live, layout, device, run_dir, source, logger, log, threads: int | None = None) -> RankLearner:
        if live.current.training_cuda_graphs == "auto":
            log("training_cuda_graphs auto: off in a learner group (the graphs would not capture the step's all_reduce)")
        self.view = GroupConfigView(live)
        learner = RankLearner(
            self.view, layout, device, run_dir, rank=0, ranks=self.learners, source=source, logger=logger, log=log, threads=threads
        )
        self.view.set_precision(learner.precision.name)
        learner.settings.cfg = self.view.current
        learner.shards = ShardTransfer(None, self.learners, run_dir, log)
        learner.shards.healthy = lambda: False  # until every rank has started: a save keeps the previous shards
        self.learner = learner
        return learner

    def start(self, learner: RankLearner) -> None:
        n = self.learners
        host = self.placement.host_of_rank0()
        self.server = StoreServer(host, n, self.timeout_s)
        specs = [
            {
                "rank": k,
                "ranks": n,
                "store_host": host,
                "store_port": self.server.port,
                "bind_host": self.placement.bind_host(k),
                "timeout_s": self.timeout_s,
                "device": self._device_of(k),
            }
            for k in range(1, n)
        ]
        scaling = self.view.current.learners_lr_scaling
        self.log(
            f"learner group: {n} ranks ({self.placement.placement}), store on {host}:{self.server.port}, local collectors per "
            f"rank {self.shares}, effective batch {n} x {self.view.current.batch_size}, lr x {lr_scale(scaling, n):.3g} ({scaling})"
        )
        self.placement.launch(specs)
        self._wait_for_ranks(joined_key, "join the group")
        self.connection = GroupConnection.join(self.server.store, 0, n, host, self.timeout_s, self.device)
        values = config_to_values(self.view.current)
        for k in range(1, n):
            header = {
                "config": values,
                "inputs": self.view.current.inputs_file(),
                "game_backend": self.context.game_backend,
                "collectors": self.shares[k],
                "first_producer": sum(self.shares[:k]),
                "producers": self.total_collectors,
                "cores": self.cores[k] if self.cores[k] is not None else None,
                "stats": learner.stats.to_json(),
            }
            send_start_state(self.connection.control, k, header, learner, self._shards_for(learner, k))
        self._wait_for_ranks(ready_key, "start")
        exchange = learner.cfg.learners_gradient_exchange
        learner.trainer.gradient_exchange = make_gradient_exchange(exchange, self.connection.gradients, n, learner.online.parameters())
        learner.shards.pg = self.connection.control
        learner.shards.request = self._request_shards
        learner.shards.healthy = self._can_exchange_shards
        self.log(f"learner group: every rank started; each holds the weights of digest {ckpt.weights_digest(learner.online.state_dict())}")

    def _device_of(self, rank: int) -> str:
        if self.device.type == "cuda" and self.placement.shares_this_machine:
            return f"cuda:{rank}"
        return self.device.type  # a rank on a node of its own: that node's first GPU (Ray assigns it), or the CPU

    def _shards_for(self, learner, rank: int) -> dict:
        folder = learner.resumed_from
        if folder is None:
            return {}
        return {name: [path for k, path in ckpt.shard_files(folder, name) if k % self.learners == rank] for name in (BUFFER, BUFFER_TEST)}

    def _wait_for_ranks(self, key, what: str) -> None:
        deadline = time.monotonic() + max(START_TIMEOUT_S, self.timeout_s)
        waiting = list(range(1, self.learners))
        while waiting:
            failure = self._dead_or_failed()
            if failure:
                raise LearnerGroupError(f"learner group: {failure} before it could {what}")
            waiting = [k for k in waiting if not self.server.store.check([key(k)])]
            if waiting and time.monotonic() > deadline:
                raise LearnerGroupError(
                    f"learner group: rank(s) {waiting} did not {what} within {max(START_TIMEOUT_S, self.timeout_s):g} s"
                )
            time.sleep(0.1)

    def training_thread(self, learner, wanted_threads) -> GroupTrainingThread:
        self.thread = GroupTrainingThread(learner, self.connection, wanted_threads, config_source=lambda: self.view.current, log=self.log)
        return self.thread

    # ------------------------------------------------------------------------------ every loop
    def poll(self, learner) -> str | None:
        if self.thread is not None:
            learner.stats.frames_played += self.thread.take_frames_of_others()
        if self.failure is not None:
            return self.failure
        failure = self._dead_or_failed()
        now = time.monotonic()
        if failure is None and now - self._checked_at >= CHECK_PERIOD_S:
            unwatched = now - self._checked_at > UNWATCHED_S  # a save or the held-out evaluation kept this thread away
            self._checked_at = now
            failure = self._silent(restart_clocks=unwatched)
        if failure is None and self.thread is not None and self.thread.failure is not None:
            failure = self._name_collective_failure(self.thread.failure)
        if failure is not None:
            self.failure = f"learner group: {failure}"
            self.log(f"{self.failure}; stopping the run")
        return self.failure

    def _dead_or_failed(self) -> str | None:
        for k, how in sorted(self.placement.dead().items()):
            return f"rank {k} died ({how}){self._reported(k)}"
        return None

    def _reported(self, k: int) -> str:
        try:
            if self.server.store.check([failed_key(k)]):
                return f": {self.server.store.get(failed_key(k)).decode(errors='replace')}"
        except Exception:
            pass
        return ""

    def _silent(self, restart_clocks: bool = False) -> str | None:
        """A rank whose sign of life has not changed for the group's timeout (hung, stopped, cut off), as seen by this
        thread: after it looked away (`restart_clocks`: a save, in which the ranks send their shards instead of signs of
        life), the clocks start again."""
        now = time.monotonic()
        for k, beat in self._beats().items():
            last_beat, since = self._seen.get(k, (None, now))
            if beat != last_beat or restart_clocks:
                self._seen[k] = (beat, now)
            elif now - since > self.timeout_s:
                self.placement.kill(k)
                return f"rank {k} ({self.placement.where(k)}) gave no sign of life for {now - since:.0f} s (hung?); it was killed"
        return None

    def _name_collective_failure(self, error) -> str:
        """After a failed collective: the rank that died, else the ranks whose sign of life stands still (they are
        killed), else the error alone."""
        beats = self._beats()
        deadline = time.monotonic() + NAMING_WAIT_S
        while time.monotonic() < deadline:  # a dead peer fails the collective at once, before its exit is seen
            failure = self._dead_or_failed()
            if failure:
                return failure
            time.sleep(0.1)
        silent = [k for k, beat in self._beats().items() if beat == beats[k]]
        for k in silent:
            self.placement.kill(k)
        if silent:
            names = ", ".join(f"rank {k} ({self.placement.where(k)})" for k in silent)
            return f"{error}; {names} gave no sign of life for {NAMING_WAIT_S:g} s (hung?) and was killed"
        return f"{error} (every rank still gives signs of life)"

    def _beats(self) -> dict[int, str]:
        store = self.server.store
        return {k: store.get(alive_key(k)).decode() if store.check([alive_key(k)]) else "" for k in range(1, self.learners)}

    def _request_shards(self) -> None:
        if self.thread is not None and not self.thread.stop_agreed.is_set():
            self.thread.request_shards()  # a periodic save; at the final save the ranks send unasked

    def _can_exchange_shards(self) -> bool:
        thread = self.thread
        alive = thread is not None and (thread.stop_agreed.is_set() or (thread._thread.is_alive() and thread.failure is None))
        return self.failure is None and alive and not self.placement.dead()

    def scalars(self) -> dict[str, float]:
        figures = {}
        for k in range(1, self.learners):
            try:
                if self.server.store.check([figures_key(k)]):
                    for name, value in json.loads(self.server.store.get(figures_key(k))).items():
                        figures[f"rank{k}/{name}"] = value
            except Exception:
                continue
        if self.learner is not None:
            now, batches = time.monotonic(), self.learner.stats.batches_done
            since, before = self._figures_at
            if since is not None:
                learned = (batches - before) * self.learner.cfg.batch_size * self.learners
                figures["transitions_learned_per_s"] = learned / max(1e-9, now - since)
            self._figures_at = (now, batches)
        if self.thread is not None:
            figures["digest_mismatches"] = self.thread.digest_mismatches
            figures["agreement_rounds"] = self.thread.agreement.rounds
            exchange = self.learner.trainer.gradient_exchange
            if exchange is not None and exchange.exchanges:
                figures["allreduce_ms_mean"] = 1000 * exchange.seconds / exchange.exchanges
        return figures

    # ------------------------------------------------------------------------------ the end
    def close(self) -> None:
        try:
            if self.server is not None and self.server.store is not None:
                self.server.store.set(CLOSE_KEY, "1")
        except Exception:
            pass
        try:
            codes = self.placement.stop()
            for k, code in sorted(codes.items()):
                if code not in (0, None) and self.failure is None:
                    self.log(f"learner group: rank {k} ended with exit code {code}")
        except Exception as e:
            self.log(f"learner group: stopping the ranks failed: {type(e).__name__}: {e}")
        finally:
            if self.server is not None:
                self.server.close()


def learner_group_for(options) -> tuple[object, LearnerGroup | None]:
    """(the options of rank 0's run, the learner group of `--learners N`; None for one learner). The ranks are local
    processes, or with `--ray ADDRESS` (not "auto") Ray actors one per node of that cluster: then the address places
    the ranks, and collector actors play there too only with `--ray-actors N` (N > 0)."""
    if options.learners <= 1:
        return options, None
    if options.ray not in (None, "auto"):
        from trackmania_rl.learner_group.ray_ranks import RayRanks

        group = LearnerGroup(options.learners, RayRanks(options.ray), log=_log)
        if not options.ray_actors:
            options = dataclasses.replace(options, ray=None)
        return options, group
    from trackmania_rl.learner_group.launch import LocalRanks

    return options, LearnerGroup(options.learners, LocalRanks(), log=_log)


def _log(message: str) -> None:
    print_line(f"[learner] {message}")
