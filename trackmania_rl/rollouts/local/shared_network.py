"""The lock-guarded shared network between the learner and the collectors (DESIGN §2).

The learner publishes its online weights, with their policy version, into an uncompiled network living in
shared memory; collectors copy the weights into their own (possibly compiled) inference network when the
version moved. A collector thus always knows which policy version it acts with.
"""

from __future__ import annotations

import torch


class SharedNetwork:
    """An uncompiled network in shared memory, a lock, and a version counter (0 = never published).

    Build it in the parent before starting the collectors and pass it to them as a process argument.
    """

    def __init__(self, network: torch.nn.Module, mp_context):
        self.network = network.cpu()
        self.network.share_memory()
        self.lock = mp_context.Lock()
        self._version = mp_context.Value("q", 0, lock=False)  # guarded by self.lock

    @property
    def version(self) -> int:
        return int(self._version.value)

    def publish(self, version: int, weights: dict) -> None:
        """Copy `weights` (name -> tensor, any device) in as policy `version`."""
        with self.lock, torch.no_grad():
            for name, tensor in self.network.state_dict().items():
                tensor.copy_(weights[name].detach())
            self._version.value = int(version)

    def fetch_into(self, copy_weights, known_version: int) -> int:
        """If a newer version exists, call `copy_weights(shared_network)` under the lock.

        Returns the version now held by the caller (unchanged when nothing newer was published).
        """
        if self._version.value == known_version:  # cheap unlocked peek; re-checked under the lock
            return known_version
        with self.lock:
            version = int(self._version.value)
            if version != known_version:
                copy_weights(self.network)
            return version
