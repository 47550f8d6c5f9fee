"""The policy as ONNX (agents/onnx_export.py) against the collectors' own decision: parity and cost.

- `export.same_action_fraction` (target >= 0.999) and `export.max_abs_q_diff`: the shipped model
  (models/carracing_default) plays greedy races on the final test seeds (AGREEMENT_SEEDS, 500000-500002) through
  the collectors' acting program, every state it decided on is recorded, then ONNX Runtime (CPU, one thread,
  batch 1, as a game client decides) decides on the same states: the share of states where both pick the same
  action, and the largest difference of a Q value. `..._vs_forward` fields compare with IQNNetwork.forward.
- `export.decision_us_after_render_onnx` beside `export.decision_us_after_render_acting`: one decision right after
  a render, ONNX Runtime against the acting program, alternated (`benchmarks/game.py`
  `time_decisions_after_render`, the collector's torch settings: one thread).
- `export.export_s`: one export (torch's exporter, the first GET /v1/policy?format=onnx of a run);
  `export.refill_ms`: the exported graph refilled with other weights (every later version served);
  `export.model_bytes`.
Needs the onnx extra (pip install -e ".[onnx]"); not part of `all`.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch

from trackmania_rl.agents import onnx_export
from trackmania_rl.agents.acting import acting_torch_settings
from trackmania_rl.benchmarks.game import AGREEMENT_SEEDS, SHIPPED_WEIGHTS, time_decisions_after_render
from trackmania_rl.evaluation.evaluate import EvaluationError, make_eval_game, open_policy
from trackmania_rl.rollouts.greedy import play_race

TARGET = ">= 0.999"


def recorded_states(policy) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(frames (N, 1, H, W), floats (N, D), the acting program's Q (N, A)) of every decision `policy` made in its
    greedy races on AGREEMENT_SEEDS."""
    frames, floats, q_values = [], [], []

    def record(step, frame, state_float, decision):
        frames.append(np.array(frame))
        floats.append(np.array(state_float, dtype=np.float32))
        q_values.append(np.array(decision[3]))

    game = make_eval_game(policy)
    try:
        with acting_torch_settings():
            for seed in AGREEMENT_SEEDS:
                play_race(game, policy, seed, record)
    finally:
        game.close()
    return np.stack(frames), np.stack(floats), np.stack(q_values)


def forward_q(policy, frames: np.ndarray, floats: np.ndarray) -> np.ndarray:
    """IQNNetwork.forward's mean Q at the acting fractions, in batches."""
    taus = policy.inferer.taus
    out = []
    with torch.inference_mode():
        for start in range(0, len(frames), 256):
            img, x = torch.from_numpy(frames[start : start + 256]), torch.from_numpy(floats[start : start + 256])
            out.append(policy.network(img, x, taus.shape[1], taus)[0].mean(dim=1).numpy())
    return np.concatenate(out)


def run(args):
    quick = getattr(args, "quick", False)
    try:
        policy = open_policy(weights=SHIPPED_WEIGHTS)
    except EvaluationError as e:
        yield {"figure": "export.same_action_fraction", "value": None, "skipped": str(e)}
        return
    start = time.perf_counter()
    model = onnx_export.export_acting_network(policy.network, policy.cfg.iqn_k)
    export_s = time.perf_counter() - start
    refill_ms = []
    for _ in range(3 if quick else 10):
        start = time.perf_counter()
        onnx_export.with_weights(model, policy.network.state_dict())
        refill_ms.append(1000 * (time.perf_counter() - start))
    onnx_policy = onnx_export.OnnxPolicy(model, threads=1)

    frames, floats, acting_q = recorded_states(policy)
    onnx_q = np.concatenate([onnx_policy(frames[i : i + 1], floats[i : i + 1]) for i in range(len(frames))])
    torch_q = forward_q(policy, frames, floats)
    same = onnx_q.argmax(axis=1) == acting_q.argmax(axis=1)
    top_two = np.sort(acting_q, axis=1)[:, -2:]
    yield {
        "figure": "export.same_action_fraction",
        "value": round(float(same.mean()), 5),
        "unit": "fraction",
        "target": TARGET,
        "decisions": int(len(same)),
        "different": int((~same).sum()),
        "seeds": list(AGREEMENT_SEEDS),
        "same_action_fraction_vs_forward": round(float(np.mean(onnx_q.argmax(axis=1) == torch_q.argmax(axis=1))), 5),
        "median_gap_best_to_second_q": round(float(np.median(top_two[:, 1] - top_two[:, 0])), 4),
    }
    yield {
        "figure": "export.max_abs_q_diff",
        "value": float(np.abs(onnx_q - acting_q).max()),
        "unit": "Q",
        "against": "the acting program (MeanQAtFixedTaus)",
        "max_abs_q_diff_vs_forward": float(np.abs(onnx_q - torch_q).max()),
        "max_abs_q": round(float(np.abs(acting_q).max()), 3),
    }

    cfg = policy.cfg
    with acting_torch_settings():
        paths = {
            "acting": lambda f, s: policy(f, s)[3],
            "onnx": lambda f, s: onnx_policy(f[None], s[None])[0],
        }
        times = time_decisions_after_render(cfg, paths, 2 if quick else 6, 150, agree=("acting", "onnx"))
    common = {"decisions": len(times["acting"]), "iqn_k": cfg.iqn_k, "threads": 1, "batch": 1, "weights": "models/carracing_default"}
    for name, path in (("acting", "acting program (MeanQAtFixedTaus)"), ("onnx", "ONNX Runtime, CPU provider, 1 intra-op thread")):
        yield {
            "figure": f"export.decision_us_after_render_{name}",
            "value": round(statistics.median(times[name]) / 1e3, 1),
            "unit": "us",
            "path": path,
            **common,
        }
    yield {"figure": "export.export_s", "value": round(export_s, 3), "unit": "s", "path": "torch.onnx.export (dynamo), opset 20"}
    yield {"figure": "export.refill_ms", "value": round(statistics.median(refill_ms), 2), "unit": "ms", "samples": len(refill_ms)}
    yield {"figure": "export.model_bytes", "value": len(model), "unit": "bytes"}
