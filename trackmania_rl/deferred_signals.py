"""SIGINT and SIGTERM held back for a while: noted as they come, then handed to the handlers they would have had.

For work that a handler raising in the middle of it would break: waiting on a thread (Python 3.11's join(), interrupted
by a handler that raises, marks a thread that is still running finished, bpo-45274: agents/precision.py's probe), or
spawning child processes (one interrupted while it is handed its start-up data would get half of it: learner/
run_folder.py StopSignals.defer).

The standard library only: scripts/train.py uses it (through StopSignals) before torch loads.
"""

from __future__ import annotations

import signal
import threading

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class DeferredSignals:
    """`start()`: from then on each of `signums` is only noted. `end()`: the handlers found at start are put back, in
    the order of `signums`, then every noted signal is raised again, in the order it came. Usable once, or as `with`.

    No signal is lost while `end()` runs: one switch, for all signals at once, makes this object's handler pass a
    signal straight on to the handler it found, so that a signal arriving before its own handler is back is not
    noted too late to be raised; and each step (a restore, a raise) runs in a `finally` of the one before, so that a
    handler that raises meanwhile skips none of them. Python runs signal handlers on the main thread only, and only
    it may set them: elsewhere start() and end() do nothing."""

    def __init__(self, signums=STOP_SIGNALS):
        self.signums = tuple(signums)
        self._previous: dict = {}
        self._noted: list[int] = []
        self._noting = False

    def start(self) -> DeferredSignals:
        if threading.current_thread() is not threading.main_thread():
            return self
        self._noting = True
        try:
            for signum in self.signums:
                previous = signal.getsignal(signum)  # known before this handler is in place, which may run at once
                self._previous[signum] = signal.SIG_DFL if previous is None else previous  # None: not set from Python
                signal.signal(signum, self._handle)
        except BaseException:  # a signal not yet held back came, and its handler raised: put back what was changed
            self.end()
            raise
        return self

    def end(self) -> None:
        if not self._noting:
            return
        self._noting = False  # the switch: from here on a signal goes on to its own handler
        try:
            _each(lambda item: signal.signal(*item), list(self._previous.items()))
        finally:
            _each(signal.raise_signal, self._noted)

    def __enter__(self) -> DeferredSignals:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.end()

    def _handle(self, signum, frame) -> None:
        if self._noting:
            self._noted.append(signum)
            return
        handler = self._previous[signum]  # end() has begun and this signal's handler is not back yet
        if callable(handler):
            handler(signum, frame)
        else:  # SIG_DFL or SIG_IGN: the system's action, taken by raising the signal again with it back in place
            signal.signal(signum, handler)
            signal.raise_signal(signum)


def _each(call, items: list) -> None:
    """call(item) for every item, in order, even where one raises (a signal handler may, at any step): each later call
    runs in a `finally` of the one before, and the last exception comes out."""
    if items:
        try:
            call(items[0])
        finally:
            _each(call, items[1:])
