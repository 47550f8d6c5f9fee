"""What rank 0 hands each rank at the start, over the control group (learner_group/channel.py).

1. a JSON header: the config values every rank learns with (rank 0's, its training precision resolved and CUDA graphs
   off), the game, the rank's device, its local collectors (count, first producer number, the run's total), its cores,
   rank 0's counters after resume, and how many buffer shard files follow;
2. rank 0's online and target weights and optimizer state, one torch file (read back with weights_only=True);
3. the checkpoint's buffer shards for this rank (k mod N = rank), `buffer` ones then `buffer_test` ones, each read
   back and checked as a checkpoint's (replay/buffers.py).
So every rank starts from the same weights and optimizer state as rank 0, whatever the number of ranks the run had.
"""

from __future__ import annotations

import io
from pathlib import Path

import torch

from trackmania_rl.learner.checkpoint import BUFFER, BUFFER_TEST
from trackmania_rl.learner_group.channel import recv_bytes, recv_file, recv_json, send_bytes, send_file, send_json
from trackmania_rl.replay.buffers import read_buffer_file

NAMES = (BUFFER, BUFFER_TEST)


def send_start_state(pg, rank: int, header: dict, learner, shards: dict[str, list[Path]]) -> None:
    """Rank 0's side, for `rank`. `shards`: buffer name -> this rank's shard files of the resumed checkpoint."""
    send_json(pg, {**header, "shards": {name: len(shards.get(name, [])) for name in NAMES}}, rank)
    state = io.BytesIO()
    torch.save(
        {"online": learner.online.state_dict(), "target": learner.target.state_dict(), "optimizer": learner.optimizer.state_dict()}, state
    )
    send_bytes(pg, state.getvalue(), rank)
    for name in NAMES:
        for path in shards.get(name, []):
            send_file(pg, path, rank)


def receive_start_state(pg, workdir: Path, n_actions_of) -> tuple[dict, dict, dict[str, list[dict]]]:
    """A rank's side: (header, {"online", "target", "optimizer"}, buffer name -> saved buffers). `n_actions_of(header)`
    gives the action count the buffers are checked against."""
    header = recv_json(pg, 0)
    state = torch.load(io.BytesIO(recv_bytes(pg, 0)), map_location="cpu", weights_only=True)
    shards: dict[str, list[dict]] = {}
    for name in NAMES:
        shards[name] = []
        for k in range(int(header["shards"][name])):
            path = Path(workdir) / f"start_{name}_{k}"
            recv_file(pg, 0, path)
            try:
                shards[name].append(read_buffer_file(path, n_actions_of(header)))
            finally:
                path.unlink(missing_ok=True)
    return header, state, shards
