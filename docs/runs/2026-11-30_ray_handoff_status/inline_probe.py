"""Ray actors / local processes at N = 2 (benchmark.py ray's paired 20 s windows), with the actors' handoff answers
through the object store (Ray's default: objects above 100 KiB) against returned inline in the reply
(RAY_max_direct_call_object_size = 64 MiB on the node, not in the driver). Arms alternated, PAIRS_PER_BLOCK pairs a
block, BLOCKS blocks an arm. Usage: python inline_probe.py PAIRS_PER_BLOCK BLOCKS"""

import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import ray
import torch
import torch.multiprocessing as torch_mp

from trackmania_rl.agents.iqn import make_network
from trackmania_rl.benchmarks.pipeline import default_config_copy, local_actions_per_s
from trackmania_rl.benchmarks.ray import _run_ray
from trackmania_rl.games import float_layout_for
from trackmania_rl.rollouts.local.shared_network import SharedNetwork
from trackmania_rl.rollouts.ray import cluster

INLINE_BYTES = 64 << 20


def main():
    pairs_per_block, blocks = int(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(1)
    workdir = Path(tempfile.mkdtemp(prefix="inline_probe_"))
    config_path, live = default_config_copy(workdir)
    cfg = live.current
    layout = float_layout_for(cfg)
    weights = {k: v.detach() for k, v in make_network(cfg, layout, len(cfg.inputs)).state_dict().items()}
    ctx = torch_mp.get_context("spawn")
    shared = SharedNetwork(make_network(cfg, layout, len(cfg.inputs)), ctx)
    shared.publish(1, weights)
    results = {"object_store": [], "inline": []}
    for block in range(2 * blocks):
        arm = ("object_store", "inline")[block % 2]
        if arm == "inline":
            os.environ["RAY_max_direct_call_object_size"] = str(INLINE_BYTES)
        head = cluster.LocalNode.head(num_cpus=2, object_store_bytes=256 << 20)
        os.environ.pop("RAY_max_direct_call_object_size", None)  # the node's processes only
        cluster.use_token_file(head.token_path)
        cluster.connect(head.address)
        try:
            for pair in range(pairs_per_block):
                order = ("local", "ray") if pair % 2 == 0 else ("ray", "local")
                rates = {}
                for kind in order:
                    if kind == "local":
                        rates[kind] = local_actions_per_s(ctx, config_path, shared, 2, 20.0)
                    else:
                        rates[kind] = _run_ray(live, weights, 2, 20.0)
                ratio = round(rates["ray"] / rates["local"], 3)
                results[arm].append({"ray": round(rates["ray"], 1), "local": round(rates["local"], 1), "ratio": ratio})
                print(arm, results[arm][-1], flush=True)
        finally:
            ray.shutdown()
            head.stop()
    summary = {arm: {"pairs": rows, "median_ratio": round(statistics.median(r["ratio"] for r in rows), 3)} for arm, rows in results.items()}
    print(json.dumps(summary))
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
