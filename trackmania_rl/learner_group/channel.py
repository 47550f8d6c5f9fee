"""Bytes, JSON and files between two ranks over a gloo process group (the group's control channel).

A message is its length (one int64) then its bytes in chunks of at most CHUNK_BYTES, so that a shard of hundreds of
MB never sits in memory twice. A length of -1 says the sender failed: a JSON error text follows instead. Nothing
received is unpickled: JSON, raw bytes, and files that their reader checks (buffers: replay/buffers.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.distributed as dist

from trackmania_rl.learner_group.rendezvous import wait

CHUNK_BYTES = 64 * 2**20
TAG = 7  # every message of the channel: one sender and one receiver at a time, in order


class SenderFailed(OSError):
    """The other side could not produce what it was to send (its message is the reason)."""


def _send_length(pg, length: int, dst: int) -> None:
    wait(pg.send([torch.tensor([length], dtype=torch.int64)], dst, TAG), f"sending to rank {dst}")


def _recv_length(pg, src: int) -> int:
    length = torch.zeros(1, dtype=torch.int64)
    wait(pg.recv([length], src, TAG), f"receiving from rank {src}")
    return int(length.item())


def send_bytes(pg, data: bytes, dst: int) -> None:
    _send_length(pg, len(data), dst)
    view = memoryview(data)
    for start in range(0, len(data), CHUNK_BYTES):
        chunk = torch.frombuffer(bytearray(view[start : start + CHUNK_BYTES]), dtype=torch.uint8)
        wait(pg.send([chunk], dst, TAG), f"sending to rank {dst}")


def recv_bytes(pg, src: int) -> bytes:
    length = _recv_length(pg, src)
    if length < 0:
        raise SenderFailed(_recv_text(pg, src))
    parts = []
    for start in range(0, length, CHUNK_BYTES):
        chunk = torch.empty(min(CHUNK_BYTES, length - start), dtype=torch.uint8)
        wait(pg.recv([chunk], src, TAG), f"receiving from rank {src}")
        parts.append(chunk.numpy().tobytes())
    return b"".join(parts)


def _recv_text(pg, src: int) -> str:
    return recv_bytes(pg, src).decode(errors="replace")


def send_failure(pg, reason: str, dst: int) -> None:
    """Instead of a message: tell the receiver why it will not come."""
    _send_length(pg, -1, dst)
    send_bytes(pg, reason.encode(), dst)


def send_json(pg, value, dst: int) -> None:
    send_bytes(pg, json.dumps(value, allow_nan=False).encode(), dst)


def recv_json(pg, src: int):
    return json.loads(recv_bytes(pg, src).decode())


def send_file(pg, path: Path, dst: int) -> None:
    """The file's bytes as one message, read in chunks."""
    size = os.path.getsize(path)
    _send_length(pg, size, dst)
    with open(path, "rb") as f:
        for start in range(0, size, CHUNK_BYTES):
            chunk = torch.empty(min(CHUNK_BYTES, size - start), dtype=torch.uint8)
            f.readinto(memoryview(chunk.numpy()))
            wait(pg.send([chunk], dst, TAG), f"sending to rank {dst}")


def recv_file(pg, src: int, path: Path | None) -> int:
    """One message into `path` (None: received and dropped, to keep in step after a failure). An error writing the
    file is raised only once the whole message was received. Returns its size; SenderFailed if the sender failed."""
    length = _recv_length(pg, src)
    if length < 0:
        raise SenderFailed(_recv_text(pg, src))
    error = None
    f = None
    try:
        f = open(path, "wb") if path is not None else None
    except OSError as e:
        error = e
    try:
        for start in range(0, length, CHUNK_BYTES):
            chunk = torch.empty(min(CHUNK_BYTES, length - start), dtype=torch.uint8)
            wait(pg.recv([chunk], src, TAG), f"receiving from rank {src}")
            if f is not None and error is None:
                try:
                    f.write(chunk.numpy().data)
                except OSError as e:
                    error = e
    finally:
        if f is not None:
            try:
                f.close()
            except OSError as e:
                error = error or e
    if error is not None:
        raise error
    return length


def broadcast_bytes(pg, data: bytes | None, root: int, rank: int) -> bytes:
    """`data` of rank `root` on every rank (a collective: every rank calls it)."""
    options = dist.BroadcastOptions()
    options.rootRank = root
    length = torch.tensor([len(data) if rank == root else 0], dtype=torch.int64)
    wait(pg.broadcast([length], options), "broadcast")
    if int(length.item()) == 0:
        return b""
    buffer = torch.frombuffer(bytearray(data), dtype=torch.uint8) if rank == root else torch.empty(int(length.item()), dtype=torch.uint8)
    wait(pg.broadcast([buffer], options), "broadcast")
    return buffer.numpy().tobytes()
