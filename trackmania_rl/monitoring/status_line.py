"""The one-line terminal status shown while training (redrawn in place at most once per second). A log line
printed while it is shown would be written onto it: every process that shares the learner's terminal (the learner,
its collectors, a learner group's ranks) prints its log lines with `print_line`, which erases it first."""

from __future__ import annotations

import os
import sys
import time

ERASE_LINE = "\r\033[K"  # back to the line's start, then erase to its end
_drawn: StatusLine | None = None  # the status line drawn on the terminal now, if any


def print_line(text: str, stream=None) -> None:
    """Print one log line on a terminal line of its own: the status line drawn there is erased first, whether this
    process drew it or the learner's process did (its next update draws it again below the line)."""
    stream = sys.stdout if stream is None else stream
    clear_shown()  # this process's own, forgotten as drawn
    _write(stream, (ERASE_LINE if _is_terminal(stream) else "") + text + "\n")


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no stream (stdout closed at start), or a closed one
        return False


def _write(stream, text: str) -> None:
    """Write and flush. An output that is gone (the pipe's reader left, as `| head` does; stdout closed) is let go:
    a run never stops, nor loses its final save, for its console."""
    if stream is None:
        return
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):
        _let_go(stream)


def _let_go(stream) -> None:
    """Point the stream's file at /dev/null: what it still buffers, what is written later and the interpreter's
    flush at exit all succeed there, unseen."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)
    except (AttributeError, OSError, ValueError):  # no file behind it (a closed or in-memory stream): nothing to point
        pass


def clear_shown() -> None:
    """Erase the status line drawn on the terminal, if one is (it is drawn again at its next update)."""
    if _drawn is not None:
        _drawn.clear()


class StatusLine:
    def __init__(self, enabled: bool = True, stream=sys.stdout):
        # a terminal gets the line redrawn every second; a log file gets a new line every 30 s
        self.enabled = enabled
        self.redraw = _is_terminal(stream)
        self.period_s = 1.0 if self.redraw else 30.0
        self.stream = stream
        self._last = 0.0
        self._last_batches = 0
        self._last_time = time.perf_counter()
        self._shown = False

    @staticmethod
    def text(learner, batches_per_s: float) -> str:
        s = learner.stats
        best = min(s.best_race_time_ms.values()) / 1000 if s.best_race_time_ms else None
        scores = ", ".join(f"{k} {v:.0f}" for k, v in sorted(s.latest_eval_native_score.items())) or "-"
        lag = learner.window["policy_lag_versions"][-1] if learner.window.get("policy_lag_versions") else 0.0
        return (
            f"frames {s.frames_played:,} | races {s.races} ({s.races_finished} finished) | "
            f"best lap {f'{best:.2f}s' if best is not None else '-'} | eval score {scores} | "
            f"{batches_per_s:.1f} batches/s | buffer {len(learner.buffer):,} | policy lag {lag:.1f}"
        )

    def update(self, learner) -> None:
        now = time.perf_counter()
        if not self.enabled or now - self._last < self.period_s:
            return
        batches_per_s = (learner.stats.batches_done - self._last_batches) / max(1e-9, now - self._last_time)
        self._last_batches, self._last_time, self._last = learner.stats.batches_done, now, now
        if self.redraw:
            global _drawn
            _write(self.stream, ERASE_LINE + self.text(learner, batches_per_s))
            self._shown, _drawn = True, self
        else:
            _write(self.stream, "[status] " + self.text(learner, batches_per_s) + "\n")

    def clear(self) -> None:
        global _drawn
        if self._shown:
            _write(self.stream, ERASE_LINE)
            self._shown = False
        if _drawn is self:
            _drawn = None
