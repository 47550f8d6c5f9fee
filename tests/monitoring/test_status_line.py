"""The terminal status line: a log line printed while it is drawn erases it first, so the two are never mixed."""

import io
import os
import subprocess
import sys
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


def _output_of_a_process_logging(stdout) -> None:
    """A real process sharing the learner's output (as a collector or a rank does) printing one log line."""
    code = "from trackmania_rl.monitoring.status_line import print_line; print_line('[collector 3] restarted')"
    subprocess.run([sys.executable, "-c", code], stdout=stdout, check=True, timeout=60)


def test_a_process_sharing_the_terminal_erases_the_status_line_before_its_log_line():
    leader, follower = os.openpty()  # a real terminal, as the learner's is
    try:
        _output_of_a_process_logging(follower)
        os.close(follower)
        follower = None
        output = b""
        while b"\n" not in output:
            output += os.read(leader, 1024)
    finally:
        for fd in (leader, follower):
            if fd is not None:
                os.close(fd)
    assert output.replace(b"\r\n", b"\n") == (ERASE + "[collector 3] restarted\n").encode()


def test_a_process_writing_to_a_log_file_prints_its_line_alone(tmp_path):
    with open(tmp_path / "run.log", "wb") as file:
        _output_of_a_process_logging(file)
    assert (tmp_path / "run.log").read_bytes() == b"[collector 3] restarted\n"


LOG_AFTER_STDIN_ENDS = """
import sys
from pathlib import Path
from trackmania_rl.monitoring.status_line import StatusLine, print_line
print_line("first")
sys.stdin.read()  # until the test has closed its end of the output
for i in range(100):
    print_line(f"[collector 0] line {i}")
Path(sys.argv[1]).write_text("went on")
"""


def test_a_process_whose_output_reader_left_goes_on_and_exits_0(tmp_path):
    marker = tmp_path / "marker"
    process = subprocess.Popen(
        [sys.executable, "-c", LOG_AFTER_STDIN_ENDS, str(marker)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout.readline() == b"first\n"
    process.stdout.close()  # as `train.py | head -1` does after its line
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0 and marker.read_text() == "went on", err.decode()
    assert err == b""  # no BrokenPipeError, not even at the interpreter's exit


def test_a_process_started_with_stdout_closed_goes_on_and_exits_0(tmp_path):
    marker = tmp_path / "marker"
    command = f"{sys.executable} -c '{LOG_AFTER_STDIN_ENDS}' {marker} >&- < /dev/null"
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and marker.read_text() == "went on", result.stderr
