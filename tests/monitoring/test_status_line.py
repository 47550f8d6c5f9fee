"""The terminal status line: a log line printed while it is drawn erases it first, so the two are never mixed."""

import io
from types import SimpleNamespace

from trackmania_rl.learner.train_loop import log
from trackmania_rl.monitoring.status_line import StatusLine, clear_shown

ERASE = "\r\033[K"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _learner() -> SimpleNamespace:
    stats = SimpleNamespace(
        best_race_time_ms={}, latest_eval_native_score={}, frames_played=1234, races=3, races_finished=1, batches_done=7
    )
    return SimpleNamespace(stats=stats, window={}, buffer=[0] * 10)


def test_a_log_line_erases_the_drawn_status_line_first_and_only_once(capsys):
    terminal = Terminal()
    status = StatusLine(stream=terminal)
    status.update(_learner())
    assert terminal.getvalue().startswith(ERASE + "frames 1,234 | races 3")
    drawn = terminal.getvalue()

    log("checkpoint saved")
    assert terminal.getvalue() == drawn + ERASE  # erased before the line was printed
    assert capsys.readouterr().out == "[learner] checkpoint saved\n"

    log("another line")  # nothing drawn since: nothing more to erase
    clear_shown()
    assert terminal.getvalue() == drawn + ERASE


def test_a_status_line_written_to_a_log_file_is_never_erased(capsys):
    file = io.StringIO()  # not a terminal: a line every period, nothing redrawn
    status = StatusLine(stream=file)
    status.update(_learner())
    log("a line")
    assert file.getvalue().startswith("[status] frames 1,234") and ERASE not in file.getvalue()
