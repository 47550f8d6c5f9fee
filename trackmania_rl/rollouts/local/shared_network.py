"""The lock-guarded shared network between the learner and the collectors (DESIGN §2).

The learner publishes its online weights, with their policy version, into an uncompiled network living in
shared memory; collectors copy the weights into their own (possibly compiled) inference network when the
version moved. A collector thus always knows which policy version it acts with.

The lock is a multiprocessing Lock, which a process killed while holding it never releases. So the holder
writes its pid into a shared value when it takes the lock; a process that waits longer than
`lock_step_s` looks at that pid, and when the holder is dead (gone, or a zombie not yet reaped) it breaks
the lock: it takes the dead holder's place (the semaphore stays taken and is released by its new holder,
which a multiprocessing Lock allows from any process) and goes on, logging it. Taking over rather than
releasing and racing for it again means two waiters never both break it: the take-over is a
compare-and-set of the holder's pid under a second lock held only for that instant. A holder that is alive
but slow is waited for, in bounded steps, with a log line at each. Readers only read the shared weights,
so a reader killed mid-copy leaves them intact.
"""

from __future__ import annotations

import os

import torch

from trackmania_rl.monitoring.status_line import print_line

LOCK_STEP_S = 5.0  # how long to wait on the lock before looking at its holder
NO_HOLDER = 0


def _log(message: str) -> None:
    print_line(f"[shared network {os.getpid()}] {message}")


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (a killed child not yet reaped by its parent
    still answers signals; on Linux its /proc state is 'Z')."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (macOS, Windows): os.kill said it exists
        return True
    # "pid (comm) S ...": the state follows the last ')' (comm may hold spaces and parentheses)
    state = stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]
    return state not in (b"Z", b"X")


class SharedNetwork:
    """An uncompiled network in shared memory, a lock, and a version counter (0 = never published).

    Build it in the parent before starting the collectors and pass it to them as a process argument.
    """

    def __init__(self, network: torch.nn.Module, mp_context, lock_step_s: float = LOCK_STEP_S):
        self.network = network.cpu()
        self.network.share_memory()
        self.lock = mp_context.Lock()
        self._version = mp_context.Value("q", 0, lock=False)  # guarded by self.lock
        self._holder = mp_context.Value("q", NO_HOLDER, lock=False)  # pid of the lock's holder, guarded by self.lock
        self._takeover = mp_context.Lock()  # makes "holder is still the dead pid -> holder is me" atomic
        self.lock_step_s = float(lock_step_s)
        self.locks_broken = 0  # in this process

    @property
    def version(self) -> int:
        return int(self._version.value)

    @property
    def holder(self) -> int:
        """The pid holding the lock now (0: nobody, or a holder between acquiring and writing its pid)."""
        return int(self._holder.value)

    def _acquire(self, purpose: str) -> None:
        """Take the lock, or the place of a dead holder; waits for a live holder in bounded steps."""
        waited = 0.0
        while not self.lock.acquire(timeout=self.lock_step_s):
            waited += self.lock_step_s
            holder = self.holder
            if holder != NO_HOLDER and holder != os.getpid() and not pid_alive(holder) and self._take_over_from(holder):
                self.locks_broken += 1
                _log(f"{purpose}: the lock was held by process {holder}, which is dead: lock broken, going on")
                return
            state = "alive" if holder != NO_HOLDER and pid_alive(holder) else "unknown"
            _log(f"{purpose}: still waiting for the lock after {waited:.0f} s (held by process {holder or '?'}, {state})")
        self._holder.value = os.getpid()

    def _take_over_from(self, dead_pid: int) -> bool:
        """Become the holder of a lock a dead process held (compare-and-set of the holder's pid)."""
        if not self._takeover.acquire(timeout=self.lock_step_s):
            return False
        try:
            if self.holder != dead_pid:  # someone else took over, or it changed hands meanwhile
                return False
            self._holder.value = os.getpid()
            return True
        finally:
            self._takeover.release()

    def _release(self) -> None:
        self._holder.value = NO_HOLDER  # before releasing: a holder of 0 is never taken for dead
        self.lock.release()

    def publish(self, version: int, weights: dict) -> None:
        """Copy `weights` (name -> tensor, any device) in as policy `version`."""
        self._acquire(f"publishing version {version}")
        try:
            with torch.no_grad():
                for name, tensor in self.network.state_dict().items():
                    tensor.copy_(weights[name].detach())
                self._version.value = int(version)
        finally:
            self._release()

    def fetch_into(self, copy_weights, known_version: int) -> int:
        """If a newer version exists, call `copy_weights(shared_network)` under the lock.

        Returns the version now held by the caller (unchanged when nothing newer was published).
        """
        if self._version.value == known_version:  # cheap unlocked peek; re-checked under the lock
            return known_version
        self._acquire("fetching weights")
        try:
            version = int(self._version.value)
            if version != known_version:
                copy_weights(self.network)
            return version
        finally:
            self._release()
