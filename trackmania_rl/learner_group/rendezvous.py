"""How the ranks of a learner group meet, and the only sockets they listen on (docs/cluster.md, "What is exposed").

Rank 0 binds a listening socket on the group's address (loopback for local ranks, its node's cluster address under
Ray) at a free port and hands it to torch's TCPStore (`master_listen_fd`): torch's own store server would listen on
every interface. Every rank then builds its process groups itself (ProcessGroupGloo with one device bound to the
rank's own address, ProcessGroupNCCL for CUDA gradients), not through torch.distributed's global state:
- `training`: gloo, the agreement before each chunk of steps (learner_group/agreement.py), used by the training thread;
- `gradients`: the gradient all_reduce of every step, on the step's device: `training` itself on the CPU, NCCL on CUDA;
- `control`: gloo, used by the main threads only: the start state, the buffer shards at each save.
Two threads never share a group, so their collectives cannot interleave differently on two ranks.
Every collective waits at most `timeout_s`; a peer that died fails it at once (GroupCommunicationError).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist


class LearnerGroupError(RuntimeError):
    """The learner group cannot go on (a rank failed, did not start, or answered nothing); the message names the rank."""


class GroupCommunicationError(LearnerGroupError):
    """A collective failed: a peer died (connection closed) or did not answer within the group's timeout."""


def wait(work, what: str) -> None:
    """Wait for a collective; GroupCommunicationError naming `what` when it fails."""
    try:
        work.wait()
    except RuntimeError as e:
        raise GroupCommunicationError(f"{what} failed: {' '.join(str(e).split())[:300]}") from None


class StoreServer:
    """Rank 0's key-value store (torch's TCPStore) on `host` only, at a free port it picked."""

    def __init__(self, host: str, ranks: int, timeout_s: float):
        self.host = host
        listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind((host, 0))
            listener.listen(max(16, 2 * ranks))
            self.port = listener.getsockname()[1]
            self.store = dist.TCPStore(
                host,
                self.port,
                ranks,
                is_master=True,
                timeout=timedelta(seconds=timeout_s),
                wait_for_workers=False,
                master_listen_fd=listener.fileno(),
            )
        except BaseException:
            listener.close()
            raise
        # The store owns the listening descriptor from here on and closes it when the last reference to it goes (a
        # rank's groups hold it too). Closing it here as well would close the descriptor a second time, by then
        # perhaps another file's, or pull the socket from under a store still in use.
        listener.detach()

    def close(self) -> None:
        """Drop this server's reference to the store; it stops listening once the groups built on it are gone too."""
        self.store = None


def connect_store(host: str, port: int, ranks: int, timeout_s: float):
    return dist.TCPStore(host, port, ranks, is_master=False, timeout=timedelta(seconds=timeout_s))


@dataclass
class GroupConnection:
    """One rank's process groups (see the module docstring) and the group's store."""

    rank: int
    ranks: int
    store: object
    bind_host: str
    timeout_s: float
    device: torch.device
    training: object = field(default=None, repr=False)
    gradients: object = field(default=None, repr=False)
    control: object = field(default=None, repr=False)

    @classmethod
    def join(cls, store, rank: int, ranks: int, bind_host: str, timeout_s: float, device) -> GroupConnection:
        """Build this rank's groups; returns once every rank has built them (or raises after `timeout_s`)."""
        connection = cls(rank, ranks, store, bind_host, timeout_s, torch.device(device))
        connection.training = connection._gloo("training", timeout_s)
        connection.control = connection._gloo("control", max(timeout_s, CONTROL_TIMEOUT_S))
        if connection.device.type == "cuda":
            connection.gradients = connection._nccl("gradients", timeout_s)
        else:
            connection.gradients = connection.training
        return connection

    def _gloo(self, name: str, timeout_s: float):
        options = dist.ProcessGroupGloo._Options()
        options._devices = [dist.ProcessGroupGloo.create_device(hostname=self.bind_host)]
        options._timeout = timedelta(seconds=timeout_s)
        try:
            return dist.ProcessGroupGloo(dist.PrefixStore(name, self.store), self.rank, self.ranks, options)
        except RuntimeError as e:
            raise GroupCommunicationError(
                f"rank {self.rank}: the {name} group could not connect: {' '.join(str(e).split())[:300]}"
            ) from None

    def _nccl(self, name: str, timeout_s: float):
        from torch.distributed import ProcessGroupNCCL  # CUDA builds only

        torch.cuda.set_device(self.device)
        options = ProcessGroupNCCL.Options()
        options._timeout = timedelta(seconds=timeout_s)
        return ProcessGroupNCCL(dist.PrefixStore(name, self.store), self.rank, self.ranks, options)


# The control group carries whole buffer shards while rank 0 writes its own checkpoint files: a save may keep a rank
# waiting in `send` longer than a train step would (a slow disk), so it waits this long at least.
CONTROL_TIMEOUT_S = 600.0
