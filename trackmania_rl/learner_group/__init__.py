"""A learner group: N data-parallel learners of one run (`scripts/train.py --learners N`, docs/cluster.md).

Each rank is a learner of its own (learner/learner.py) with its own replay shard and its own local collectors; every
train step averages the ranks' gradients (one all_reduce) before clipping, so that every rank applies the same
update and the weights stay identical (checked by digests). Rank 0 is the process of scripts/train.py: it publishes
to the remote sources, logs, saves (every rank's shard) and runs the held-out evaluation. Ranks are local processes
(spawn) or, with `--ray ADDRESS`, Ray actors placed one per node.

Open `coordinator.py` (rank 0's side) and `rank.py` (the other ranks) first.
"""
