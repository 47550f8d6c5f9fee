"""Export a trained network's greedy decision as ONNX, for game clients in any language (ONNX Runtime).

    python scripts/export.py --weights models/carracing_default/weights.torch --onnx policy.onnx
    python scripts/export.py --run save/carracing_default --onnx out/policy.onnx --policy-version 412
    python scripts/export.py --weights w.torch --config my_config.py --onnx policy.onnx

Writes OUT.onnx and its sidecar OUT.json. The model: inputs `frame` (uint8, [batch, C, H, W]: the last
C = frame_stack grey frames, oldest first, or 3 x frame_stack with frame_colour, each frame's R, G, B; C = 1 for the default
CarRacing config) and `state_float` (float32, [batch, D],
the raw floats: normalised inside), output `q_values` (float32, [batch, n_actions]): the mean Q over the
config's iqn_k fixed midpoint quantile fractions, whose argmax (the lowest index on ties) is the action a
collector takes when greedy. The sidecar says what a client needs: those names and shapes, the action set,
the frame's stack and preprocessing, the float layout by name, the quantile fractions, the policy version
(--policy-version; null when not given). The export is then checked: ONNX Runtime and the collectors'
acting program decide on random states, and the largest Q difference is printed (one JSON line).

Weights and config are found as for evaluate.py (--config FILE, else the settings.json beside the weights,
else config_files/config.py). Needs the optional extra: pip install -e ".[onnx]". Bad arguments (a missing
file, weights that do not fit the config, an output name not ending in .onnx, the extra not installed)
print an error naming the problem and exit 2; nothing is written then.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from trackmania_rl.evaluation import evaluate as evaluation

CHECK_STATES = 32
CHECK_TOLERANCE = 1e-3  # float rounding differs between runtimes by ~1e-6 on Q values of order 1-100


def _version(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value}: a policy version is >= 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--weights", help="a weights file (state_dict, e.g. models/carracing_default/weights.torch)")
    source.add_argument("--run", help="a run folder (its newest complete checkpoint) or a checkpoint or model folder")
    parser.add_argument(
        "--config", default=None, help="a settings.json or a Python config file (default: the settings.json beside the weights)"
    )
    parser.add_argument("--onnx", required=True, help="the model file to write (OUT.onnx; the sidecar goes to OUT.json)")
    parser.add_argument("--policy-version", type=_version, default=None, help="the policy version recorded in the sidecar (default: null)")
    return parser


def check_export(policy, model: bytes, rng: np.random.Generator) -> dict:
    """ONNX Runtime against the acting program (`policy`, a GreedyPolicy) on random states."""
    from trackmania_rl.agents.onnx_export import OnnxPolicy

    frames = rng.integers(0, 256, (CHECK_STATES, *policy.network.image_shape), dtype=np.uint8)  # (C, H, W): C stacked frames
    floats = (policy.layout.mean + policy.layout.std * rng.standard_normal((CHECK_STATES, policy.layout.dim))).astype(np.float32)
    onnx_q = OnnxPolicy(model)(frames, floats)
    torch_q = np.stack([policy(frames[i], floats[i])[3] for i in range(CHECK_STATES)])
    return {
        "check_states": CHECK_STATES,
        "check_max_abs_q_diff": float(np.abs(onnx_q - torch_q).max()),
        "check_same_action_fraction": float(np.mean(onnx_q.argmax(axis=1) == torch_q.argmax(axis=1))),
    }


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    onnx_path = Path(args.onnx)
    if onnx_path.suffix != ".onnx":
        print(f"error: --onnx {onnx_path}: the model's name must end in .onnx (its sidecar is written beside it as .json)", file=sys.stderr)
        return 2
    if onnx_path.is_dir():
        print(f"error: --onnx {onnx_path} is a folder: give the model file's name", file=sys.stderr)
        return 2
    try:
        policy = evaluation.open_policy(weights=args.weights, run=args.run, config=args.config)
    except evaluation.EvaluationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from trackmania_rl.agents import onnx_export  # the optional extra: only now

    try:
        onnx_export.require()  # export, and the check after it
    except onnx_export.OnnxUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"exporting {evaluation.describe_source(policy.paths)}", file=sys.stderr)
    model = onnx_export.export_acting_network(policy.network, policy.cfg.iqn_k)
    check = check_export(policy, model, np.random.default_rng(0))
    if check["check_max_abs_q_diff"] > CHECK_TOLERANCE:
        print(f"error: the exported model disagrees with the acting program ({check}); nothing written", file=sys.stderr)
        return 1
    sidecar = onnx_export.policy_sidecar(policy.cfg, policy.layout, policy.cfg.game_backend, model, args.policy_version)
    sidecar_path = onnx_export.write_policy_files(model, sidecar, onnx_path)
    print(json.dumps({"onnx": str(onnx_path), "sidecar": str(sidecar_path), "model_bytes": len(model), **check}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
