"""Starting, watching and restarting the collector processes (DESIGN §2, §6).

Each collector gets its own bounded queue and a heartbeat it refreshes while alive. A collector that
died, or whose heartbeat is older than `collector_stall_timeout_s`, is replaced with a fresh process
and a fresh queue (a process killed mid-write leaves a half-written rollout in its old queue, which
reads as end-of-file: see `_spawn`); the run goes on. Restarts back off while a collector keeps failing
right after its start, and a slot that fails too often is given up (`active_count()`); each distinct log
line is written once, with a count of its repeats at the next restart.
"""

from __future__ import annotations

import queue
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

RESTART_BACKOFF_S = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0)  # delay after the n-th failure in a row
HEALTHY_AFTER_S = 60.0  # a collector that ran this long (or delivered a race) ends a run of failures
MAX_RESTARTS = 10  # restarts of one slot within RESTART_WINDOW_S after which the slot is given up
RESTART_WINDOW_S = 600.0


class RepeatFilter:
    """Logs each distinct message once; repeats are counted and reported by `flush()` as one line each
    (`flush()` comes at every restart and at the end: a broken collector no longer fills the log)."""

    def __init__(self, log: Callable[[str], None]):
        self._log = log
        self._repeats: dict[str, int] = {}

    def __call__(self, message: str) -> None:
        if message in self._repeats:
            self._repeats[message] += 1
            return
        self.flush()  # a new message: first say how often the previous ones came again
        self._repeats[message] = 0
        self._log(message)

    def flush(self) -> None:
        for message, count in self._repeats.items():
            if count:
                self._log(f"(repeated {count} more time(s)) {message}")
                self._repeats[message] = 0

    def forget(self) -> None:
        """Report the counts, then let every message be logged again (at a restart)."""
        self.flush()
        self._repeats.clear()


@dataclass
class CollectorSlot:
    index: int
    process: object = None
    queue: object = None  # None while the slot waits for a restart or was given up
    heartbeat: object = None  # mp.Value("d"): time.time() of the collector's last sign of life
    restarts: int = 0
    rollouts_since_start: int = 0
    started_at: float = 0.0  # time.monotonic() of the last start
    broken_queue: bool = False  # its writer died mid-message: nothing more can come from this queue
    failures_in_a_row: int = 0  # failures since it last ran well (HEALTHY_AFTER_S or a delivered race)
    restart_at: float | None = None  # time.monotonic() of the pending restart while it waits (back-off)
    recent_restarts: list = field(default_factory=list)  # time.monotonic() of restarts in the window
    given_up: str | None = None  # why the slot is no longer restarted

    @property
    def active(self) -> bool:
        return self.given_up is None


class CollectorPool:
    """`target(index, rollout_queue, heartbeat, stop_event, *args)` is the collector's main function.

    A dead or stalled collector is restarted, the first time at once, then after 1 s, 2 s, 4 s ... (capped
    at 60 s) while it keeps failing soon after its start. A slot restarted more than `max_restarts` times
    within `restart_window_s` is given up with a log line saying why; the run goes on with the others, and
    `active_count()` says how many slots are left (0: the learner should stop).
    """

    def __init__(
        self,
        mp_context,
        target: Callable,
        args: tuple,
        count: int,
        queue_size: int,
        log: Callable[[str], None] = print,
        backoff_s: tuple = RESTART_BACKOFF_S,
        max_restarts: int = MAX_RESTARTS,
        restart_window_s: float = RESTART_WINDOW_S,
        healthy_after_s: float = HEALTHY_AFTER_S,
    ):
        self.ctx = mp_context
        self.target = target
        self.args = args
        self.queue_size = queue_size
        self.log = RepeatFilter(log)
        self.backoff_s = tuple(backoff_s)
        self.max_restarts = int(max_restarts)
        self.restart_window_s = float(restart_window_s)
        self.healthy_after_s = float(healthy_after_s)
        self.stop_event = mp_context.Event()
        self.slots = [CollectorSlot(index=i) for i in range(count)]
        self._next_slot = 0
        self._salvaged: deque = deque()  # (index, envelope) left in the queues of dead collectors

    def start(self) -> None:
        for slot in self.slots:
            self._spawn(slot)

    def active_count(self) -> int:
        """Slots still run or restarted: those not given up after too many restarts."""
        return sum(1 for slot in self.slots if slot.active)

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
        slot.broken_queue = False
        slot.restart_at = None
        slot.started_at = time.monotonic()
        self.log(f"collector {slot.index} started (pid {slot.process.pid})")

    def _failure(self, slot: CollectorSlot, now_wall: float, stall_timeout_s: float) -> str | None:
        """Why the running collector of `slot` must be replaced, or None."""
        process = slot.process
        if slot.broken_queue:  # its write end closed: it exited, or is exiting
            process.join(1.0)
        if not process.is_alive():
            return f"died with exit code {process.exitcode}"
        if slot.broken_queue:
            return "left a broken queue (killed in the middle of sending a race)"
        if now_wall - slot.heartbeat.value > stall_timeout_s:
            return f"gave no sign of life for {now_wall - slot.heartbeat.value:.0f} s"
        return None

    def check(self, stall_timeout_s: float) -> list[int]:
        """Restart dead or stalled collectors whose back-off has passed; returns the indices restarted."""
        restarted = []
        now_wall, now = time.time(), time.monotonic()
        for slot in self.slots:
            if not slot.active:
                continue
            if slot.restart_at is None:  # running: is it well?
                reason = self._failure(slot, now_wall, stall_timeout_s)
                if reason is None:
                    continue
                self._kill(slot)
                ran_well = slot.rollouts_since_start > 0 or now - slot.started_at >= self.healthy_after_s
                slot.failures_in_a_row = 1 if ran_well else slot.failures_in_a_row + 1
                slot.recent_restarts = [t for t in slot.recent_restarts if now - t < self.restart_window_s]
                if len(slot.recent_restarts) >= self.max_restarts:
                    self._give_up(slot, reason)
                    continue
                delay = self.backoff_s[min(slot.failures_in_a_row - 1, len(self.backoff_s) - 1)]
                slot.restart_at = now + delay
                when = "restarting it" if delay <= 0 else f"restarting it in {delay:g} s"
                self.log(f"collector {slot.index} {reason}: {when}")
            if now >= slot.restart_at:
                self.log.forget()  # counts of repeated lines, then every message may be logged again
                slot.restarts += 1
                slot.recent_restarts.append(now)
                self._spawn(slot)
                restarted.append(slot.index)
        return restarted

    def _give_up(self, slot: CollectorSlot, reason: str) -> None:
        slot.given_up = f"{reason}, after {len(slot.recent_restarts)} restarts within {self.restart_window_s:g} s"
        slot.restart_at = None
        self.log.forget()
        left = self.active_count()
        self.log(
            f"collector {slot.index} {slot.given_up}: not restarting it again; "
            + (f"the run goes on with {left} collector(s)" if left else "no collector is left")
        )

    def get_rollout(self, timeout_s: float):
        """The next rollout of any collector, serving queues in turn; None if none came within the timeout."""
        if self._salvaged:
            return self._salvaged.popleft()
        deadline = time.perf_counter() + timeout_s
        while True:
            for _ in range(len(self.slots)):
                slot = self.slots[self._next_slot]
                self._next_slot = (self._next_slot + 1) % len(self.slots)
                if slot.queue is None or slot.broken_queue:  # waiting for a restart, or given up
                    continue
                try:
                    item = slot.queue.get_nowait()
                    slot.rollouts_since_start += 1
                    return slot.index, item
                except queue.Empty:
                    continue
                except (EOFError, OSError, ValueError) as e:  # a queue broken by a killed writer
                    slot.broken_queue = True  # read no more from it: check() replaces the collector
                    self.log(f"collector {slot.index}'s queue is broken ({type(e).__name__}); it will be restarted")
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
            if not process.is_alive():
                self._salvage(slot)
            slot.queue.cancel_join_thread()
            slot.queue.close()
            slot.queue = None

    def _salvage(self, slot: CollectorSlot) -> None:
        """Keep the whole races a dead collector left in its queue (served first by get_rollout). Its
        writer is gone, so reading cannot block: a half-written race reads as end-of-file and is dropped."""
        if slot.broken_queue or self.stop_event.is_set():
            return
        for _ in range(self.queue_size + 1):
            try:
                self._salvaged.append((slot.index, slot.queue.get_nowait()))
            except queue.Empty:
                return
            except (EOFError, OSError, ValueError):
                self.log(f"collector {slot.index} died in the middle of sending a race: that race is lost")
                return

    def stop(self, grace_s: float = 5.0) -> None:
        """Ask every collector to stop, then terminate what is left: no orphan survives."""
        self.stop_event.set()
        deadline = time.time() + grace_s
        for slot in self.slots:
            if slot.process is None or slot.queue is None:
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
        self.log.flush()

    def summary(self) -> list[str]:
        return [
            f"collector {slot.index}: {slot.rollouts_since_start} rollouts since its last start, restarted {slot.restarts} time(s)"
            + (f"; given up: {slot.given_up}" if slot.given_up else "")
            for slot in self.slots
        ]
