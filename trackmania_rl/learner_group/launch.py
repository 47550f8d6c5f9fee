"""Ranks 1..N-1 as local processes of this machine (the spawn start method), and what rank 0 watches of them.

The group's store and every rank's sockets are on the loopback address: nothing of a local group is reachable from
another machine. A rank process ignores Ctrl-C (the terminal sends it to every process; rank 0 stops the group) and
is killed by the kernel when rank 0 dies, even by SIGKILL (Linux), as the collectors are.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile

import torch

from trackmania_rl.config.loader import ConfigError
from trackmania_rl.learner_group.rank import rank_process

LOCAL_HOST = "127.0.0.1"
STOP_GRACE_S = 10.0


def max_local_ranks() -> int:
    """One core per rank at least."""
    return os.cpu_count() or 1


class LocalRanks:
    placement = "local processes"
    shares_this_machine = True  # the ranks split this machine's cores and GPUs

    def __init__(self):
        self.processes: dict[int, multiprocessing.Process] = {}
        self.workdir: str | None = None  # the ranks' folders, removed with them (a killed rank leaves its own)

    def check(self, ranks: int, device, cfg, collectors: list[int]) -> None:
        """ConfigError when this machine cannot hold `ranks` ranks."""
        if ranks > max_local_ranks():
            raise ConfigError(f"--learners {ranks}: at most {max_local_ranks()} local ranks here (one CPU core each)")
        if torch.device(device).type == "cuda":
            gpus = torch.cuda.device_count()
            if ranks > gpus:
                raise ConfigError(f"--learners {ranks} on CUDA: one GPU per NCCL rank, and this machine has {gpus}")

    def host_of_rank0(self) -> str:
        return LOCAL_HOST

    def bind_host(self, rank: int) -> str:
        return LOCAL_HOST

    def launch(self, specs: list[dict]) -> None:
        context = multiprocessing.get_context("spawn")
        self.workdir = tempfile.mkdtemp(prefix="tmrl_group_")
        for spec in specs:
            spec = {**spec, "workdir_parent": self.workdir}
            process = context.Process(target=rank_process, args=(spec,), name=f"rank-{spec['rank']}", daemon=False)
            process.start()
            self.processes[spec["rank"]] = process

    def dead(self) -> dict[int, str]:
        """Ranks whose process has ended, and how."""
        return {
            rank: f"its process (pid {p.pid}) ended with exit code {p.exitcode}"
            for rank, p in self.processes.items()
            if p.exitcode is not None
        }

    def where(self, rank: int) -> str:
        process = self.processes.get(rank)
        return f"pid {process.pid}" if process is not None else "?"

    def kill(self, rank: int) -> None:
        process = self.processes.get(rank)
        if process is not None and process.exitcode is None:
            process.kill()

    def stop(self, grace_s: float = STOP_GRACE_S) -> dict[int, int | None]:
        """Wait for every rank to end by itself within `grace_s`, kill the others. Their exit codes."""
        for process in self.processes.values():
            process.join(grace_s)
        for process in self.processes.values():
            if process.exitcode is None:
                process.kill()
                process.join(5)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return {rank: p.exitcode for rank, p in self.processes.items()}
