"""The acting network as ONNX: the decision a collector makes, portable to game clients in any language.

ONNX Runtime runs the exported file from C, C++, C#, Java, JavaScript or Python (docs/http-api.md, "Writing a
client"). What is exported is a collector's greedy decision, not the training network:
- inputs `frame` (uint8, (batch, C, H, W): the last frame_stack frames, oldest first, C = frame_stack grey channels or with
  frame_colour 3 x frame_stack, each frame's R, G, B) and `state_float` (float32,
  (batch, D): the raw float inputs in the layout's order); both normalisations are inside the model;
- output `q_values` (float32, (batch, n_actions)): the mean over `iqn_k` quantiles at the fixed midpoint
  fractions (agents/exploration.py `midpoint_taus`), which is what a collector's acting program computes
  (agents/acting.py `MeanQAtFixedTaus`); the greedy action is its argmax, the lowest index on ties.

- `export_acting_network(network, n_quantiles) -> bytes`: the model, through torch's exporter (the
  torch.export-based one; the TorchScript one is deprecated), unoptimised so that every weight stays an
  initializer named after its state_dict entry;
- `with_weights(model, state_dict) -> bytes`: the same graph with other weights of the same architecture
  (milliseconds, against about a second of CPU for an export: the HTTP API exports once per architecture and
  refills per published version, rollouts/http/onnx_policy.py);
- `policy_sidecar(...)`: the JSON a client needs beside the model (action set, each action with every flag the set
  names, SuperTuxKart's drift and nitro included; frame shape and the game's words for its preprocessing; float layout;
  policy version); `write_policy_files` writes both, atomically;
- `OnnxPolicy(model)`: ONNX Runtime on the model (benchmarks, tests, the export check).

The optional `onnx` extra (`pip install -e ".[onnx]"`: onnx, onnxscript, onnxruntime) is imported inside the
functions that need it; without it they raise `OnnxUnavailable` naming what is missing. Nothing else in the
package imports this module at load time.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib.util
import json
import logging
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from trackmania_rl.agents.exploration import midpoint_taus
from trackmania_rl.agents.iqn import IQNNetwork, strip_compile_prefix
from trackmania_rl.config.loader import channels_per_frame
from trackmania_rl.config.loader import frame_shape as config_frame_shape
from trackmania_rl.config.schema import ACTION_FLAGS, KART_ACTION_FLAGS
from trackmania_rl.serialization import atomic_write_bytes

SIDECAR_FORMAT = "trackmania_rl.onnx_policy"
SIDECAR_FORMAT_VERSION = 1
OPSET = 20  # ONNX Runtime >= 1.17 runs it (onnxruntime-node 1.30 in clients/js)
FRAME_INPUT, FLOATS_INPUT, Q_OUTPUT = "frame", "state_float", "q_values"
BATCH_AXIS = "batch"
_WEIGHTS_PREFIX = "network."  # ActingNetwork's attribute: initializer names are "network." + state_dict key
EXPORT_PACKAGES = ("onnx", "onnxscript")  # torch.onnx's exporter
RUN_PACKAGES = ("onnxruntime",)
EXTRA_PACKAGES = EXPORT_PACKAGES + RUN_PACKAGES
EXTRA_HINT = 'pip install -e ".[onnx]"'


class OnnxUnavailable(RuntimeError):
    """The onnx extra is not installed; the message names the missing packages and the install command."""


class WeightsDoNotFit(ValueError):
    """Weights for another architecture than the model's graph; the message names the entries."""


def missing_packages(names=EXTRA_PACKAGES) -> list[str]:
    """Which of the extra's packages are not installed (nothing imported)."""
    return [name for name in names if importlib.util.find_spec(name) is None]


def require(names=EXTRA_PACKAGES) -> None:
    """OnnxUnavailable naming the packages of `names` that are not installed."""
    missing = missing_packages(names)
    if missing:
        raise OnnxUnavailable(f"the ONNX policy needs the onnx extra ({EXTRA_HINT}); missing: {', '.join(missing)}")


class ActingNetwork(nn.Module):
    """(frame uint8 (B, C, H, W), state_float float32 (B, D)) -> Q (B, A): the mean of `network`'s quantile
    values at the fixed fractions `taus` (1, N), i.e. a collector's greedy decision before its argmax."""

    def __init__(self, network: IQNNetwork, taus: torch.Tensor):
        super().__init__()
        self.network = network
        self.register_buffer("taus", taus.detach().to(torch.float32).cpu().clone())

    def forward(self, frame: torch.Tensor, state_float: torch.Tensor) -> torch.Tensor:
        q, _ = self.network(frame, state_float, self.taus.shape[1], self.taus)
        return q.mean(dim=1)


@contextlib.contextmanager
def _quiet_exporter():
    """torch's exporter logs missing optional packages (torchvision) and warns about its internals: not a user's concern."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def export_acting_network(network: IQNNetwork, n_quantiles: int) -> bytes:
    """The ONNX model (serialized ModelProto, opset OPSET, weights inside) of `network`'s greedy decision at
    `n_quantiles` midpoint fractions (the config's `iqn_k`). The network is exported on the CPU, in float32,
    unchanged. OnnxUnavailable without the extra."""
    require(EXPORT_PACKAGES)
    import onnx

    source = _cpu_copy(network)  # the caller's network (maybe on a GPU, maybe training) is left alone
    module = ActingNetwork(source, midpoint_taus(n_quantiles)).eval()
    channels, height, width = source.image_shape
    example = (torch.zeros(2, channels, height, width, dtype=torch.uint8), torch.zeros(2, source.float_dim, dtype=torch.float32))
    batch = torch.export.Dim(BATCH_AXIS, min=1)
    with _quiet_exporter(), torch.no_grad():
        program = torch.onnx.export(
            module,
            example,
            f=None,
            dynamo=True,
            optimize=False,  # keeps every weight an initializer named after its entry (with_weights relies on it)
            opset_version=OPSET,
            input_names=[FRAME_INPUT, FLOATS_INPUT],
            output_names=[Q_OUTPUT],
            dynamic_shapes={"frame": {0: batch}, "state_float": {0: batch}},
            verbose=False,
        )
    model = program.model_proto
    model.doc_string = (
        f"trackmania_rl acting network: {FRAME_INPUT} uint8 (batch, 1, {height}, {width}) and {FLOATS_INPUT} float32 "
        f"(batch, {source.float_dim}) -> {Q_OUTPUT} float32 (batch, {source.n_actions}), the mean Q over {n_quantiles} "
        "midpoint quantile fractions; greedy action = argmax"
    )
    onnx.checker.check_model(model)
    _check_weights_are_initializers(model, network)
    return model.SerializeToString()


def _cpu_copy(network: IQNNetwork) -> IQNNetwork:
    """A float32 CPU copy of `network` in eval mode, without gradients."""
    clone = copy.deepcopy(network).to("cpu", torch.float32).eval()
    for p in clone.parameters():
        p.requires_grad_(False)
    return clone


def _check_weights_are_initializers(model, network: IQNNetwork) -> None:
    names = {init.name for init in model.graph.initializer}
    absent = [key for key in strip_compile_prefix(network.state_dict()) if _WEIGHTS_PREFIX + key not in names]
    if absent:  # the exporter changed how it names weights: with_weights could not refill this model
        raise RuntimeError(f"the exported model does not hold these weights as named initializers: {absent[:4]}")


def with_weights(model: bytes, state_dict: dict) -> bytes:
    """`model` (from export_acting_network) with the weights and normalisation of `state_dict` (tensors or
    numpy arrays by state_dict name) instead of its own: the same graph, so the same architecture. Every
    entry must be in the model with its shape; WeightsDoNotFit names those that are not, or are missing."""
    require(("onnx",))
    import onnx
    from onnx import numpy_helper

    proto = onnx.load_model_from_string(model)
    initializers = {init.name: init for init in proto.graph.initializer}
    weights = {_WEIGHTS_PREFIX + k: v for k, v in strip_compile_prefix(state_dict).items()}
    expected = {name for name in initializers if name.startswith(_WEIGHTS_PREFIX)} - {_WEIGHTS_PREFIX + "cos_frequencies"}
    unexpected, mismatched = sorted(set(weights) - expected), []
    missing = sorted(expected - set(weights))
    arrays = {}
    for name in sorted(set(weights) & expected):
        value = weights[name]
        array = value.detach().cpu().float().numpy() if isinstance(value, torch.Tensor) else np.asarray(value, np.float32)
        shape = tuple(initializers[name].dims)
        if array.shape != shape:
            mismatched.append(f"{name[len(_WEIGHTS_PREFIX) :]} {array.shape} vs {shape}")
        arrays[name] = array
    if unexpected or missing or mismatched:
        problems = [
            f"{what}: {', '.join(n[len(_WEIGHTS_PREFIX) :] if n.startswith(_WEIGHTS_PREFIX) else n for n in items[:4])}"
            for what, items in (("unexpected entries", unexpected), ("missing entries", missing), ("other shapes", mismatched))
            if items
        ]
        raise WeightsDoNotFit(f"the weights do not fit the model's architecture ({'; '.join(problems)})")
    for name, array in arrays.items():
        initializers[name].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(array, np.float32), name))
    return proto.SerializeToString()


# --------------------------------------------------------------------------------------------------
# What a client needs beside the model
# --------------------------------------------------------------------------------------------------
def policy_sidecar(cfg, layout, game_backend: str, model: bytes, policy_version: int | None) -> dict:
    """The JSON sidecar of an exported model: its inputs and output, the decision, the action set, the frame
    and its preprocessing, the float layout, the policy version (None: not known, e.g. a weights file)."""
    from trackmania_rl.games.backend import game_backend as describe_backend

    backend = describe_backend(game_backend)
    frame_shape = list(config_frame_shape(cfg))
    n_actions = len(cfg.inputs)
    taus = midpoint_taus(int(cfg.iqn_k))[0].tolist()
    # every flag any action names, each action giving all of them: a kart's action says drift False, not nothing
    flags = [flag for flag in ACTION_FLAGS + KART_ACTION_FLAGS if any(flag in action for action in cfg.inputs)]
    frame = {
        "shape": frame_shape,
        # the last `stack` frames as channels, oldest first (a race starts with its first frame repeated)
        "stack": int(cfg.frame_stack),
        "channels_per_frame": channels_per_frame(cfg),  # 1: grey; 3: R, G, B in that order
        "dtype": "uint8",
    }
    if backend.frame_renderer is not None:  # a game with a choice of drawing names its own (CarRacing: fast or pygame)
        frame["renderer"] = backend.frame_renderer(cfg)
    frame["preprocessing"] = backend.frame_preprocessing(cfg)
    return {
        "format": SIDECAR_FORMAT,
        "format_version": SIDECAR_FORMAT_VERSION,
        "policy_version": policy_version,
        "game": game_backend,
        "model_sha256": hashlib.sha256(model).hexdigest(),
        "model_bytes": len(model),
        "opset": OPSET,
        "inputs": [
            {"name": FRAME_INPUT, "dtype": "uint8", "shape": [BATCH_AXIS, *frame_shape]},
            {"name": FLOATS_INPUT, "dtype": "float32", "shape": [BATCH_AXIS, int(layout.dim)]},
        ],
        "outputs": [{"name": Q_OUTPUT, "dtype": "float32", "shape": [BATCH_AXIS, n_actions]}],
        "decision": (
            f"{Q_OUTPUT}[b] is the mean of the network's quantile values over the fixed fractions `quantile_fractions`; "
            "the greedy action is its argmax (the lowest index on ties), as a collector acting greedily decides"
        ),
        "quantile_fractions": [round(t, 9) for t in taus],
        "action_flags": flags,
        "actions": [{flag: bool(action.get(flag, False)) for flag in flags} for action in cfg.inputs],
        "n_actions": n_actions,
        "ms_per_action": int(cfg.ms_per_action) if float(cfg.ms_per_action).is_integer() else round(float(cfg.ms_per_action), 6),
        "frame": frame,
        "state_float": {
            "dim": int(layout.dim),
            "layout": [{"name": s.name, "size": s.size} for s in layout.segments],
            "labels": layout.element_labels(),
            "preprocessing": (
                "the raw values in the layout's order (what each holds: trackmania_rl/games/<game>/floats.py), float32; "
                f"the model normalises them itself. `{layout.segments[0].name}` is 0 while acting"
            ),
        },
    }


def write_policy_files(model: bytes, sidecar: dict, onnx_path: str | Path) -> Path:
    """The model at `onnx_path` and its sidecar beside it (same name, .json), each written atomically. Returns
    the sidecar's path."""
    onnx_path = Path(onnx_path)
    sidecar_path = onnx_path.with_suffix(".json")
    atomic_write_bytes(model, onnx_path)
    atomic_write_bytes((json.dumps(sidecar, indent=1) + "\n").encode(), sidecar_path)
    return sidecar_path


# --------------------------------------------------------------------------------------------------
# Running it
# --------------------------------------------------------------------------------------------------
class OnnxPolicy:
    """ONNX Runtime (CPU) on an exported model: `policy(frames (B, C, H, W) uint8, floats (B, D)) -> Q (B, A)`.
    `threads`: its intra-op threads (1: as a collector acts)."""

    def __init__(self, model: bytes, threads: int = 1):
        require(RUN_PACKAGES)
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = int(threads)
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        self.session = onnxruntime.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])

    def __call__(self, frames: np.ndarray, state_floats: np.ndarray) -> np.ndarray:
        feeds = {
            FRAME_INPUT: np.ascontiguousarray(frames, dtype=np.uint8),
            FLOATS_INPUT: np.ascontiguousarray(state_floats, dtype=np.float32),
        }
        return self.session.run([Q_OUTPUT], feeds)[0]
