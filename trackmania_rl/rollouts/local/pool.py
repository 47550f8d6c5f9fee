"""Starting, watching and restarting the collector processes (DESIGN §2, §6).

Each collector gets its own bounded queue and a heartbeat it refreshes while alive. A collector that
died, or whose heartbeat is older than `collector_stall_timeout_s`, is replaced with a fresh process
and a fresh queue (a process killed mid-write leaves a half-written rollout in its old queue, which
reads as end-of-file: see `_spawn`); the run goes on.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class CollectorSlot:
    index: int
    process: object = None
    queue: object = None
    heartbeat: object = None  # mp.Value("d"): time.time() of the collector's last sign of life
    restarts: int = 0
    rollouts_since_start: int = 0


class CollectorPool:
    """`target(index, rollout_queue, heartbeat, stop_event, *args)` is the collector's main function."""

    def __init__(self, mp_context, target: Callable, args: tuple, count: int, queue_size: int, log: Callable[[str], None] = print):
        self.ctx = mp_context
        self.target = target
        self.args = args
        self.queue_size = queue_size
        self.log = log
        self.stop_event = mp_context.Event()
        self.slots = [CollectorSlot(index=i) for i in range(count)]
        self._next_slot = 0

    def start(self) -> None:
        for slot in self.slots:
            self._spawn(slot)

    def _spawn(self, slot: CollectorSlot) -> None:
        slot.queue = self.ctx.Queue(maxsize=self.queue_size)
        slot.heartbeat = self.ctx.Value("d", time.time(), lock=False)
        slot.process = self.ctx.Process(
            target=self.target,
            args=(slot.index, slot.queue, slot.heartbeat, self.stop_event) + tuple(self.args),
            name=f"collector-{slot.index}",
            daemon=True,
        )
        slot.process.start()
        # The collector holds its own copy of the queue's write end now; close ours (multiprocessing keeps
        # it as Queue._writer). A collector that dies in the middle of writing a rollout then leaves a
        # pipe whose reader meets end-of-file (handled in get_rollout) instead of waiting for ever for
        # the rest of the message: while any process holds the write end open, the read blocks.
        slot.queue._writer.close()
        slot.rollouts_since_start = 0
        self.log(f"collector {slot.index} started (pid {slot.process.pid})")

    def check(self, stall_timeout_s: float) -> list[int]:
        """Restart dead or stalled collectors; returns the indices restarted."""
        restarted = []
        now = time.time()
        for slot in self.slots:
            process = slot.process
            if not process.is_alive():
                reason = f"died with exit code {process.exitcode}"
            elif now - slot.heartbeat.value > stall_timeout_s:
                reason = f"gave no sign of life for {now - slot.heartbeat.value:.0f} s"
            else:
                continue
            self.log(f"collector {slot.index} {reason}: restarting it")
            self._kill(slot)
            slot.restarts += 1
            self._spawn(slot)
            restarted.append(slot.index)
        return restarted

    def get_rollout(self, timeout_s: float):
        """The next rollout of any collector, serving queues in turn; None if none came within the timeout."""
        deadline = time.perf_counter() + timeout_s
        while True:
            for _ in range(len(self.slots)):
                slot = self.slots[self._next_slot]
                self._next_slot = (self._next_slot + 1) % len(self.slots)
                try:
                    item = slot.queue.get_nowait()
                    slot.rollouts_since_start += 1
                    return slot.index, item
                except queue.Empty:
                    continue
                except (EOFError, OSError, ValueError) as e:  # a queue broken by a killed writer
                    self.log(f"collector {slot.index}'s queue is broken ({type(e).__name__}); it will be restarted")
                    slot.heartbeat.value = 0.0
            if time.perf_counter() >= deadline:
                return None
            time.sleep(0.002)

    def _kill(self, slot: CollectorSlot, grace_s: float = 2.0) -> None:
        process = slot.process
        if process is None:
            return
        if process.is_alive():
            process.terminate()
            process.join(grace_s)
        if process.is_alive():
            process.kill()
            process.join(grace_s)
        if slot.queue is not None:
            slot.queue.cancel_join_thread()
            slot.queue.close()

    def stop(self, grace_s: float = 5.0) -> None:
        """Ask every collector to stop, then terminate what is left: no orphan survives."""
        self.stop_event.set()
        deadline = time.time() + grace_s
        for slot in self.slots:
            if slot.process is None:
                continue
            # drain so a collector blocked on put() can see the stop event
            while slot.process.is_alive() and time.time() < deadline:
                try:
                    slot.queue.get_nowait()
                except Exception:
                    pass
                slot.process.join(0.05)
        for slot in self.slots:
            self._kill(slot)

    def summary(self) -> list[str]:
        return [
            f"collector {slot.index}: {slot.rollouts_since_start} rollouts since its last start, restarted {slot.restarts} time(s)"
            for slot in self.slots
        ]
