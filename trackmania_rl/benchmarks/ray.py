"""Ray source figures (issue 14, DESIGN §5), on real clusters of loopback nodes on this machine, learner not training.

- `ray.actions_per_s_ratio`: actions/s of N Ray collector actors ÷ N local collector processes, same machine, same
  config, same count, each counted over the same window after each producer's warm-up race; the two kinds are
  measured in back-to-back pairs (order alternated), 4 pairs of 20 s windows, N = 1 and 2; per N the median of the
  pairs' ratios; the figure is the smaller of the two. Target >= 0.95. Each `ray.actions_per_s_n{N}` line also gives
  both kinds' per-action stage times (`StageTimes`), which name where they differ.
- `ray.weight_copies_per_node_per_publish`: after a publish that every actor has pulled, with the actors paused
  and no race in flight, each node's object-store bytes ÷ the weights object's size, on a two-node cluster with
  2 actors per node (`weight_copies_per_node`); the figure is the largest over the nodes. Target 1. Also says
  whether each actor's arrays are read-only views of the object store (no private copy).
- `ray.ingest_fraction`: learner time to take one race (`source.get`: the race off the source's receiver thread's
  queue, array views back into lists) and store it (`ingest_envelope`) ÷ that race's play time. Median. Target <= 0.02.
- `ray.ingest_stages_ms`: where that time goes, median ms per race, Ray beside a local collector's races taken off
  their queue (`pipeline.measure_ingest`, same count of races, right after): take (Ray: the unpacking and the rest of
  `get`, its wait and bookkeeping; local: the queue read, its unpickling and the unpacking), validate (the contract's
  check), store (the ingest less the check), total; and, off the learner's thread, what the Ray source's receiver
  paid per race: its share of the answer's `ray.get`, the next handoff's call (`receiver_*`).
- `ray.cpu_percent_one_actor` (Linux): where the CPU goes while one actor plays and the learner takes its races, % of
  a core over a window: the actor's busiest thread (its game) and its other threads (sender, status polls, handoffs,
  Ray's own), each of Ray's node processes (raylet, GCS, policy store, log monitor, ...) and the driver (the learner's
  side: the source's receiver thread and the intake): what a Ray actor costs beside its game.
- the per-rollout and per-publish costs docs/cluster.md's estimate starts from: race MB, publish ms and MB.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import ray
import torch
import torch.multiprocessing as torch_mp

from trackmania_rl.agents.iqn import make_network
from trackmania_rl.benchmarks.pipeline import (
    GAME_BACKEND,
    default_config_copy,
    ingest_stages_ms,
    local_actions_per_s,
    local_ingest,
    measure_ingest,
    source_actions_per_s,
)
from trackmania_rl.games import float_layout_for
from trackmania_rl.learner.learner import Learner
from trackmania_rl.rollouts.local.shared_network import SharedNetwork
from trackmania_rl.rollouts.ray import cluster
from trackmania_rl.rollouts.ray.source import MB, RaySource

QUIET_TIMEOUT_S = 60.0
# the actor's timings reported with the N figures, ms per action
ACTOR_TIMINGS = ("inference_ms", "game_step_ms")


def _quiet_log(message: str) -> None:
    return None


def _ray_source(live, count: int) -> RaySource:
    return RaySource(count, live, GAME_BACKEND, _quiet_log)


def _run_ray(live, weights, count: int, window_s: float, on_envelope=None, actor_timings=None) -> float:
    """Actions/s of `count` actors (`source_actions_per_s`); each actor's timings over the window (the actor's
    `stats`: its decisions and its game's steps, per action) appended to `actor_timings`."""
    source = _ray_source(live, count)
    source.publish(1, weights)
    source.start()
    try:
        source_actions_per_s(source, count, 0.0)  # every actor has played: its timings start with the window
        ray.get([slot.handle.stats.remote() for slot in source.slots])
        rate = source_actions_per_s(source, count, window_s, on_envelope)
        if actor_timings is not None:
            actor_timings += [stats["timings"] for stats in ray.get([slot.handle.stats.remote() for slot in source.slots])]
        return rate
    finally:
        _stop_actors(source)


class StageTimes:
    """The per-action stage times of the races seen (end_race_stats `instrumentation__<stage>`, ns per action, as
    the game measures them; they add up to the race's wall time): where two kinds of producer differ (in a Ray actor
    every stage may also wait for the interpreter lock while the actor's other threads run)."""

    PREFIX = "instrumentation__"

    def __init__(self):
        self.ns: dict[str, list[float]] = {}

    def __call__(self, envelope) -> None:
        for key, value in envelope[1].items():
            if key.startswith(self.PREFIX):
                self.ns.setdefault(key[len(self.PREFIX) :], []).append(value)

    def medians_us(self) -> dict[str, float]:
        return {stage: round(statistics.median(values) / 1e3, 1) for stage, values in sorted(self.ns.items())}


def _stop_actors(source: RaySource) -> None:
    """Stop the actors and the store, staying connected (the source did not connect this process)."""
    source.stop()
    deadline = time.monotonic() + 30  # wait until the cluster has their CPUs back
    while time.monotonic() < deadline and ray.available_resources().get("CPU", 0) < ray.cluster_resources().get("CPU", 0):
        time.sleep(0.2)


def node_object_store_bytes() -> dict[str, int]:
    """Bytes used in each live node's object store, by node IP."""
    from ray._private import internal_api

    used = {}
    for node in ray.nodes():
        if node["Alive"]:
            reply = internal_api.node_stats(node["NodeManagerAddress"], node["NodeManagerPort"], include_memory_info=False)
            used[node["NodeManagerAddress"]] = int(reply.store_stats.object_store_bytes_used)
    return used


def quiesce(source: RaySource, timeout_s: float = QUIET_TIMEOUT_S) -> None:
    """Pause the actors and take every race they put, until none is in flight and none is being played."""
    source.pause()
    deadline = time.monotonic() + timeout_s
    previous = None
    while time.monotonic() < deadline:
        while source.get(timeout_s=0.3) is not None:
            pass
        stats = ray.get([slot.handle.stats.remote() for slot in source.slots])
        played = [s["races_played"] for s in stats]
        if all(s["paused"] and s["in_flight"] == 0 for s in stats) and not source.pending and played == previous:
            return
        previous = played
        time.sleep(1.0)
    raise RuntimeError(f"the actors did not go quiet within {timeout_s:g} s")


def _stable_object_store_bytes(settle_s: float = 2.0, timeout_s: float = 20.0) -> dict[str, int]:
    """Each node's object-store bytes once they stopped changing for `settle_s` (objects are freed asynchronously)."""
    used, stable_since = node_object_store_bytes(), time.monotonic()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() - stable_since < settle_s and time.monotonic() < deadline:
        time.sleep(0.25)
        now = node_object_store_bytes()
        if now != used:
            used, stable_since = now, time.monotonic()
    return used


def weight_copies_per_node(source: RaySource, version: int, weights: dict) -> dict:
    """Publish `weights` as `version` through the source, have every actor pull it, and count the new copies in each
    node's object store: the growth of its bytes ÷ the weights object's size. The actors are paused with no race in
    flight, and the previous weights are kept alive meanwhile, so that nothing else comes or goes."""
    quiesce(source)
    previous = source.weights_ref  # noqa: F841 (held: its copies must not be freed between the two readings)
    before = _stable_object_store_bytes()
    source.publish(version, weights)
    ray.get(source.store.status.remote())  # the store has it (the learner's calls to it run in order)
    held = ray.get([slot.handle.hold_newest_weights.remote() for slot in source.slots])
    if any(h["version"] != version for h in held):
        raise RuntimeError(f"not every actor pulled version {version}: {held}")
    after = _stable_object_store_bytes()
    ref = source.weights_ref
    location = ray.experimental.get_object_locations([ref])[ref]
    size = location["object_size"]
    ip_of = {node["NodeID"]: node["NodeManagerAddress"] for node in ray.nodes()}
    actors_per_node: dict[str, int] = {}
    for h in held:
        ip = ip_of[h["node_id"]]
        actors_per_node[ip] = actors_per_node.get(ip, 0) + 1
    return {
        "object_bytes": size,
        "copies": {ip: round((after.get(ip, 0) - before.get(ip, 0)) / size, 3) for ip in actors_per_node},
        "actors_per_node": actors_per_node,
        "all_views_of_object_store": all(h["views_of_object_store"] for h in held),
        "nodes_listed_by_ray": len(location["node_ids"]),
    }


def _cpu_seconds(stat_path: str) -> tuple[int, float]:
    """(session id, user + system CPU seconds) of a process or thread, from its /proc stat file."""
    with open(stat_path) as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[3]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _process_name(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        words = f.read().split(b"\0")
    for word in words:  # the executable's or the Python script's name, or Ray's process title
        name = os.path.basename(word.decode(errors="replace"))
        if name and not name.startswith("python") and not name.startswith("-"):
            return name.split(" ")[0]
    return "?"


def _cpu_by_process(session: int) -> dict[str, float]:
    """CPU seconds of the node's processes (those of `session`, by name, summed) and of this process ("driver")."""
    seconds: dict[str, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            sid, cpu = _cpu_seconds(f"/proc/{entry}/stat")
            name = "driver" if int(entry) == os.getpid() else _process_name(int(entry)) if sid == session else None
        except OSError:  # gone meanwhile
            continue
        if name is not None:
            seconds[name] = seconds.get(name, 0.0) + cpu
    return seconds


def _cpu_by_thread(pid: int) -> dict[int, float]:
    seconds = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            seconds[int(tid)] = _cpu_seconds(f"/proc/{pid}/task/{tid}/stat")[1]
        except OSError:
            continue
    return seconds


def cpu_percent_one_actor(live, weights, node, window_s: float) -> dict:
    """% of a core each part takes while one actor plays and its races are taken (`ray.cpu_percent_one_actor`)."""
    source = _ray_source(live, 1)
    source.publish(1, weights)
    source.start()
    try:
        source_actions_per_s(source, 1, 0.0)  # its warm-up race came
        actor_pid = ray.get(source.slots[0].handle.stats.remote())["pid"]
        session = os.getsid(node.process.pid)
        processes, threads, start = _cpu_by_process(session), _cpu_by_thread(actor_pid), time.perf_counter()
        actions = 0
        while time.perf_counter() - start < window_s:
            envelope = source.get(timeout_s=0.5)
            actions += 0 if envelope is None else len(envelope[0]["actions"])
        elapsed = time.perf_counter() - start
        processes_after, threads_after = _cpu_by_process(session), _cpu_by_thread(actor_pid)
    finally:
        _stop_actors(source)
    per_thread = sorted((threads_after[t] - threads.get(t, 0.0) for t in threads_after), reverse=True)
    per_process = {name: 100 * (cpu - processes.get(name, 0.0)) / elapsed for name, cpu in processes_after.items()}
    actor_name = next((name for name in per_process if "CollectorActor" in name), None)
    by_share = sorted(per_process.items(), key=lambda kv: -kv[1])
    others = {name: round(share, 2) for name, share in by_share if name != actor_name and share >= 0.05}
    return {
        "actor_game_thread": round(100 * per_thread[0] / elapsed, 2),
        "actor_other_threads": round(100 * sum(per_thread[1:]) / elapsed, 2),
        "processes": others,
        "outside_the_game_thread": round(100 * sum(per_thread[1:]) / elapsed + sum(others.values()), 2),
        "actions_per_s": round(actions / elapsed, 1),
        "window_s": round(elapsed, 1),
    }


def run(args):
    torch.set_num_threads(1)
    window_s = 15.0 if args.quick else 20.0
    repeats = 1 if args.quick else 4  # alternated pairs: this machine's speed drifts by more than the ratio's margin
    workdir = Path(tempfile.mkdtemp(prefix="ray_benchmark_"))
    head = worker = None
    try:
        config_path, live = default_config_copy(workdir)
        cfg = live.current
        layout = float_layout_for(cfg)
        network = make_network(cfg, layout, len(cfg.inputs))
        weights = {k: v.detach() for k, v in network.state_dict().items()}
        ctx = torch_mp.get_context("spawn")
        shared = SharedNetwork(make_network(cfg, layout, len(cfg.inputs)), ctx)
        shared.publish(1, weights)

        head = cluster.LocalNode.head(num_cpus=2, object_store_bytes=256 * MB)
        cluster.use_token_file(head.token_path)
        cluster.connect(head.address)

        # the costs of one publish: numpy conversion + one put
        probe = _ray_source(live, 0)
        publish_ms = []
        for version in range(1, 12):
            start = time.perf_counter()
            probe.publish(version, weights)
            publish_ms.append(1000 * (time.perf_counter() - start))
        weights_mb = ray.experimental.get_object_locations([probe.weights_ref])[probe.weights_ref]["object_size"] / MB
        _stop_actors(probe)
        publish = round(statistics.median(publish_ms[1:]), 2)
        yield {"figure": "ray.publish_ms", "value": publish, "unit": "ms", "weights_mb": round(weights_mb, 3)}

        # ingest: one actor feeding a learner that does not train
        n_races = 8 if args.quick else 30
        source = _ray_source(live, 1)
        learner = Learner(live, layout, torch.device("cpu"), workdir / "run", source=source, log=_quiet_log, resume=False)
        source.publish(1, weights)
        source.start()
        try:
            ingest = measure_ingest(source, learner, n_races)
        finally:
            _stop_actors(source)
        yield {
            "figure": "ray.ingest_fraction",
            "value": round(statistics.median(ingest["fractions"]), 5),
            "unit": "ratio",
            "target": "<= 0.02",
            "take_ms_median": round(statistics.median(ingest["take_ms"]), 2),
            "rollout_play_s_median": round(statistics.median(ingest["play_s"]), 2),
            "race_frames_mb_median": round(statistics.median(ingest["frames_mb"]), 3),
            "rollouts": len(ingest["fractions"]),
        }
        local = local_ingest(ctx, config_path, live, layout, shared, workdir / "run_local", n_races)
        ray_stages = ingest_stages_ms(ingest)
        yield {
            "figure": "ray.ingest_stages_ms",
            "value": ray_stages["total"],
            "unit": "ms",
            "ray": ray_stages,
            "local": ingest_stages_ms(local),
            "local_ingest_fraction": round(statistics.median(local["fractions"]), 5),
            "local_rollout_play_s_median": round(statistics.median(local["play_s"]), 2),
        }

        if os.path.isdir("/proc/self/task"):
            shares = cpu_percent_one_actor(live, weights, head, 2 * window_s)
            yield {"figure": "ray.cpu_percent_one_actor", "value": shares["outside_the_game_thread"], "unit": "% of a core", **shares}

        # throughput against local processes, alternated
        ratios = {}
        for count in (1, 2):
            local_runs, ray_runs, timings = [], [], []
            stages = {"local": StageTimes(), "ray": StageTimes()}
            for repeat in range(repeats):
                order = ("local", "ray") if repeat % 2 == 0 else ("ray", "local")
                for kind in order:
                    if kind == "local":
                        local_runs.append(local_actions_per_s(ctx, config_path, shared, count, window_s, stages["local"]))
                    else:
                        ray_runs.append(_run_ray(live, weights, count, window_s, on_envelope=stages["ray"], actor_timings=timings))
            local, remote = statistics.median(local_runs), statistics.median(ray_runs)
            # each repeat's two windows are back to back: their ratio cancels the machine's drift, which moves the
            # speed of both kinds by more than the 5 % margin between repeats
            paired = [r / loc for r, loc in zip(ray_runs, local_runs, strict=True)]
            ratios[count] = statistics.median(paired)
            yield {
                "figure": f"ray.actions_per_s_n{count}",
                "value": round(remote, 1),
                "unit": "actions/s",
                "local_actions_per_s": round(local, 1),
                "paired_ratios": [round(r, 3) for r in paired],
                "ray_runs": [round(r, 1) for r in ray_runs],
                "local_runs": [round(r, 1) for r in local_runs],
                "window_s": window_s,
                "stage_us_per_action": {kind: times.medians_us() for kind, times in stages.items()},
                "ray_actor_ms_per_action": {key: round(statistics.median(t[key] for t in timings), 3) for key in ACTOR_TIMINGS},
            }
        yield {
            "figure": "ray.actions_per_s_ratio",
            "value": round(min(ratios.values()), 3),
            "unit": "ratio",
            "target": ">= 0.95",
            "ratio_n1": round(ratios[1], 3),
            "ratio_n2": round(ratios[2], 3),
        }

        # one weight copy per node: a second node, 2 actors on each
        worker = cluster.LocalNode.worker(head.address, head.token_path, num_cpus=2, object_store_bytes=256 * MB)
        worker.wait_joined()
        source = _ray_source(live, 4)
        source.publish(1, weights)
        source.start()
        try:
            source_actions_per_s(source, 4, 0.0)  # every actor has played (and pulled) once
            copies = weight_copies_per_node(source, 2, weights)
        finally:
            _stop_actors(source)
        yield {
            "figure": "ray.weight_copies_per_node_per_publish",
            "value": max(copies["copies"].values()),
            "unit": "copies",
            "target": "1",
            **copies,
        }
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for node in (worker, head):
            if node is not None:
                node.stop()
        shutil.rmtree(workdir, ignore_errors=True)
