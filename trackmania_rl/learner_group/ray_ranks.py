"""Ranks 1..N-1 as Ray actors, one per node of the cluster of `--ray ADDRESS` (optional install: the ray extra).

Rank 0 (scripts/train.py, the Ray driver) reserves a placement group of N bundles with the STRICT_SPREAD strategy:
one bundle per node, bundle 0 held on the driver's own node (Ray's `node:<ip>` resource) for rank 0 and its
collectors, bundle k for rank k's actor and its local collectors (1 CPU for the learner + one per collector; a GPU
each on CUDA). A cluster that cannot place them (fewer nodes than ranks, too few CPUs or GPUs on one) is refused at
start with the numbers, nothing left reserved. The rendezvous address is the driver's node address as Ray knows it,
the port one rank 0 picks: nobody types it. Each rank's sockets listen on its own node's address (the placement
group's table says which), never on every interface. An actor is never restarted: a rank that dies stops the run.
"""

from __future__ import annotations

import time

import ray
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from trackmania_rl.config.loader import ConfigError
from trackmania_rl.learner_group.rank import run_rank
from trackmania_rl.rollouts.ray import cluster

PLACE_TIMEOUT_S = 30.0
DEAD_CHECK_PERIOD_S = 0.5
STOP_GRACE_S = 10.0


class RankActor:
    """A rank's process on its node: `run(spec)` is its whole life (learner_group/rank.py), returning its exit code."""

    def run(self, spec: dict) -> int:
        return run_rank(spec)


class RayRanks:
    placement = "Ray actors, one per node"
    shares_this_machine = False  # each rank has a node of its own

    def __init__(self, address: str):
        self.address = address
        self.group = None
        self.connected_here = False
        self.node_ips: dict[int, str] = {}
        self.bundles: list[dict] = []
        self.actors: dict[int, object] = {}
        self.runs: dict[int, object] = {}
        self._dead: dict[int, str] = {}
        self._dead_checked_at = 0.0

    def check(self, ranks: int, device, cfg, collectors: list[int]) -> None:
        """Connect to the cluster and reserve one node per rank. ConfigError (nothing left reserved) when it cannot."""
        try:
            if not ray.is_initialized():
                cluster.connect(self.address)  # keeps the run's signal handlers
                self.connected_here = True
        except Exception as e:  # unreachable, wrong token...
            raise ConfigError(f"--ray {self.address}: cannot join the Ray cluster ({type(e).__name__}: {e})") from None
        nodes = {node["NodeID"]: node for node in ray.nodes() if node["Alive"]}
        driver_ip = nodes[ray.get_runtime_context().get_node_id()]["NodeManagerAddress"]
        gpus = sum(1 for node in nodes.values() if node["Resources"].get("GPU", 0) >= 1)
        if ranks > len(nodes):
            self.close()
            raise ConfigError(f"--learners {ranks}: the Ray cluster at {self.address} has {len(nodes)} node(s), one rank per node")
        if device.type == "cuda" and ranks > gpus:
            self.close()
            raise ConfigError(f"--learners {ranks} on CUDA: one GPU per NCCL rank, and {gpus} node(s) of the Ray cluster have one")
        gpu = {"GPU": 1} if device.type == "cuda" else {}
        self.bundles = [{"CPU": 1 + collectors[k], **gpu} for k in range(ranks)]
        self.bundles[0][f"node:{driver_ip}"] = 0.001  # rank 0 is this process: its bundle on this node
        self.group = placement_group(self.bundles, strategy="STRICT_SPREAD")
        ready, _ = ray.wait([self.group.ready()], timeout=PLACE_TIMEOUT_S)
        if not ready:
            self.close()
            raise ConfigError(
                f"--learners {ranks}: the Ray cluster at {self.address} cannot place one rank per node within {PLACE_TIMEOUT_S:g} s "
                f"(bundles {self.bundles}; nodes: {_nodes_summary(nodes)})"
            )
        placed = placement_group_table(self.group)["bundles_to_node_id"]
        self.node_ips = {k: nodes[node_id]["NodeManagerAddress"] for k, node_id in placed.items()}

    def host_of_rank0(self) -> str:
        return self.node_ips[0]

    def bind_host(self, rank: int) -> str:
        return self.node_ips[rank]

    def launch(self, specs: list[dict]) -> None:
        for spec in specs:
            k = spec["rank"]
            bundle = self.bundles[k]
            actor = (
                ray.remote(RankActor)
                .options(
                    num_cpus=bundle["CPU"],
                    num_gpus=bundle.get("GPU", 0),
                    max_restarts=0,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=k),
                    name=None,
                )
                .remote()
            )
            self.actors[k] = actor
            self.runs[k] = actor.run.remote(spec)

    def dead(self) -> dict[int, str]:
        now = time.monotonic()
        if now - self._dead_checked_at < DEAD_CHECK_PERIOD_S:
            return dict(self._dead)
        self._dead_checked_at = now
        pending = [ref for k, ref in self.runs.items() if k not in self._dead]
        if pending:
            ready, _ = ray.wait(pending, num_returns=len(pending), timeout=0)
            for k, ref in self.runs.items():
                if ref in ready:
                    try:
                        self._dead[k] = f"its actor on {self.node_ips[k]} ended with exit code {ray.get(ref, timeout=5)}"
                    except Exception as e:
                        self._dead[k] = f"its actor on {self.node_ips[k]} died: {type(e).__name__}"
        return dict(self._dead)

    def where(self, rank: int) -> str:
        return f"actor on {self.node_ips.get(rank, '?')}"

    def kill(self, rank: int) -> None:
        actor = self.actors.get(rank)
        if actor is not None:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                pass

    def stop(self, grace_s: float = STOP_GRACE_S) -> dict[int, int | None]:
        codes: dict[int, int | None] = {}
        try:
            if self.runs:
                ray.wait(list(self.runs.values()), num_returns=len(self.runs), timeout=grace_s)
            for k, ref in self.runs.items():
                try:
                    codes[k] = ray.get(ref, timeout=0)
                except Exception:
                    codes[k] = None
                    self.kill(k)
        finally:
            self.close()
        return codes

    def close(self) -> None:
        if self.group is not None:
            try:
                remove_placement_group(self.group)
            except Exception:
                pass
            self.group = None
        if self.connected_here and ray.is_initialized():
            ray.shutdown()
            self.connected_here = False


def _nodes_summary(nodes: dict) -> str:
    return ", ".join(f"{node['NodeManagerAddress']} ({node['Resources'].get('CPU', 0):g} CPU)" for node in nodes.values())
