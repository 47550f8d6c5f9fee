"""Killing a collector while it is known to be in the middle of writing an item into its queue's pipe."""

import array
import fcntl
import os
import signal
import termios
import time


def bytes_in_pipe(connection) -> int:
    """How many bytes wait to be read in the pipe behind a multiprocessing connection."""
    count = array.array("i", [0])
    fcntl.ioctl(connection.fileno(), termios.FIONREAD, count)
    return count[0]


def kill_mid_write(pool, item_bytes: int, wait_s: float = 120.0) -> None:
    """SIGKILL slot 0's collector once its item is partly in the pipe. Bytes waiting there and an item larger than the
    pipe holds mean its writer is blocked mid-message (it has started and cannot have finished): known by what the
    pipe holds, not by a sleep guessed long enough. `wait_s` bounds a hang only."""
    reader = pool.slots[0].queue._reader
    assert item_bytes > fcntl.fcntl(reader.fileno(), fcntl.F_GETPIPE_SZ), "an item the pipe holds whole is never mid-write"
    deadline = time.monotonic() + wait_s
    while bytes_in_pipe(reader) == 0:
        assert time.monotonic() < deadline, f"the collector wrote nothing in {wait_s} s"
        time.sleep(0.05)
    process = pool.slots[0].process
    assert process.is_alive()
    os.kill(process.pid, signal.SIGKILL)
    process.join(10)
