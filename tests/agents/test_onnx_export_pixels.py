"""The acting network of a pixels-only game as ONNX (agents/onnx_export.py, scripts/export.py): Atari Enduro's
network (config_files/enduro.py: the last 4 grey 84 x 84 frames as channels, 9 actions) exports with a frame input
(B, 4, 84, 84) uint8, ONNX Runtime gives the torch network's Q values on it, every one of the 4 frames counts, and the
sidecar describes the stack and the Gymnasium backend's preprocessing. Needs the onnx extra (not ale-py: no game is
played here)."""

import hashlib
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from trackmania_rl.agents import onnx_export  # noqa: E402
from trackmania_rl.agents.acting import make_inference_network  # noqa: E402
from trackmania_rl.agents.exploration import midpoint_taus  # noqa: E402
from trackmania_rl.agents.iqn import make_network, save_network  # noqa: E402
from trackmania_rl.config.loader import frame_shape, load_config  # noqa: E402
from trackmania_rl.config.values import settings_json  # noqa: E402
from trackmania_rl.games import float_layout_for  # noqa: E402
from trackmania_rl.games.gymnasium.frames import describe_preprocessing  # noqa: E402

pytestmark = pytest.mark.onnx

REPO_ROOT = Path(__file__).resolve().parents[2]
ENDURO_CONFIG = REPO_ROOT / "config_files" / "enduro.py"
STACK, SIZE, ACTIONS = 4, 84, 9  # what config_files/enduro.py sets


def acting_q(network, cfg, layout, frames, floats) -> np.ndarray:
    """The collectors' decision: their acting program (MeanQAtFixedTaus) at the iqn_k midpoint fractions."""
    acting = make_inference_network(cfg, layout, len(cfg.inputs), jit=False)
    acting.load_state_dict_from(network)
    q = acting.mean_q_at(midpoint_taus(cfg.iqn_k))
    return np.stack([q(frames[i], floats[i]) for i in range(len(frames))])


def torch_q(network, cfg, frames, floats) -> np.ndarray:
    """The torch network itself: its quantile values at the midpoint fractions, averaged (no acting program)."""
    with torch.no_grad():
        quantiles, _ = network(torch.as_tensor(frames), torch.as_tensor(floats), cfg.iqn_k, midpoint_taus(cfg.iqn_k))
    return quantiles.mean(dim=1).numpy()  # (B, K, A) -> (B, A)


def states(cfg, layout, batch, seed):
    """Random frame stacks whose 4 frames all differ, and floats of the layout's spread."""
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 256, (batch, *frame_shape(cfg)), dtype=np.uint8)
    floats = (layout.mean + layout.std * rng.standard_normal((batch, layout.dim))).astype(np.float32)
    return frames, floats


@pytest.fixture(scope="module")
def enduro():
    """(cfg, layout, network, its model) for Enduro's network at its real size."""
    cfg = load_config(ENDURO_CONFIG)
    layout = float_layout_for(cfg)
    torch.manual_seed(0)
    network = make_network(cfg, layout, len(cfg.inputs)).eval()
    return cfg, layout, network, onnx_export.export_acting_network(network, cfg.iqn_k)


def test_the_config_is_a_stack_of_4_frames_and_9_actions(enduro):
    cfg, layout, network, _ = enduro
    assert cfg.game_backend == "gymnasium" and frame_shape(cfg) == (STACK, SIZE, SIZE) and len(cfg.inputs) == ACTIONS
    assert tuple(network.image_shape) == (STACK, SIZE, SIZE)


def test_onnx_runtime_takes_frame_stacks_and_gives_the_torch_networks_q_values(enduro):
    cfg, layout, network, model = enduro
    policy = onnx_export.OnnxPolicy(model)
    (frame_input, float_input) = policy.session.get_inputs()
    assert frame_input.name == "frame" and frame_input.type == "tensor(uint8)" and frame_input.shape[1:] == [STACK, SIZE, SIZE]
    assert float_input.type == "tensor(float)" and float_input.shape[1:] == [layout.dim]
    frames, floats = states(cfg, layout, 6, seed=1)
    expected = torch_q(network, cfg, frames, floats)
    np.testing.assert_allclose(expected, acting_q(network, cfg, layout, frames, floats), rtol=1e-5, atol=1e-5)
    for batch in (1, 6):  # the batch axis is dynamic
        q = policy(frames[:batch], floats[:batch])
        assert q.shape == (batch, ACTIONS) and q.dtype == np.float32
        np.testing.assert_allclose(q, expected[:batch], rtol=1e-4, atol=1e-5)
        assert (q.argmax(axis=1) == expected[:batch].argmax(axis=1)).all()


@pytest.mark.parametrize("channel", range(STACK))
def test_each_frame_of_the_stack_counts_in_its_place(enduro, channel):
    """A model that read one channel only, or the frames in another order, would give other Q values here."""
    cfg, layout, network, model = enduro
    frames, floats = states(cfg, layout, 2, seed=2)
    changed = frames.copy()
    changed[:, channel] = 255 - changed[:, channel]
    swapped = frames.copy()
    swapped[:, [channel, (channel + 1) % STACK]] = frames[:, [(channel + 1) % STACK, channel]]
    policy = onnx_export.OnnxPolicy(model)
    before = policy(frames, floats)
    for other in (changed, swapped):
        q = policy(other, floats)
        np.testing.assert_allclose(q, torch_q(network, cfg, other, floats), rtol=1e-4, atol=1e-5)
        assert np.abs(q - before).max() > 1e-4


def test_the_sidecar_describes_the_stack_and_the_gymnasium_preprocessing(enduro):
    cfg, layout, _, model = enduro
    sidecar = onnx_export.policy_sidecar(cfg, layout, cfg.game_backend, model, 5)
    session = onnx_export.OnnxPolicy(model).session
    dtypes = {"tensor(uint8)": "uint8", "tensor(float)": "float32"}
    described = [(i.name, dtypes[i.type], i.shape) for i in session.get_inputs()]
    assert described == [(i["name"], i["dtype"], i["shape"]) for i in sidecar["inputs"]]
    frame = sidecar["frame"]
    assert frame["shape"] == [STACK, SIZE, SIZE] and frame["stack"] == STACK and frame["dtype"] == "uint8"
    assert frame["channels_per_frame"] == 1
    assert frame["preprocessing"] == describe_preprocessing(cfg)
    assert "ALE/Enduro-v5" in frame["preprocessing"] and "the last 4 such frames stacked" in frame["preprocessing"]
    assert sidecar["n_actions"] == ACTIONS and sidecar["actions"] == [dict(a) for a in cfg.inputs]
    assert sidecar["ms_per_action"] == pytest.approx(4000 / 60, abs=1e-6)  # 4 frames at 60 Hz: not a whole number of ms
    assert [s["name"] for s in sidecar["state_float"]["layout"]] == layout.names() and sidecar["state_float"]["dim"] == layout.dim
    assert sidecar["policy_version"] == 5 and sidecar["model_sha256"] == hashlib.sha256(model).hexdigest()
    json.dumps(sidecar, allow_nan=False)  # plain JSON


def load_script():
    spec = importlib.util.spec_from_file_location("export_script", REPO_ROOT / "scripts" / "export.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_export_script_exports_an_enduro_model_folder(enduro, tmp_path, capsys):
    """scripts/export.py on weights saved with their settings.json: its own check (ONNX Runtime against the acting
    program on random states of the model's shape) passes, and the files it writes are the model and its sidecar."""
    cfg, layout, network, _ = enduro
    folder = tmp_path / "model"
    folder.mkdir()
    save_network(network, folder / "weights.torch")
    (folder / "settings.json").write_text(settings_json(cfg))
    out = tmp_path / "enduro.onnx"
    code = load_script().main(["--weights", str(folder / "weights.torch"), "--onnx", str(out), "--policy-version", "3"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    printed = json.loads(captured.out)
    assert printed["check_same_action_fraction"] == 1.0 and printed["check_max_abs_q_diff"] < 1e-4
    model = out.read_bytes()
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert sidecar["game"] == "gymnasium" and sidecar["frame"]["shape"] == [STACK, SIZE, SIZE] and sidecar["frame"]["stack"] == STACK
    assert sidecar["frame"]["preprocessing"] == describe_preprocessing(cfg) and sidecar["model_sha256"] == hashlib.sha256(model).hexdigest()
    frames, floats = states(cfg, layout, 3, seed=4)
    np.testing.assert_allclose(onnx_export.OnnxPolicy(model)(frames, floats), torch_q(network, cfg, frames, floats), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("colour", [False, True])
def test_export_script_exports_a_pixels_only_carracing_model(tmp_path, capsys, colour):
    """config_files/carracing_pixels.py's network: 4 stacked 48 x 48 frames (grey, or in colour: 3 channels each), the
    clock and previous actions as floats; the export's own check passes and the sidecar says so."""
    cfg = load_config(REPO_ROOT / "config_files" / "carracing_pixels.py").replace(frame_colour=colour)
    per_frame = 3 if colour else 1
    layout = float_layout_for(cfg)
    torch.manual_seed(1)
    network = make_network(cfg, layout, len(cfg.inputs)).eval()
    folder = tmp_path / "model"
    folder.mkdir()
    save_network(network, folder / "weights.torch")
    (folder / "settings.json").write_text(settings_json(cfg))
    out = tmp_path / "pixels.onnx"
    code = load_script().main(["--weights", str(folder / "weights.torch"), "--onnx", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["check_same_action_fraction"] == 1.0
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert sidecar["game"] == "carracing" and sidecar["frame"]["stack"] == 4
    assert sidecar["frame"]["shape"] == [4 * per_frame, cfg.H_downsized, cfg.W_downsized]
    assert sidecar["frame"]["channels_per_frame"] == per_frame
    assert "the last 4 such frames stacked as channels" in sidecar["frame"]["preprocessing"]
    assert [s["name"] for s in sidecar["state_float"]["layout"]] == ["mini_race_clock", "previous_actions"]
    frames, floats = states(cfg, layout, 3, seed=5)
    model = out.read_bytes()
    np.testing.assert_allclose(onnx_export.OnnxPolicy(model)(frames, floats), torch_q(network, cfg, frames, floats), rtol=1e-4, atol=1e-5)
