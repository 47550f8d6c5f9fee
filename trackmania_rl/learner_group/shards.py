"""Every rank's buffer shard in rank 0's checkpoints, and the group's counters and digests in their stats.json.

A checkpoint of a group of N holds rank 0's files as a single learner's (weights, optimizer, stats.json, settings.json,
`buffer`, `buffer_test`) plus `buffer.rank<k>` and `buffer_test.rank<k>` of every rank k > 0 (learner/checkpoint.py
`shard_name`). stats.json holds the group's totals (races, transitions stored...), `learners` (N),
`rank_weight_digests` (each rank's digest of its online weights at that save: all equal) and `ranks` (each rank's
counters of this session). Any number of learners resumes from it: rank r of N takes the shards k with k mod N = r
(a single learner takes them all), merged behind one another.

The exchange, over the control group (learner_group/channel.py): at a periodic save (the group paused: nobody steps)
rank 0 asks through the next agreement round; at the final save the ranks send unasked once they stopped. Each
rank k writes its two buffers to files of its own, then sends a JSON header (digest, counters) and the two files;
rank 0 writes them into the checkpoint's staging folder. A rank that cannot write its shard says why in its header.
When a rank cannot send (it failed, or the group has), its shard is taken from the previous complete checkpoint
(a hard link, else a copy), so that a run stopped by a failed rank still resumes with the data it had saved.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from trackmania_rl.learner import checkpoint as ckpt
from trackmania_rl.learner.checkpoint import BUFFER, BUFFER_TEST
from trackmania_rl.learner_group.channel import SenderFailed, recv_file, recv_json, send_file, send_json
from trackmania_rl.learner_group.rendezvous import GroupCommunicationError
from trackmania_rl.replay.buffers import save_buffer

SUMMED = ("races", "races_finished", "memories_generated", "rollouts_rejected", "collector_restarts")
NAMES = (BUFFER, BUFFER_TEST)


def rank_counters(learner) -> dict:
    """A rank's own counters (rank 0's include the run's history: it resumed them; the others count this session)."""
    stats = learner.stats
    return {
        **{name: getattr(stats, name) for name in SUMMED},
        "rollouts_dropped_stale": dict(stats.rollouts_dropped_stale),
        "best_race_time_ms": dict(stats.best_race_time_ms),
        "frames_stored_this_session": learner.own_frames,
        "buffer_size": len(learner.buffer),
        "buffer_test_size": len(learner.buffer_test),
    }


def reset_rank_counters(stats) -> None:
    """A rank k > 0 starts from rank 0's counters: it counts its own from zero (the sums stay the run's totals)."""
    for name in SUMMED:
        setattr(stats, name, 0)
    stats.rollouts_dropped_stale, stats.best_race_time_ms = {}, {}


def send_shard(pg, learner, workdir: Path) -> None:
    """Rank k's side: header (digest, counters) then its two buffer files, to rank 0. Nothing may train meanwhile."""
    header = {"rank": learner.rank, "digest": ckpt.weights_digest(learner.online.state_dict()), "counters": rank_counters(learner)}
    paths = {name: Path(workdir) / f"shard_{name}" for name in NAMES}
    try:
        try:
            for name, buffer in ((BUFFER, learner.buffer), (BUFFER_TEST, learner.buffer_test)):
                save_buffer(buffer, paths[name])
        except Exception as e:
            header["error"] = f"rank {learner.rank} could not write its buffer shard: {type(e).__name__}: {e}"
        send_json(pg, header, 0)
        if "error" not in header:
            for name in NAMES:
                send_file(pg, paths[name], 0)
    finally:
        for path in paths.values():
            path.unlink(missing_ok=True)


def _link_or_copy(source: Path, path: Path) -> None:
    try:
        os.link(source, path)
    except OSError:
        shutil.copy2(source, path)


class ShardTransfer:
    """Rank 0's side. `request()` asks the ranks for their shards (set by the coordinator: a periodic save asks through
    the training thread; at the final save the ranks send unasked); `healthy()` says whether they can answer."""

    def __init__(self, pg, ranks: int, run_dir: Path, log: Callable[[str], None]):
        self.pg = pg
        self.ranks = ranks
        self.run_dir = Path(run_dir)
        self.log = log
        self.request: Callable[[], None] = lambda: None
        self.healthy: Callable[[], bool] = lambda: True
        self._headers: dict[int, dict] = {}
        self._pending: dict[int, list[str]] = {}

    def writers(self) -> dict:
        """The checkpoint's shard files of ranks 1..N-1 (name -> writer), written before rank 0's own files."""
        self._headers, self._pending = {}, {}
        if not self.healthy():
            self.log("the learner group cannot send its shards: the other ranks' shards are those of the previous checkpoint")
            return {ckpt.shard_name(name, k): functools.partial(self._previous, k, name) for k in range(1, self.ranks) for name in NAMES}
        self._pending = {k: list(NAMES) for k in range(1, self.ranks)}
        self.request()
        return {ckpt.shard_name(name, k): functools.partial(self._receive, k, name) for k in range(1, self.ranks) for name in NAMES}

    def _header(self, k: int) -> dict:
        if k not in self._headers:
            try:
                header = recv_json(self.pg, k)
            except (SenderFailed, GroupCommunicationError) as e:
                header = {"error": f"rank {k} sent no shard ({e})"}
            self._headers[k] = header
            if "error" in header:
                self._give_up(k, header)
        return self._headers[k]

    def _give_up(self, k: int, header: dict) -> None:
        """Rank k's shard will not come (header["error"] says why): nothing more is received from it this save."""
        self._headers[k] = header
        self._pending[k] = []
        self.log(f"{header['error']}: its shard of the previous checkpoint is kept")

    def _receive(self, k: int, name: str, path: Path) -> None:
        if "error" not in self._header(k):
            self._pending[k].remove(name)
            try:
                recv_file(self.pg, k, path)
                return
            except GroupCommunicationError as e:  # it died while sending: what the previous checkpoint has
                self._give_up(k, {"error": f"rank {k} stopped sending its shard ({e})"})
        self._previous(k, name, path)

    def _previous(self, k: int, name: str, path: Path) -> None:
        previous = ckpt.find_checkpoint(self.run_dir)
        shards = dict(ckpt.shard_files(previous, name)) if previous is not None else {}
        if k in shards:
            _link_or_copy(shards[k], path)

    def finish(self) -> None:
        """Receive and drop what a failed save left unreceived, so that the next exchange starts in step."""
        for k in list(self._pending):
            try:
                if self._pending[k] and "error" not in self._header(k):
                    for _ in self._pending[k]:
                        recv_file(self.pg, k, None)
            except GroupCommunicationError as e:
                self.log(f"rank {k} stopped sending its shard ({e})")
            self._pending[k] = []

    def group_stats(self, stats: dict, own_counters: dict) -> dict:
        """Rank 0's stats.json content with the group's totals, digests and per-rank counters (`own_counters`: rank 0's)."""
        ranks = [{"rank": 0, **own_counters}]
        digests = list(stats["rank_weight_digests"])
        for k in range(1, self.ranks):
            header = self._headers.get(k, {})
            counters = header.get("counters", {})
            digests.append(header.get("digest"))
            ranks.append({"rank": k, **counters} if counters else {"rank": k, "shard": "of the previous checkpoint"})
            for name in SUMMED:
                stats[name] += counters.get(name, 0)
            for source, count in counters.get("rollouts_dropped_stale", {}).items():
                stats["rollouts_dropped_stale"][source] = stats["rollouts_dropped_stale"].get(source, 0) + count
            for track, time_ms in counters.get("best_race_time_ms", {}).items():
                best = stats["best_race_time_ms"].get(track)
                stats["best_race_time_ms"][track] = time_ms if best is None else min(best, time_ms)
        return {**stats, "learners": self.ranks, "rank_weight_digests": digests, "ranks": ranks}
